"""Per-partition training state (local weights and optimiser state), kept in memory or on disk.

With more partitions than workers (``p > q``) a worker trains its partitions one after another, so only one
partition's data, model and optimiser state are in memory at a time; the others' states live in a state
directory (SDT-GNN keeps one checkpoint per partition). States are also written to disk when the run keeps
checkpoints (``--checkpoint``), so that a resumed run restores every partition's optimiser exactly.

Layout of a state directory::

    DIR/run.json                  the run's identity (store, parts, model, optimiser, seed, dtype): a directory
                                  written by another run is refused, never overwritten
    DIR/part-00003.e1.pt          partition 3's state after an odd epoch (``.e0``: after an even one)

Two files per partition (by epoch parity) make a kill at any moment recoverable: a checkpoint of epoch ``t``
is written after every partition's epoch-``t`` state, and epoch ``t + 1`` writes the other file. Writes are
atomic (a temporary sibling renamed into place).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch


class PartitionStates:
    """Saves and loads ``{part: state}``; in memory when ``folder`` is ``None``.

    Args:
        folder: the state directory, or ``None`` to keep states in memory.
        identity: the run's identity (JSON-serialisable), checked against ``run.json``.
        writer: whether this worker writes ``run.json`` (one worker does; the others only check it).
    """

    def __init__(self, folder: str | Path | None, identity: dict, writer: bool) -> None:
        self.folder = None if folder is None else Path(folder)
        self.memory: dict[int, dict] = {}
        if self.folder is None:
            return
        meta = self.folder / "run.json"
        if meta.is_file():
            found = json.loads(meta.read_text())
            differing = sorted(k for k in set(found) | set(identity) if found.get(k) != identity.get(k))
            if differing:
                raise ValueError(f"--state-dir {self.folder} holds the partition states of another run (differing: "
                                 f"{', '.join(differing)}); choose another directory or remove it")
        elif writer:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                tmp = meta.with_name(f".run.json.{os.getpid()}.tmp")
                tmp.write_text(json.dumps(identity, indent=1, sort_keys=True))
                os.replace(tmp, meta)
            except OSError as e:
                raise ValueError(f"--state-dir {self.folder}: cannot write partition states ({e})") from None

    def path(self, part: int, epoch: int) -> Path:
        return self.folder / f"part-{part:05d}.e{epoch % 2}.pt"

    def save(self, part: int, epoch: int, state: dict) -> None:
        """Store ``part``'s state after ``epoch``."""
        if self.folder is None:
            self.memory[part] = state
            return
        path = self.path(part, epoch)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        torch.save({"epoch": epoch, **state}, tmp)
        os.replace(tmp, path)

    def load(self, part: int, epoch: int) -> dict | None:
        """``part``'s state after ``epoch`` (``None`` before its first save: ``epoch < 0``).

        Raises:
            ValueError: the file is missing or holds another epoch (a state directory that does not match the
                checkpoint being resumed).
        """
        if epoch < 0:
            return None
        if self.folder is None:
            return self.memory.get(part)
        path = self.path(part, epoch)
        if not path.is_file():
            raise ValueError(f"{path}: partition {part}'s state after epoch {epoch} is missing")
        state = torch.load(path, map_location="cpu", weights_only=False)
        if state.get("epoch") != epoch:
            raise ValueError(f"{path} holds partition {part}'s state after epoch {state.get('epoch')}, "
                             f"not after epoch {epoch}")
        return state
