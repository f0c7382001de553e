"""graphscale cache: entries listed by kind with their size on disk (hard links once) and last use; `cache clear`
removes only what no running process writes or uses; `info` shows the cache's location and size."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from graphscale.cli import main
from graphscale.data.cache_entries import KINDS, clear, list_entries, total_size
from graphscale.data.cache_use import mark_in_use, writing
from graphscale.data.siblings import temp_sibling

DIGEST = "0123456789abcdef0123"
SOURCE, GRAPH, STORE = f"cora-{DIGEST}", f"cora-{'1' * 20}", f"cora-{'2' * 20}"


def _file(path, size):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


def _cache(tmp_path):
    """A cache directory with one entry of several kinds: a source with a 64 KiB array hard-linked from a training
    graph directory, a store, a partition, an error log and a dead writer's temporary."""
    cache = tmp_path / "cache"
    array = _file(cache / "sources" / f"cora-{DIGEST}" / "x.npy", 65536)
    graph = cache / "graphs" / f"cora-{'1' * 20}"
    graph.mkdir(parents=True)
    os.link(array, graph / "x.npy")
    _file(graph / "meta.json", 100)
    _file(cache / "stores" / f"cora-{'2' * 20}" / "part-0" / "indptr.npy", 8192)
    _file(cache / "owners" / f"cora-{'3' * 20}.npy", 4096)
    _file(cache / "errors" / "graphscale-error-12345.log", 500)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    name = temp_sibling(cache / "stores" / f"cora-{'4' * 20}", "tmp").name.split("-")
    name[-2] = dead.stdout.strip()  # a writer that is gone
    _file(cache / "stores" / "-".join(name) / "meta.json", 10)
    return cache


def test_entries_are_listed_by_kind_with_hard_links_counted_once(tmp_path, capsys):
    cache = _cache(tmp_path)
    entries = {e.path.relative_to(cache).as_posix(): e for e in list_entries(cache)}
    assert {k: e.kind for k, e in entries.items()} == {
        f"sources/cora-{DIGEST}": "source", f"graphs/cora-{'1' * 20}": "graph",
        f"stores/cora-{'2' * 20}": "store", next(k for k in entries if k.startswith("stores/.")): "temporary",
        f"owners/cora-{'3' * 20}.npy": "partition", "errors/graphscale-error-12345.log": "error-log"}
    assert entries[f"sources/cora-{DIGEST}"].size >= 65536  # the array's blocks
    assert entries[f"graphs/cora-{'1' * 20}"].size < 65536  # its hard link is not counted again
    assert entries[f"sources/cora-{DIGEST}"].key == DIGEST and entries["errors/graphscale-error-12345.log"].key is None
    assert sum(e.size for e in entries.values()) <= total_size(cache) < sum(e.size for e in entries.values()) + 65536
    assert main(["cache", "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    assert f"{STORE}\n" in out and "error-log" in out and "temporary" in out
    assert out.splitlines()[-1].startswith("graphscale cache: 6 entries, ") and out.rstrip().endswith(str(cache))
    assert main(["cache", "--cache-dir", str(tmp_path / "none")]) == 0
    assert capsys.readouterr().out.endswith(f"0 entries, 0 B on disk in {tmp_path / 'none'} (not created yet)\n")


def test_clear_skips_entries_in_use_or_being_written_and_removes_the_rest(tmp_path, capsys):
    cache = _cache(tmp_path)
    holder = subprocess.Popen(  # another run using the source entry (holds its in-use lock until it exits)
        [sys.executable, "-c", ("import sys; from pathlib import Path; from graphscale.data.cache_use import "
                                 f"mark_in_use; mark_in_use(Path(sys.argv[1]), {DIGEST!r}); print('held', flush=True); "
                                 "sys.stdin.read()"), str(cache)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout.readline() == "held\n"
        with writing(cache, "2" * 20):  # this process writing the store entry
            assert main(["cache", "clear", "--dry-run", "--cache-dir", str(cache)]) == 0
            dry = capsys.readouterr().out
            assert len(list_entries(cache)) == 6  # nothing removed
            assert main(["cache", "--cache-dir", str(cache), "clear"]) == 0
            out = capsys.readouterr().out
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert f"kept source {cache / 'sources' / SOURCE}: in use by a running process" in out
    assert f"kept store {cache / 'stores' / STORE}: being written by a running process" in out
    assert dry.count("would remove ") == 5 and out.count("\nremoved ") + out.startswith("removed ") == 4
    assert [line for line in dry.splitlines() if line.startswith("would remove ")] == [
        line.replace("removed ", "would remove ", 1) for line in out.splitlines() if line.startswith("removed ")]
    assert sorted(e.kind for e in list_entries(cache)) == ["source", "store"]
    assert out.splitlines()[-1].startswith("graphscale cache: removed 4 entries (")
    removed, skipped = clear(cache)  # the holder is gone; the write finished, and this process now uses the store
    assert [e.kind for e in removed] == ["source"]
    assert [(e.kind, why) for e, why in skipped] == [("store", "in use by a running process")]


def test_clear_by_kind_and_age(tmp_path):
    cache = _cache(tmp_path)
    old = time.time() - 40 * 86400
    for entry in list_entries(cache):
        for path in [entry.path, *entry.path.rglob("*")]:
            os.utime(path, (old, old))
    mark_in_use(cache, "1" * 20)  # this process used the graph entry just now: its last use is now
    removed, skipped = clear(cache, ["graph", "error-log"], older_than_days=30, dry_run=True)
    assert [e.kind for e in removed] == ["error-log"] and skipped == []  # the graph was used today
    removed, skipped = clear(cache, ["graph"], older_than_days=0)
    assert removed == [] and [(e.kind, why) for e, why in skipped] == [("graph", "in use by a running process")]
    removed, _ = clear(cache, ["source", "temporary"], older_than_days=30)
    assert sorted(e.kind for e in removed) == ["source", "temporary"]
    assert sorted(e.kind for e in list_entries(cache)) == ["error-log", "graph", "partition", "store"]
    assert (cache / "graphs" / f"cora-{'1' * 20}" / "x.npy").stat().st_size == 65536  # the hard link's other name


def test_a_running_writers_temporary_is_kept(tmp_path):
    cache = tmp_path / "cache"
    partial = _file(temp_sibling(cache / "graphs" / f"g-{DIGEST}", "tmp") / "meta.json", 10).parent
    removed, skipped = clear(cache)
    assert removed == [] and skipped[0][1] == f"its writer, process {os.getpid()}, is running"
    assert partial.is_dir()


@pytest.mark.parametrize(("argv", "message"), [
    (["cache", "clear", "stores"], "graphscale cache clear: unknown kind 'stores'; the kinds are "
                                   + ", ".join(KINDS)),
    (["cache", "clear", "--older-than", "-1"], "argument --older-than: expected a number of days >= 0, got '-1'"),
    (["cache", "clear", "--older-than", "a week"], "expected a number of days >= 0, got 'a week'"),
    (["cache", "--cache-dir", __file__], f"--cache-dir {__file__} is not a directory"),
])
def test_bad_arguments_are_one_line(argv, message, tmp_path, capsys):
    try:
        code = main(argv if "--cache-dir" in argv else [*argv, "--cache-dir", str(tmp_path)])
    except SystemExit as exit_:  # argparse's own errors (one line too: graphscale.cli.Parser)
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_info_shows_the_cache_location_and_size(tmp_path, capsys):
    cache = _cache(tmp_path)
    assert main(["info", "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    assert f"cache directory  {cache}" in out
    from graphscale.metrics.units import format_bytes

    assert f"cache size       {format_bytes(total_size(cache))} (`graphscale cache` lists it)" in out


def test_a_prepared_entry_is_in_use_while_its_process_lives_and_held_locks_are_bounded(tmp_path, monkeypatch):
    """The preparation path marks what it writes in use: a dataset's graph directory written in a process that is
    still running is kept by clear, and removed once that process is gone."""
    cache = tmp_path / "cache"
    script = ("import sys; from pathlib import Path; from graphscale.config import RunConfig; "
              "from graphscale.prepare import dataset_dir; "
              "print(dataset_dir(RunConfig(progress=False), Path(sys.argv[1]), 'sbm:nodes=60,degree=4'), flush=True); "
              "sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", script, str(cache)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        written = proc.stdout.readline().strip()
        removed, skipped = clear(cache)
        assert removed == [] and [(str(e.path), why) for e, why in skipped] == [
            (written, "in use by a running process")]
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    removed, skipped = clear(cache)
    assert [str(e.path) for e in removed] == [written] and skipped == []
    from graphscale.data import cache_use

    monkeypatch.setattr(cache_use, "MAX_IN_USE", 2)
    monkeypatch.setattr(cache_use, "_IN_USE", {})
    for key in ("a", "b", "a", "c"):  # "a" used again: "b" is the least recently used
        mark_in_use(cache, key)
    assert [p.name for p in cache_use._IN_USE] == ["a.use", "c.use"]
    for fd in cache_use._IN_USE.values():
        os.close(fd)
