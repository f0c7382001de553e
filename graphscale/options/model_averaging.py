"""``model-averaging`` (SDT-GNN): its options."""

from __future__ import annotations

from dataclasses import dataclass

from graphscale.options import SWITCH, option
from graphscale.options.shared import MiniBatch, Partitioning, Sampling, Stored

#: ``--optimizer-state``: Adam's moments kept per partition or averaged with the model
OPTIMIZER_STATES = ("local", "averaged")
#: ``--evaluation``
EVALUATIONS = ("exact", "halo", "truncated")


@dataclass
class ModelAveragingOptions(Partitioning, Stored, MiniBatch, Sampling):
    """``model-averaging``: partition-local training, models averaged every few epochs."""

    parts: int = option(0, "partitions of the store the run writes (0: one per worker; more than --workers trains "
                        "them in turn)")
    average_every: int = option(1, "average the models every N epochs")
    average_optimizer: bool = option(False, "deprecated: the same as --optimizer-state averaged", bool_form=SWITCH)
    optimizer_state: str = option("averaged", "model-averaging: Adam's moments averaged with the model, weighted by "
                                  "training vertices (averaged, the default), or kept per partition as SDT-GNN does "
                                  "(local: on Cora, 4 SPRING parts on 2 workers, it ends about 22 points below "
                                  "single)", choices=OPTIMIZER_STATES, metavar="{local,averaged}",
                                  check_choices_on_parse=False)
    evaluation: str = option("exact", "model-averaging: exact (default: every home vertex on its full L-hop "
                             "neighbourhood, from a K >= L halo or with the missing rows fetched from their owners), "
                             "halo (exact from the store's halo only; needs --halo-hops >= --layers), truncated (the "
                             "partition-local forward, as trained: not the model's accuracy for L > K)",
                             choices=EVALUATIONS, metavar="{exact,halo,truncated}", check_choices_on_parse=False)
    halo_hops: int = option(1, "hops of in-neighbourhood each partition of the store the run writes holds (= --layers "
                            "makes full-neighbour training exact for home vertices)")
    device_memory: str = option("", "one worker's device memory, e.g. 16GiB: without --parts the run writes one "
                                "partition per worker if the data fits in a third of it, else ceil(data / (M / 3)) "
                                "(default: measured)", metavar="SIZE")
    correction_steps: int = option(0, "global correction: mini-batch steps on neighbourhoods sampled across "
                                   "partitions after each averaging round (0: none)")
    state_dir: str = option("", "keep the per-partition states on disk here (without it: under the cache directory "
                            "when a worker trains several partitions or the run keeps checkpoints, else in memory)",
                            metavar="DIR")
