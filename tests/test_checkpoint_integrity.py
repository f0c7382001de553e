"""Checkpoint integrity: a checksum written with every checkpoint and verified on load (a flipped byte inside a
tensor is refused in one line naming the file), and the training family (full-graph or mini-batch, fan-outs, batch
size) recorded and compared on --resume."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
import torch

from graphscale.checkpoint import checksum, read_checkpoint, write_checkpoint
from graphscale.cli import main


def _payload() -> dict:
    return {"epoch": 0, "strategy": {"model": {"w": torch.arange(4096, dtype=torch.float32)}}, "best": {},
            "history": [], "identity": {}, "graph": {}}


def _flip_inside_largest_tensor(path: Path) -> None:
    """Flip one byte in the middle of the largest stored tensor's data (a zip entry stored uncompressed)."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    raw = bytearray(path.read_bytes())
    header = info.header_offset
    name_len = int.from_bytes(raw[header + 26:header + 28], "little")
    extra_len = int.from_bytes(raw[header + 28:header + 30], "little")
    at = header + 30 + name_len + extra_len + info.file_size // 2
    raw[at] ^= 0x40
    path.write_bytes(bytes(raw))


def test_a_flipped_byte_inside_a_tensor_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "ckpt.pt"
    write_checkpoint(path, _payload())
    assert read_checkpoint(path)["checksum"] == checksum(_payload())
    _flip_inside_largest_tensor(path)
    assert not torch.equal(torch.load(path, weights_only=False)["strategy"]["model"]["w"],
                           _payload()["strategy"]["model"]["w"])  # torch itself reads the damaged file
    with pytest.raises(ValueError, match=rf"^--resume: checkpoint {path} is damaged: its contents do not match the "
                                         "checksum written with it; .*$"):
        read_checkpoint(path)


def test_a_checkpoint_without_a_checksum_is_refused(tmp_path):
    path = tmp_path / "old.pt"
    torch.save(_payload(), path)
    with pytest.raises(ValueError, match="not a graphscale checkpoint of this version"):
        read_checkpoint(path)


def test_checksum_sees_every_value():
    base = checksum(_payload())
    changed = _payload()
    changed["history"] = [{"loss": 1.0}]
    assert checksum(changed) != base
    changed = _payload()
    changed["strategy"]["model"]["w"] = changed["strategy"]["model"]["w"].double()  # same values, another dtype
    assert checksum(changed) != base


def test_resume_refuses_another_training_family_or_sampling(tmp_path, capsys):
    ckpt = tmp_path / "c.pt"
    common = ["train", "--no-progress", "--hidden", "8", "--checkpoint", str(ckpt)]
    assert main([*common, "--epochs", "1"]) == 0
    assert read_checkpoint(ckpt)["identity"]["training"] == "full-graph"
    capsys.readouterr()
    assert main([*common, "--epochs", "2", "--resume", "--minibatch"]) == 2
    assert "training 'full-graph' (checkpoint) vs 'mini-batch'" in capsys.readouterr().err


def _mini(fanouts, batch_size, strategy="single"):
    from graphscale.config import build_config

    section = {"name": strategy, "fanouts": fanouts, "batch_size": batch_size}
    if strategy == "single":
        section["minibatch"] = True
    else:
        section["workers"] = 2
    return build_config({"strategy": section, "checkpoint": "m.pt"})


def test_mini_batch_checkpoints_record_fanouts_and_batch_size():
    from graphscale.checkpoint import check_resume, identity

    saved = {"identity": identity(_mini([5, 5], 256))}
    assert {k: saved["identity"][k] for k in ("training", "fanouts", "batch_size")} == \
        {"training": "mini-batch", "fanouts": [5, 5], "batch_size": 256}
    check_resume(_mini([5, 5], 256, "data-parallel"), saved)  # the same sampled training, another strategy
    with pytest.raises(ValueError, match=r"--fanouts \[5, 5\] \(checkpoint\) vs \[10, 10\]"):
        check_resume(_mini([10, 10], 256), saved)
    with pytest.raises(ValueError, match=r"--batch-size 256 \(checkpoint\) vs 128"):
        check_resume(_mini([5, 5], 128, "data-parallel"), saved)
