"""SDT-GNN model averaging (``--strategy model-averaging``): local training per partition, weighted averaging.

Spec: ``shared/specs/sdtgnn.md`` §2.5-2.8. The run reads a partition store (``--partitions DIR``, e.g. written
by ``graphscale partition --method spring``, or one the run writes into the cache with ``--partitioner`` and
``--parts``) with ``p`` parts on ``q`` workers, ``p >= q``; partition ``j`` belongs to worker ``j mod q``.

**An epoch.** Every worker trains each of its partitions for one epoch, one partition at a time and with no
inter-worker traffic: the model starts from the partition's own weights (the averaged model right after an
averaging round), the partition's own optimiser state is restored (with ``--optimizer-state averaged``, the
default, its Adam moments replaced by the averaged ones right after an averaging round; its step count is its own;
with one step per round, full-graph and ``--average-every 1``, the second moment is that of the averaged gradient,
:func:`.averaging.moments_of_mean_gradient`), and the loss is the mean over the
partition's training vertices (its home vertices: masks are set on inner vertices only). Full-neighbour
training (the default) runs the model on the partition's whole local graph (home vertices with their full
in-neighbourhoods, halo vertices with their edges to home vertices); ``--minibatch`` samples mini-batches of
``--batch-size`` home training vertices with ``--fanouts`` inside the partition (SDT-GNN's GraphSAGE setting
is ``--fanouts 25,10 --batch-size 512``). Sources carry original ids (dropout keys) and global in-degrees
(GCN normalisation), so a home vertex's first-layer row equals the full graph's; deeper layers see halo rows
computed from the truncated neighbourhood, the receptive-field approximation of SDT-GNN (§3 reason 2).
Every random choice depends on the partition and the epoch, never on the worker, so the averaged model does
not depend on ``q`` (T3).

**Averaging** every ``--average-every`` epochs (:mod:`.averaging`): ``w = sum_j alpha_j w_j`` with
``alpha_j`` the partition's share of the training vertices, in one flat all-reduce (Ledger ``allreduce``:
``2 (q - 1) P s`` bytes per round, ring model, ``P`` the floating state elements plus the optimiser's moments of
every parameter with ``--optimizer-state averaged``, the default: Adam's two, ``3 P`` for a model whose state is its
parameters; SGD's momentum buffer, ``2 P``).
Why averaged by default: each partition's Adam normalises its own gradient, so a weight with a data gradient in
one partition only takes a full-size step towards zero in every other; with ``--optimizer-state local`` (SDT-GNN's
choice) the averaged model settles at a different fixed point (on Cora, far below ``single``). The epoch's loss
sum is all-reduced under ``control`` (``2 (q - 1) 8`` bytes). Nothing else moves in training: halo rows are local
copies (the exact evaluation's fetched rows go under ``evaluation``, below).

**More partitions than workers** (``p > q``): a worker holds one partition's data, model and optimiser state
at a time; the others' states are on disk (:mod:`.state`), written atomically after every epoch. States are
also written to disk when the run keeps checkpoints, so a resumed run restores every partition exactly, and
whenever ``--state-dir`` is given.

**Evaluation** (:mod:`.evaluation`, ``--evaluation``): each worker counts its home vertices' predictions of the
averaged model, the counts all-reduced. By default exactly: on the partition's local graph where its halo has
``K >= L`` hops, else layer by layer (:class:`.evaluation.LayerwiseEvaluation`): each layer over the home
vertices the targets need at that depth (the first from each partition's own store), the previous layer's rows
of their remote in-neighbours fetched from their owners, one hop at a time (Ledger ``evaluation``); ``--evaluation truncated`` keeps the partition-local forward
(training's truncated receptive field), labelled so in every epoch's ``extra``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from graphscale.config import RunConfig, model_dict
from graphscale.data.block import Block
from graphscale.data.datasets import row_normalize
from graphscale.data.handle import PARTITION_LOCAL, DataHandle
from graphscale.data.sampler import MiniBatchLoader, NeighborSampler
from graphscale.distributed.comm import CONTROL, Comm
from graphscale.distributed.env import DistEnv
from graphscale.metrics.memory import MemoryTracker
from graphscale.metrics.stats import EpochStats
from graphscale.options import option_names
from graphscale.options.model_averaging import OPTIMIZER_STATES, ModelAveragingOptions
from graphscale.registry import STRATEGIES
from graphscale.strategies.base import (
    COUNTS_PER_SPLIT,
    SPLITS,
    Strategy,
    counts_to_metrics,
    make_optimizer,
    masked_loss_sum,
    optimizer_tensors,
    split_counts,
)
from graphscale.strategies.epoch import Epoch
from graphscale.strategies.model_averaging.averaging import (
    all_reduce_average,
    alphas,
    flatten,
    float_tensors,
    moments_of_mean_gradient,
    optimizer_moments,
    unflatten_into,
)
from graphscale.strategies.model_averaging.correction import (
    RowServer,
    batch_sizes,
    correction_step,
    home_targets,
    partition_picks,
    step_key,
)
from graphscale.strategies.model_averaging.evaluation import (
    LayerwiseEvaluation,
    check_evaluation,
    eval_targets,
    evaluation_mode,
)
from graphscale.strategies.model_averaging.link import LinkPartitions, all_home_targets, link_refusal
from graphscale.strategies.model_averaging.state import PartitionStates
from graphscale.strategies.optimizers import set_lr, state_layout


@dataclass
class LocalData:
    """One partition, ready to train on: its whole local graph as a block, node rows, home-vertex masks."""

    part: int
    block: Block
    x: torch.Tensor
    y: torch.Tensor
    masks: dict[str, torch.Tensor]
    num_inner: int
    num_train: int
    orig_ids: torch.Tensor
    sampler: NeighborSampler | None = None  # --minibatch: over the local graph, with global in-degrees
    loader: MiniBatchLoader | None = None

    def tensors(self) -> list[torch.Tensor]:
        b = self.block
        return [self.x, self.y, *self.masks.values(), b.indptr, b.indices, b.src_ids, b.src_deg]


def partitions_of(rank: int, num_parts: int, world_size: int) -> list[int]:
    """The partitions worker ``rank`` trains: ``j`` with ``j mod q == rank``."""
    return list(range(rank, num_parts, world_size))


#: how the report labels each evaluation mode (:func:`.evaluation.evaluation_mode`)
EVAL_LABELS = {"fetch": "exact (rows fetched)", "local": "exact (K-hop halo)", "truncated": "truncated"}


def optimizer_state(sc) -> str:
    """``--optimizer-state``, with the deprecated ``--average-optimizer`` meaning ``averaged``."""
    return "averaged" if sc.average_optimizer else sc.optimizer_state


def averaged_after(epoch: int, every: int) -> bool:
    """Whether the models are averaged at the end of ``epoch``."""
    return (epoch + 1) % every == 0


@STRATEGIES.register("model-averaging")
class ModelAveraging(Strategy):
    """SDT-GNN distributed training by weighted model averaging (see the module docstring)."""

    exact = False
    data_view = PARTITION_LOCAL
    options = option_names(ModelAveragingOptions)
    edge_weights = True  # its partitions' blocks and samples carry their edges' weights (not its fetched rows)

    @classmethod
    def edge_weight_refusal(cls, config: RunConfig, halo_hops: int) -> str:
        sc = config.strategy
        if sc.correction_steps:
            return "samples --correction-steps' neighbourhoods across partitions without their edge weights"
        if evaluation_mode(sc.evaluation, halo_hops, config.model.layers) == "fetch":
            return (f"fetches --evaluation exact's rows beyond a {halo_hops}-hop halo without their edge weights; "
                    f"use --halo-hops {config.model.layers} (exact from the halo) or --evaluation truncated")
        return ""

    @classmethod
    def unused_options(cls, config: RunConfig) -> dict[str, str]:
        unused = {}
        if not config.strategy.minibatch and not config.strategy.correction_steps:
            why = "without --minibatch or --correction-steps"
            unused.update({"fanouts": why, "batch_size": why})
        if config.strategy.partitions:
            why = "with --partitions (the store is partitioned already)"
            unused.update({"partitioner": why, "balance": why, "parts": why, "halo_hops": why, "device_memory": why})
        elif config.strategy.parts:
            unused["device_memory"] = "with --parts (it chooses the partition count when --parts is not given)"
        return unused

    # ------------------------------------------------------------ parent side
    @classmethod
    def link_refusal(cls, config: RunConfig) -> str:
        return link_refusal(config)  # each partition trains on its local edges (.link)

    @classmethod
    def resume_identity(cls, config: RunConfig) -> dict:
        """``--optimizer-state`` changes what training computes: a checkpoint resumes only with its own."""
        return {"optimizer_state": optimizer_state(config.strategy)}

    @classmethod
    def check_config(cls, config: RunConfig) -> None:
        import sys

        sc = config.strategy
        if sc.average_optimizer and sc.optimizer_state != "local":
            print("graphscale: --average-optimizer is deprecated: it is --optimizer-state averaged, the default",
                  file=sys.stderr)
        if sc.optimizer_state not in OPTIMIZER_STATES:
            raise ValueError(f"--optimizer-state must be one of {', '.join(OPTIMIZER_STATES)}, got "
                             f"{sc.optimizer_state!r}")
        if sc.average_optimizer and sc.optimizer_state == "local":
            raise ValueError("--average-optimizer (deprecated: it means --optimizer-state averaged, the default) "
                             "contradicts --optimizer-state local; drop --average-optimizer")
        check_evaluation(sc.evaluation)
        if not sc.partitions:  # the run writes the store: its halo is --halo-hops
            evaluation_mode(sc.evaluation, sc.halo_hops, config.model.layers)

    @classmethod
    def store_parts(cls, config: RunConfig, data_bytes) -> int:
        """``--parts``, else SDT-GNN's workload allocation from the dataset's size and ``--device-memory``."""
        import sys

        from graphscale.metrics.units import parse_bytes
        from graphscale.partition.allocation import choose_parts

        sc = config.strategy
        if sc.parts:
            return sc.parts
        memory = parse_bytes(sc.device_memory, "--device-memory") if sc.device_memory else None
        cuda = config.device.startswith("cuda") or (config.device == "auto" and torch.cuda.is_available())
        device = config.device if config.device.startswith("cuda") else "cuda" if cuda else "cpu"
        allocation = choose_parts(data_bytes(), sc.workers, memory, device)
        if config.progress:
            print(f"model-averaging: {allocation.why()}", file=sys.stderr)
        return allocation.parts

    @classmethod
    def prepare_partitions(cls, config: RunConfig, handle: DataHandle, cache: Path | None = None) -> dict:
        sc = config.strategy
        parts, workers = int(handle.summary["parts"]), sc.workers
        evaluation_mode(sc.evaluation, int(handle.summary.get("halo_hops", 1)), config.model.layers)
        if parts < workers:
            raise ValueError(f"partition store {handle.path} has {parts} parts for --workers {workers}: model "
                             f"averaging trains every part on one worker, so use --workers {parts} or fewer, or "
                             "partition again with more parts")
        if parts > workers or config.checkpoint or sc.state_dir:
            folder = sc.state_dir
            if not folder:
                from graphscale.data.cache import resolve_cache_dir
                from graphscale.data.cache_use import mark_in_use

                key = hashlib.sha1(json.dumps(cls.identity(config, handle), sort_keys=True).encode()).hexdigest()
                cache = cache if cache is not None else resolve_cache_dir(config)
                folder = str(cache / "averaging" / key[:20])
                mark_in_use(cache, f"averaging-{key[:20]}")  # graphscale cache clear leaves it while this run lives
            return {"state_dir": folder}
        return {}

    @staticmethod
    def identity(config: RunConfig, handle: DataHandle) -> dict:
        """What a state directory's states depend on (:class:`PartitionStates` refuses another run's)."""
        sc = config.strategy
        return {"store": str(Path(handle.path).resolve()), "parts": int(handle.summary["parts"]),
                "model": model_dict(config.model), "optim": {k: v for k, v in dataclasses.asdict(config.optim).items() if k != "epochs"},
                "seed": config.seed, "dtype": config.dtype, "minibatch": sc.minibatch,
                "fanouts": list(sc.fanouts) if sc.minibatch else None,
                "batch_size": sc.batch_size if sc.minibatch else None, "average_every": sc.average_every,
                "optimizer_state": optimizer_state(sc)}

    # ----------------------------------------------------------------- setup
    def setup(self, data: DataHandle, model: torch.nn.Module, env: DistEnv, config: RunConfig) -> None:
        super().setup(data, model, env, config)
        handle = self.data
        if handle.view != PARTITION_LOCAL:
            raise ValueError("strategy 'model-averaging' trains from a partition store (partition-local data)")
        self.comm = Comm(env)
        self.num_parts = int(handle.summary["parts"])
        self.parts = partitions_of(env.rank, self.num_parts, env.world_size)
        if not self.parts:
            raise ValueError(f"worker {env.rank} has no partition: {self.num_parts} parts for {env.world_size} "
                             "workers")
        self.part_train = [int(c) for c in handle.summary["part_train"]]
        self.alpha = alphas(self.part_train) if config.task != "link" else None  # link: by training pairs, below
        self.dtype = next(model.parameters()).dtype
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.float_state = float_tensors(model)
        self.device = env.device  # the model, the averaged buffers and every reduced tensor
        self.global_flat = flatten(self.float_state, self.dtype, self.device)  # identical on every worker
        self.global_opt: torch.Tensor | None = None
        folder = handle.state_dir
        self.states = PartitionStates(folder, self.identity(config, handle), writer=env.is_main)
        self.comm.barrier()  # run.json exists before any worker writes a state
        self.last_epoch = -1  # the epoch whose partition states are stored
        self.tracker = MemoryTracker(env)
        self.tracker.track_module("model", model)
        from graphscale.data.cache import resolve_cache_dir
        from graphscale.partition.store import read_store_meta
        from graphscale.partition.store_base import referenced

        #: where a referencing store's gathered feature rows go: a private mapped file (store_rows_file)
        self.rows_dir = resolve_cache_dir(config) / "tmp" if "x" in referenced(read_store_meta(handle.path)) else None
        # one partition per worker: keep it; otherwise one at a time
        self.resident = self._open(self.parts[0]) if len(self.parts) == 1 else None
        if self.resident is not None:
            self.tracker.track("partition", *self.resident.tensors())
        self.link = LinkPartitions(handle.path, model.link_decoder, config, self.device) if config.task == "link" \
            else None
        if self.link is not None:  # weights: each partition's share of the training pairs
            self.part_train = self.link.part_counts(self.comm, self.num_parts, {p: self._data(p) for p in self.parts})
            self.alpha = alphas(self.part_train)
        self.average_moments = optimizer_state(config.strategy) == "averaged"
        # one optimiser step per partition between averaging rounds: the averaged gradient is recoverable
        self.one_step_rounds = not config.strategy.minibatch and config.strategy.average_every == 1
        probe = make_optimizer(model, config.optim)
        self.betas = probe.param_groups[0].get("betas")  # Adam's, AdamW's; None for SGD
        self.moment_count = len(state_layout(probe).tensors)
        self.lr = config.optim.lr  # this epoch's (set_lr)
        self.eval_mode = evaluation_mode(config.strategy.evaluation, int(handle.summary.get("halo_hops", 1)),
                                         config.model.layers)
        self.correction_opt = None
        if config.strategy.correction_steps or self.eval_mode == "fetch":
            locals_ = {part: handle.open_partition(part, rows_dir=self.rows_dir) for part in self.parts}  # mapped
            boundaries = torch.from_numpy(np.load(Path(handle.path) / "boundaries.npy"))
            self.server = RowServer(locals_, boundaries, env.world_size, handle.feature_norm, self.dtype)
        if config.strategy.correction_steps:
            self.targets = {part: home_targets(local) for part, local in locals_.items()}
            self.correction_opt = make_optimizer(model, config.optim)
        if self.eval_mode == "fetch":  # the layer-wise plan, agreed with the other workers once
            targets = all_home_targets if self.link is not None else eval_targets  # link: every home embedding
            found = [targets(locals_[part]) for part in self.parts]
            self.layerwise = LayerwiseEvaluation(
                self.comm, self.server, np.concatenate([t for t, _, _ in found]), torch.cat([y for _, y, _ in found]),
                {s: torch.cat([m[s] for _, _, m in found]) for s in SPLITS}, config.model.layers, self.device,
                own_forward=not getattr(model, "layer_sequential", True))

    def _open(self, part: int) -> LocalData:
        """Partition ``part``'s local graph as one block over all local vertices, its rows and masks."""
        local = self.data.open_partition(part, rows_dir=self.rows_dir)
        g = local.graph
        if g.x is None or g.y is None or g.train_mask is None:
            raise ValueError(f"partition {part} of {self.data.path} lacks node features, labels or a training mask")
        device, n_inner = self.env.device, local.num_inner
        block = Block(g.indptr, g.indices, local.orig_ids, local.degree, g.edge_weight).to(device)
        x = row_normalize(g.x) if self.data.feature_norm == "row" else g.x
        masks = {}
        for split in SPLITS:  # the store sets masks on home (inner) vertices only
            mask = getattr(g, f"{split}_mask")
            masks[split] = (torch.zeros(g.num_nodes, dtype=torch.bool, device=device) if mask is None
                            else mask.to(device))
        data = LocalData(part, block, x.to(device=device, dtype=self.dtype), g.y.to(device), masks, n_inner,
                         int(masks["train"].sum()), local.orig_ids)
        sc = self.config.strategy
        if sc.minibatch:  # per-partition seeds: the samples do not depend on which worker trains the partition
            data.sampler = NeighborSampler(g, sc.fanouts, seed=self.config.seed + part, degrees=local.degree)
            data.loader = MiniBatchLoader(torch.nonzero(masks["train"].cpu()).flatten(), sc.batch_size,
                                          seed=self.config.seed + part)
        return data

    def _data(self, part: int) -> LocalData:
        if self.resident is not None and self.resident.part == part:
            return self.resident
        return self._open(part)

    # ------------------------------------------------------------- training
    def _restore(self, part: int) -> None:
        """Load partition ``part``'s weights and optimiser state into the model and optimiser."""
        state = self.states.load(part, self.last_epoch)
        every = self.config.strategy.average_every
        averaged = self.last_epoch < 0 or averaged_after(self.last_epoch, every)
        unflatten_into(self.global_flat if averaged or state is None else state["weights"], self.float_state)
        self.optimizer = make_optimizer(self.model, self.config.optim)
        if state is not None:
            self.optimizer.load_state_dict(state["optimizer"])
            if averaged and self.global_opt is not None:
                unflatten_into(self.global_opt, optimizer_moments(self.optimizer, self.params))
        set_lr(self.optimizer, self.lr)  # the epoch's rate, not the one its state was saved with

    def _train_partition(self, data: LocalData, epoch: int) -> float:
        """One epoch on one partition; returns the summed training loss over its training vertices."""
        model, opt = self.model, self.optimizer
        if not self.config.strategy.minibatch:
            opt.zero_grad(set_to_none=True)
            logits = model(data.block, data.x)
            if self.link is not None:  # the partition's training pairs: part_train holds their count 2 P_j
                loss_sum = self.link.loss_sum(logits, data.part, data.orig_ids, data.num_inner, epoch)
                (loss_sum / self.part_train[data.part]).backward()
                opt.step()
                return float(loss_sum.detach())
            loss_sum = masked_loss_sum(logits, data.y, data.masks["train"])
            (loss_sum / data.num_train).backward()
            opt.step()
            return float(loss_sum.detach())
        total = 0.0
        batches = data.loader.batches(epoch)
        for i, targets in enumerate(batches):
            blocks = data.sampler.sample(targets, batch_key=epoch * len(batches) + i)
            x = data.x[blocks[0].src_ids.to(data.x.device)]
            blocks = [dataclasses.replace(b, src_ids=data.orig_ids[b.src_ids]).to(self.env.device) for b in blocks]
            opt.zero_grad(set_to_none=True)
            logits = model(blocks, x)
            every = torch.ones(targets.numel(), dtype=torch.bool, device=self.device)
            loss_sum = masked_loss_sum(logits, data.y[targets.to(data.y.device)], every)
            (loss_sum / targets.numel()).backward()
            opt.step()
            total += float(loss_sum.detach())
        return total

    def train_epoch(self, epoch: int) -> EpochStats:
        run = Epoch(self.model, epoch, self.env, self.tracker)
        sc = self.config.strategy
        loss_sum = 0.0
        weights = torch.zeros_like(self.global_flat)
        moments = torch.zeros(self.moment_count * sum(p.numel() for p in self.params) if self.average_moments else 0,
                              dtype=self.dtype, device=self.device)
        with self.tracker.epoch():
            for part in self.parts:
                if self.part_train[part] == 0:
                    continue  # alpha = 0: it contributes nothing
                data = self._data(part)
                if data is not self.resident:
                    self.tracker.track("partition", *data.tensors())
                self._restore(part)
                loss_sum += self._train_partition(data, epoch)
                self.tracker.track("optimizer", *optimizer_tensors(self.optimizer))
                local = flatten(self.float_state, self.dtype, self.device)
                weights += float(self.alpha[part]) * local
                if self.average_moments:
                    moments += float(self.alpha[part]) * flatten(optimizer_moments(self.optimizer, self.params),
                                                                 self.dtype,
                                                                 self.device)
                self.states.save(part, epoch, {"weights": local, "optimizer": self.optimizer.state_dict()})
                if data is not self.resident:
                    self.tracker.untrack("partition")
                del data
            correction_loss = None
            if averaged_after(epoch, sc.average_every):
                if self.average_moments:
                    buffer = all_reduce_average(self.comm, torch.cat([weights, moments]))
                    self.global_flat, averaged = buffer[: weights.numel()], buffer[weights.numel():]
                    if self.one_step_rounds and self.betas is not None:  # Adam's moments of the averaged gradient
                        averaged = moments_of_mean_gradient(averaged, self.global_opt,
                                                            [p.numel() for p in self.params], self.betas)
                    self.global_opt = averaged
                else:
                    self.global_flat = all_reduce_average(self.comm, weights)
                if sc.correction_steps:
                    correction_loss = self._correct(epoch)
            self.last_epoch = epoch
            unflatten_into(self.global_flat, self.float_state)  # evaluation and checkpoints see the global model
        total = self.comm.all_reduce(torch.tensor([loss_sum], dtype=torch.float64, device=self.device), CONTROL)
        return run.stats(float(total) / sum(self.part_train),
                         {"partitions": len(self.parts), "averaged": averaged_after(epoch, sc.average_every),
                          "evaluation": EVAL_LABELS[self.eval_mode],
                          **({"correction_loss": correction_loss} if correction_loss is not None else {})})

    def set_lr(self, lr: float) -> None:
        """Every partition's optimiser (each restored from its own state) and the correction steps' train the next
        epoch at ``lr``."""
        self.lr = lr
        if self.correction_opt is not None:
            set_lr(self.correction_opt, lr)

    def _correct(self, epoch: int) -> float:
        """``--correction-steps`` global steps from the averaged model (:mod:`.correction`); returns the mean
        loss of the last step's batch."""
        sc, model = self.config.strategy, self.model
        unflatten_into(self.global_flat, self.float_state)
        model.train()
        model.set_epoch(epoch)
        sizes = batch_sizes(self.part_train, sc.batch_size)
        for step in range(sc.correction_steps):
            picks = {part: partition_picks(self.part_train[part], sizes[part], self.config.seed, epoch, step, part)
                     for part in self.parts}
            triples = np.concatenate([self.targets[part][0][picks[part].numpy()] for part in self.parts])
            labels = torch.cat([self.targets[part][1][picks[part]] for part in self.parts])
            loss_sum = correction_step(self.comm, self.server, model, self.correction_opt, triples, labels,
                                       sum(sizes), sc.fanouts, self.config.seed,
                                       step_key(epoch, step, sc.correction_steps), self.env.device)
        self.global_flat = flatten(self.float_state, self.dtype, self.device)
        total = self.comm.all_reduce(torch.tensor([loss_sum], dtype=torch.float64, device=self.device), CONTROL)
        return float(total) / sum(sizes)

    # ------------------------------------------------------------ evaluation
    def _local_inputs(self, part: int) -> tuple[Block, torch.Tensor]:
        data = self._data(part)
        return data.block, data.x

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        self.model.eval()
        if self.link is not None:  # every home vertex's embedding, scored on every worker
            return self.link.evaluate_averaged(self)
        if self.eval_mode == "fetch":
            counts = self.layerwise.counts(self.model, self._local_inputs)
            return counts_to_metrics(self.comm.all_reduce(counts, CONTROL).cpu())
        counts = torch.zeros(COUNTS_PER_SPLIT * len(SPLITS), dtype=torch.float64, device=self.device)
        for part in self.parts:
            data = self._data(part)
            logits = self.model(data.block, data.x)
            counts += split_counts(logits, data.y, data.masks).to(self.device)
        return counts_to_metrics(self.comm.all_reduce(counts, CONTROL).cpu())

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "global_opt": self.global_opt, "last_epoch": self.last_epoch,
                "correction_opt": None if self.correction_opt is None else self.correction_opt.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])  # after every epoch the model holds the global weights
        self.global_flat = flatten(self.float_state, self.dtype, self.device)
        self.global_opt = None if state["global_opt"] is None else state["global_opt"].to(self.device)
        self.last_epoch = int(state["last_epoch"])
        if self.correction_opt is not None and state.get("correction_opt") is not None:
            self.correction_opt.load_state_dict(state["correction_opt"])
        if self.states.folder is None and self.last_epoch >= 0:
            raise ValueError("model averaging resumes from partition states on disk; run with --checkpoint "
                             "(which keeps them) from the start")

    def teardown(self) -> None:
        for name in ("partition", "model", "optimizer"):
            self.tracker.untrack(name)
