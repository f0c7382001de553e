"""ingest's failures and the convert command: a graph directory changed since it was written is refused by name, a
full disk leaves nothing that looks valid and names the path and the bytes needed, bad input is one line."""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
from pathlib import Path

import numpy as np
import pytest

from graphscale.cli import main
from graphscale.data import ingest as ingest_module
from graphscale.data.formats import GraphDirWriter, load_graph_dir
from graphscale.data.ingest import DiskFullError, estimate_bytes, ingest

SPEC = "sbm:nodes=400,degree=6,features=16,seed=1"


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# ------------------------------------------------------------------ integrity
def test_changed_or_truncated_files_are_refused_by_name(tmp_path):
    out = ingest(SPEC, tmp_path / "g")
    meta = json.loads((out / "meta.json").read_text())
    assert set(meta["files"]) == {f"{k}.npy" for k in meta["arrays"]}
    load_graph_dir(out)
    x = out / "x.npy"
    with open(x, "r+b") as f:  # one feature byte changed in place: same size
        f.seek(-3, os.SEEK_END)
        byte = f.read(1)
        f.seek(-3, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ValueError, match=r"x\.npy was changed since the graph directory was written"):
        load_graph_dir(out)
    out = ingest(SPEC, tmp_path / "g")
    with open(out / "indices.npy", "ab") as f:  # bytes added after the array
        f.write(b"\0" * 8)
    with pytest.raises(ValueError, match=r"indices\.npy has \d+ bytes but .*meta\.json records \d+: it was truncated"):
        load_graph_dir(out)
    out = ingest(SPEC, tmp_path / "g")
    size = (out / "y.npy").stat().st_size
    os.truncate(out / "y.npy", size - 8)  # the last label cut off
    with pytest.raises(ValueError, match=r"y\.npy"):
        load_graph_dir(out)


# ------------------------------------------------------------------ disk full
def test_free_space_checked_up_front(tmp_path, monkeypatch):
    usage = type("Usage", (), {"free": 1000, "total": 10**9, "used": 0})
    monkeypatch.setattr(ingest_module.shutil, "disk_usage", lambda path: usage)
    with pytest.raises(DiskFullError, match=r"needs about \d+ bytes .* has 1000 bytes .* free") as err:
        ingest(SPEC, tmp_path / "g")
    assert str(tmp_path / "g") in str(err.value)
    assert not (tmp_path / "g").exists() and leftovers(tmp_path) == []
    assert estimate_bytes(10, 4, 4, 100) == 10 * (16 + 10) + 800


def test_disk_full_while_writing_leaves_nothing(tmp_path, monkeypatch):
    (tmp_path / "g.txt").write_text("".join(f"{i} {i + 1}\n" for i in range(200)))

    def full(self, **arrays):
        raise OSError(errno.ENOSPC, "No space left on device", str(self._tmp / "y.npy"))

    monkeypatch.setattr(GraphDirWriter, "append_nodes", full)
    (tmp_path / "labels.txt").write_text("0 1\n5 2\n")
    with pytest.raises(DiskFullError, match=r"out/y\.npy: No space left on device while writing the graph directory "
                                            r".*it needs about \d+ bytes"):
        ingest(f"edgelist:{tmp_path / 'g.txt'}:{tmp_path / 'labels.txt'}", tmp_path / "out", chunk_edges=16)
    assert not (tmp_path / "out").exists()
    assert leftovers(tmp_path) == []


def test_file_size_limit(tmp_path):
    """A real write failure: while ingest runs, this process may write no file larger than 64 KiB (RLIMIT_FSIZE;
    SIGXFSZ ignored, so the write fails with EFBIG), and x.npy needs more."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (65536, hard))
    try:
        with pytest.raises(DiskFullError) as err:
            ingest(SPEC.replace("features=16", "features=64"), tmp_path / "out")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    message = str(err.value)
    assert "while writing the graph directory" in message and str(tmp_path / "out") in message
    assert "needs about" in message
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


# ------------------------------------------------------------------ the command
def test_convert_default_chunk():
    from graphscale.data.edge_stream import DEFAULT_CHUNK_EDGES
    from graphscale.data.ingest_command import DEFAULT_CHUNK_EDGES as COMMAND_DEFAULT

    assert COMMAND_DEFAULT == DEFAULT_CHUNK_EDGES


def test_convert_command(tmp_path, capsys):
    (tmp_path / "g.txt").write_text("0 1\n1 2\n2 0\n5 5\n")
    out = tmp_path / "out"
    assert main(["convert", "--dataset", f"edgelist:{tmp_path / 'g.txt'}", "--out", str(out), "--chunk-edges", "2",
                 "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    line = captured.out.strip()
    assert line.startswith(f"graphscale: converted edgelist:{tmp_path / 'g.txt'} into {out}: 4 vertices, 6 edges, "
                           "0 features") and "bytes) in" in line and "peak RSS" in line
    g = load_graph_dir(out)
    assert g.num_nodes == 4 and g.num_edges == 6  # ids 0, 1, 2, 5: relabelled, 5 (only a self-loop) isolated
    assert main(["convert", "--dataset", f"edgelist:{tmp_path / 'g.txt'}", "--out", str(out)]) == 2
    assert "already exists (pass --overwrite" in capsys.readouterr().err
    assert main(["convert", "--dataset", f"edgelist:{tmp_path / 'g.txt'}", "--out", str(out), "--overwrite"]) == 0
    err = capsys.readouterr().err
    assert "graphscale: convert: build CSR 100% (4/4)" in err  # progress lines when stderr is not a terminal
    assert main(["convert", "--dataset", "nosuch:thing", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("graphscale: error: unknown dataset spec 'nosuch:thing'") and "\n" not in err
    assert main(["convert", "--dataset", f"npz:{tmp_path / 'g.txt'}", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert "g.txt is not a readable .npz file" in err and "\n" not in err
    assert main(["convert", "--dataset", "cora", "--out", str(tmp_path / "x"), "--chunk-edges", "0"]) == 2
    assert "--chunk-edges must be a positive integer" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    np.testing.assert_array_equal(load_graph_dir(out).indptr.numpy(), [0, 2, 4, 6, 6])
