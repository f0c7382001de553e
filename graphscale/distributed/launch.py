"""Start workers: spawn N local processes, or join a ``torchrun`` group.

:func:`launch` is the one entry point the CLI and the tests use::

    results = launch(fn, world_size, *args)      # fn(env: DistEnv, *args) -> picklable

* ``world_size == 1`` runs ``fn`` in this process with :meth:`DistEnv.local`
  (no process group, the collectives in :mod:`graphscale.distributed.comm`
  short-circuit).
* Under ``torchrun`` (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``
  set) ``fn`` runs once in the current process inside that group
  (:func:`join_torchrun`), on one node or several. The device comes from the
  *local* placement: ``LOCAL_RANK`` on a host with ``LOCAL_WORLD_SIZE`` ranks
  (CUDA when the host has a GPU per local rank), and the CPU threads are the
  host's cores over its local ranks, as spawned workers get them. Every rank's
  result is then gathered (``all_gather_object``), so every rank returns
  ``[result of rank 0, ..., rank W-1]`` exactly as spawn mode does, and the
  caller merges them the same way; :func:`is_main_process` tells the caller
  whether it is global rank 0, the one that prints and writes files.
* Otherwise ``world_size`` workers are spawned: fresh interpreters running
  graphscale's own entry point (:mod:`graphscale.distributed.worker`), which
  import the launcher's script only when the run refers to a class or function
  defined there (:mod:`graphscale.distributed.main_module`: a script without
  ``if __name__ == "__main__":`` is never run again otherwise). They rendezvous through a ``FileStore`` in a fresh temporary
  directory (no TCP port to race for), use gloo on CPU and NCCL when CUDA has at
  least ``world_size`` devices (rank ``r`` on ``cuda:r``), and write their
  pickled result (or their traceback) to a file in that directory. Results come
  back ordered by rank.

Failures never hang the parent: the first worker that raises or dies (also by
segfault or ``os._exit``) ends the run; the parent terminates the others and
raises :class:`WorkerError` naming the rank with its full traceback. Collectives
carry ``timeout_s`` (``--timeout``, default 600 s) so a worker blocked on a hung
or dead peer fails too; when a collective timed out
(:class:`~graphscale.distributed.comm.CollectiveError` names it) the error also
lists the workers that were still running, the candidates for the hang.

Workers never outlive the launcher. Each asks the kernel to SIGKILL it when the
launcher exits (``PR_SET_PDEATHSIG``, Linux), so even a SIGKILLed launcher
leaves no orphans; SIGTERM to the launcher stops the workers and removes the
directory before it exits (code 143); workers ignore SIGINT, so Ctrl-C (which
reaches the whole process group) is handled by the launcher alone, which stops
them and raises ``KeyboardInterrupt``. A tiny janitor process removes the
launch directory after the launcher is gone, whatever ended it. Files a worker creates outside it (offload's
shared-memory arrays) are registered first with :func:`remove_with_run`; the launcher removes them when the run
ends, and the janitor when the launcher could not.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from graphscale import allocator
from graphscale.config import DEFAULT_TIMEOUT_S
from graphscale.distributed.comm import CollectiveError
from graphscale.distributed.env import DistEnv
from graphscale.distributed.exit_status import describe_exit
from graphscale.metrics.ledger import Ledger

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_POLL_S = 0.02
_KILL_GRACE_S = 2.0
#: how long the launcher waits for a primary failure once only consequences (connection resets) are known
_CAUSE_GRACE_S = 3.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
#: Removes the launch directory, and every path a worker registered with :func:`remove_with_run`, once the launcher
#: is gone: its stdin is a pipe from the launcher, which reaches end-of-file when the launcher exits, also by SIGKILL,
#: when it cannot clean up itself. The kernel kills the workers just after closing the launcher's files, so a
#: directory still there (the launcher did not clean up) is read after a moment, when they can register no more.
_JANITOR = """import os, shutil, sys, time
sys.stdin.buffer.read()
work = sys.argv[1]
if os.path.isdir(work):
    time.sleep(0.5)
    marks = os.path.join(work, "remove")
    for name in (os.listdir(marks) if os.path.isdir(marks) else []):
        if name.endswith(".tmp"):  # being written: not a whole path
            continue
        try:
            with open(os.path.join(marks, name)) as f:
                shutil.rmtree(f.read(), ignore_errors=True)
        except OSError:
            pass
shutil.rmtree(work, ignore_errors=True)
"""
#: the launch directory of a spawned worker's run (set in each worker), where :func:`remove_with_run` registers paths
LAUNCH_DIR_ENV = "GRAPHSCALE_LAUNCH_DIR"


class WorkerError(RuntimeError):
    """A worker raised or died; the run was stopped.

    Attributes:
        rank: the failing worker's rank.
        exitcode: its process exit code (negative = killed by that signal), or ``None`` in-process.
        worker_traceback: the worker's formatted traceback (empty when it died without one).
        still_running: when a collective of this worker timed out, the workers still running then: those that
            never entered it (or are slower than the timeout).
    """

    def __init__(self, rank: int, worker_traceback: str, exitcode: int | None = None,
                 still_running: list[int] | None = None, summary: str = "", consequences: int = 0) -> None:
        self.rank = rank
        self.exitcode = exitcode
        self.worker_traceback = worker_traceback
        self.still_running = still_running or []
        self.consequences = consequences
        #: one line for the user (:meth:`one_line`): the worker's exception and where it was raised
        self.summary = summary
        if worker_traceback:
            detail = f"worker {rank} failed:\n{worker_traceback.rstrip()}"
        else:
            detail = f"worker {rank} {describe_exit(exitcode)}"
        if self.still_running:
            detail += (f"\nworkers still running when its collective timed out: "
                       f"{', '.join(map(str, self.still_running))}")
        super().__init__(detail)

    def one_line(self) -> str:
        """``worker R: <the cause>`` in one line, without the traceback (the command line prints it so, and the
        traceback into a log file)."""
        if not self.worker_traceback:
            line = f"worker {self.rank} {describe_exit(self.exitcode)}"
        else:
            line = f"worker {self.rank}: {self.summary or self.worker_traceback.strip().splitlines()[-1]}"
        if self.still_running:
            line += f" (workers still running then: {', '.join(map(str, self.still_running))})"
        if self.consequences:
            line += (f"; {self.consequences} other worker(s) failed after it as a consequence (connection closed "
                     "or reset)")
        return line


#: what an error of a worker says when it only follows from a peer's failure (the peer closed its connections)
_SECONDARY = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "Socket closed",
              "connection closed", "Connection refused", "EOF")


def summarize_exception(err: BaseException) -> tuple[str, bool]:
    """``(one line, secondary)`` for a worker's exception: its message (with its type unless it is an error of
    bad input, ``ValueError`` / ``KeyError`` / ``FileNotFoundError``, whose messages name the option or file), and
    whether it only follows from a peer's failure (a connection reset or closed by a peer that failed first)."""
    message = (str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)).strip()
    first = message.splitlines()[0] if message else ""
    secondary = any(text in message for text in _SECONDARY) and not (isinstance(err, CollectiveError)
                                                                     and err.timed_out)
    from graphscale.errors import RunError

    if isinstance(err, (ValueError, KeyError, FileNotFoundError, RunError, CollectiveTimeout,
                        CollectiveError)) and first:
        return first, secondary
    if isinstance(err, OSError) and err.filename is not None:
        return f"{err.strerror or type(err).__name__}: {err.filename}", secondary
    if isinstance(err, MemoryError) or "can't allocate memory" in message or type(err).__name__ == "OutOfMemoryError":
        import re

        asked = re.search(r"allocate (\d+) bytes", message)
        what = f"an allocation of {int(asked.group(1)):,} bytes failed" if asked else (first or type(err).__name__)
        return (f"out of memory ({what}); use a smaller model (--hidden, --layers), fewer "
                "rows at once (--batch-size, --chunks) or more workers"), secondary
    where = ""
    tb = traceback.extract_tb(err.__traceback__) if err.__traceback__ else []
    if tb:
        where = f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno} in {tb[-1].name})"
    return f"{type(err).__name__}: {first}{where}", secondary


def _join_group(backend: str, rank: int, world_size: int, timeout: timedelta, init_method: str) -> None:
    """``init_process_group``, its timeout named: a worker that does not join within ``--timeout`` is reported as
    such, not as torch's bare ``Wait timeout``."""
    start = time.monotonic()
    try:
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size, timeout=timeout)
    except Exception as err:
        text = str(err)
        if "timeout" in text.lower() or "timed out" in text.lower():
            raise CollectiveTimeout(f"rank {rank}: the {world_size} workers did not all join the process group "
                                    f"within the collective timeout ({timeout.total_seconds():g} s after "
                                    f"{time.monotonic() - start:.1f} s; --timeout raises it)") from err
        raise


class CollectiveTimeout(RuntimeError):
    """Workers did not join the process group (or a collective) within ``--timeout``; never a consequence."""


def cpu_count() -> int:
    """CPU cores this process may run on (its affinity mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def local_world_size(world_size: int) -> int:
    """Workers on this host: ``LOCAL_WORLD_SIZE`` under torchrun (``world_size`` there when unset), else
    ``world_size`` (spawned workers all run here)."""
    if torchrun_detected():
        return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
    return world_size


def is_main_process() -> bool:
    """Whether this process is the one that prints results and writes files: always outside torchrun, global rank
    0 under it (every rank runs the command there)."""
    return not torchrun_detected() or int(os.environ["RANK"]) == 0


def multi_node() -> bool:
    """Whether this is a torchrun group spanning several hosts (fewer local ranks than ranks)."""
    return torchrun_detected() and local_world_size(0) < int(os.environ["WORLD_SIZE"])


def resolve_device(device: str | torch.device, world_size: int, backend: str | None = None) -> str:
    """The device *kind* workers use: ``"cpu"`` or ``"cuda"``.

    ``"auto"`` picks CUDA when this host has a GPU for each of its workers (:func:`local_world_size`: under
    torchrun the ranks of this node, not the global ``world_size``), else CPU. With ``backend="gloo"`` the workers
    of a host may share its GPUs (worker ``r`` on GPU ``r mod count``; :class:`~graphscale.distributed.comm.Comm`
    stages every transfer through host memory): ``cuda`` then needs one GPU, not one per worker.

    Raises:
        ValueError: ``device`` is unknown, or ``cuda`` is asked for without enough GPUs.
    """
    if isinstance(device, torch.device):
        kind = device.type
    else:
        kind = str(device).split(":")[0]
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    per_host = local_world_size(world_size)
    if kind == "auto":
        return "cuda" if gpus >= per_host else "cpu"
    if kind == "cpu":
        return "cpu"
    if kind == "cuda":
        if gpus < (1 if backend == "gloo" else per_host):
            where = (f"{per_host} local rank(s) on this node (LOCAL_WORLD_SIZE)" if torchrun_detected()
                     else f"world_size={world_size}")
            raise ValueError(f"device='cuda' needs one GPU per worker: {where}, found {gpus} GPU(s) (the gloo "
                             "backend lets workers share GPUs: --backend gloo)" if gpus else
                             "--device cuda: torch sees no CUDA device here (a CPU build of torch, or no GPU); use "
                             "--device cpu (GRAPHSCALE_KERNELS=torch runs the GPU's kernel path on CPU tensors)")
        return "cuda"
    raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")


def worker_device(kind: str, local_rank: int) -> torch.device:
    """Local worker ``local_rank``'s device: GPU ``local_rank mod count`` (one each under NCCL, shared under gloo)."""
    return torch.device("cuda", local_rank % torch.cuda.device_count()) if kind == "cuda" else torch.device("cpu")


def resolve_backend(backend: str | None, device_kind: str) -> str:
    """``backend`` or the default for ``device_kind`` (NCCL on CUDA, gloo on CPU)."""
    if backend is None:
        return "nccl" if device_kind == "cuda" else "gloo"
    if backend not in ("gloo", "nccl", "mpi"):
        raise ValueError(f"backend must be 'gloo', 'nccl' or 'mpi', got {backend!r}")
    if backend == "nccl" and device_kind != "cuda":
        raise ValueError("backend='nccl' needs device='cuda'")
    return backend


def torchrun_detected() -> bool:
    """True when the torchrun / ``env://`` variables are all set."""
    return all(name in os.environ for name in TORCHRUN_VARS)


def join_torchrun(backend: str | None = None, device: str | torch.device = "auto",
                  timeout_s: float = DEFAULT_TIMEOUT_S, allocator_mode: str | None = None) -> DistEnv:
    """Join the process group described by torchrun's environment variables.

    Initialises the default group via ``env://`` (or reuses one that is already
    initialised) and pins CUDA device ``LOCAL_RANK`` when running on GPUs (the
    device kind is decided by :func:`resolve_device` from the ranks on this
    node). Sets this process's CPU threads to the host's cores over its local
    ranks (torchrun's ``OMP_NUM_THREADS=1`` would otherwise leave cores idle),
    as spawned workers get the cores over the workers.

    Args:
        backend: ``None`` picks NCCL on CUDA, gloo on CPU.
        device: ``"auto"``, ``"cpu"`` or ``"cuda"``.
        timeout_s: collective timeout.
        allocator_mode: malloc configuration applied to this process (:func:`graphscale.allocator.resolve_mode`:
            ``None`` = ``$GRAPHSCALE_ALLOCATOR``, else ``default``).

    Returns:
        This process's DistEnv with a fresh Ledger.

    Raises:
        RuntimeError: the torchrun variables are missing.
    """
    missing = [name for name in TORCHRUN_VARS if name not in os.environ]
    if missing:
        raise RuntimeError(f"join_torchrun: environment variables {', '.join(missing)} are not set; "
                           "start the program with torchrun or use launch(fn, world_size)")
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    allocator.configure(allocator.resolve_mode(allocator_mode))
    timeout = timedelta(seconds=timeout_s)
    kind = resolve_device(device, world_size, backend)
    backend = resolve_backend(backend, kind)
    torch.set_num_threads(max(1, cpu_count() // local_world_size(world_size)))
    dev = worker_device(kind, local_rank)
    if kind == "cuda":
        torch.cuda.set_device(dev)
    if not dist.is_initialized():
        _join_group(backend, rank, world_size, timeout, "env://")
    return DistEnv(rank=rank, world_size=world_size, device=dev, backend=backend, timeout=timeout, ledger=Ledger())


def launch(fn: Callable[..., Any], world_size: int, *args: Any, backend: str | None = None,
           device: str | torch.device = "auto", timeout_s: float = DEFAULT_TIMEOUT_S,
           allocator_mode: str | None = None) -> list[Any]:
    """Run ``fn(env, *args)`` on ``world_size`` workers and return their results by rank.

    Args:
        fn: a module-level function (spawn pickles it by reference) taking a DistEnv first.
        world_size: number of workers (>= 1).
        *args: picklable arguments passed to every worker.
        backend: ``None`` (gloo on CPU, NCCL on CUDA), ``"gloo"`` or ``"nccl"``.
        device: ``"auto"``, ``"cpu"`` or ``"cuda"``.
        timeout_s: collective timeout in seconds.
        allocator_mode: the malloc configuration every worker runs with (:mod:`graphscale.allocator`; ``None`` =
            ``$GRAPHSCALE_ALLOCATOR``, else ``default``): applied first thing in each spawned worker, for the
            process's lifetime under torchrun, and around ``fn`` (then undone) when it runs in this process.

    Returns:
        ``[fn's result on rank 0, ..., rank world_size-1]``, under torchrun too (on every rank).

    Raises:
        WorkerError: a worker raised or died; the others were stopped.
        ValueError: bad ``world_size``, ``device``, ``backend`` or ``allocator_mode``.
    """
    from graphscale.distributed.main_module import refuse_while_importing_main

    refuse_while_importing_main()  # a worker importing the launcher's script never starts workers itself
    mode = allocator.resolve_mode(allocator_mode)
    if torchrun_detected():
        env_world = int(os.environ["WORLD_SIZE"])
        if world_size != env_world:
            raise ValueError(f"launch: world_size={world_size} but torchrun started WORLD_SIZE={env_world} processes")
        owns_group = not dist.is_initialized()
        env = join_torchrun(backend, device, timeout_s, mode)
        try:
            result = fn(env, *args)
            if world_size == 1:
                return [result]
            results: list[Any] = [None] * world_size
            dist.all_gather_object(results, result)  # the results of every node, ordered by rank
            dist.barrier()  # nobody tears its connections down while a peer still reads from them
            return results
        finally:
            if owns_group and dist.is_initialized():
                dist.destroy_process_group()
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"launch: world_size must be a positive integer, got {world_size!r}")
    kind = resolve_device(device, world_size, backend)
    if world_size == 1:
        dev = torch.device("cuda", 0) if kind == "cuda" else torch.device("cpu")
        with allocator.applied(mode):
            return [fn(DistEnv.local(dev), *args)]
    backend = resolve_backend(backend, kind)
    return _spawn(fn, world_size, args, backend, kind, timeout_s, mode)


# ---------------------------------------------------------------- spawning
def worker_main(argv: list[str]) -> None:
    """A spawned worker's entry point (:data:`graphscale.distributed.worker.BOOTSTRAP`): ``argv`` is the launch
    file, the launch directory, the rank and the launcher's pid."""
    launch_file, workdir, rank, launcher_pid = argv[0], argv[1], int(argv[2]), int(argv[3])
    with open(launch_file, "rb") as f:
        header = pickle.load(f)
    _worker(rank, workdir, launcher_pid, header)


def _worker(rank: int, workdir: str, launcher_pid: int, header: dict) -> None:
    """Body of one spawned worker (:mod:`graphscale.distributed.worker`): the launcher's preparation (its script
    imported only where the run refers to it), join the group, run ``fn``, write the outcome file."""
    _die_with_launcher(launcher_pid)
    os.environ[LAUNCH_DIR_ENV] = workdir  # where remove_with_run registers what the launcher must remove
    allocator.configure(header["allocator_mode"])  # before the worker's data arrives
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the launcher stops us
    out = Path(workdir) / f"rank{rank}.pkl"
    world_size, backend, kind = header["world_size"], header["backend"], header["kind"]
    try:
        from graphscale.distributed.main_module import import_main

        import_main(header["preparation"])
        fn, args = pickle.loads((Path(workdir) / "job.pkl").read_bytes())
        torch.set_num_threads(max(1, cpu_count() // world_size))
        dev = worker_device(kind, rank)
        if kind == "cuda":
            torch.cuda.set_device(dev)
        timeout = timedelta(seconds=header["timeout_s"])
        _join_group(backend, rank, world_size, timeout, f"file://{workdir}/store")
        env = DistEnv(rank=rank, world_size=world_size, device=dev, backend=backend, timeout=timeout, ledger=Ledger())
        result = fn(env, *args)
        payload = pickle.dumps(("ok", result))
    except BaseException as err:  # noqa: BLE001 - every failure must reach the parent
        timed_out = isinstance(err, CollectiveError) and err.timed_out
        summary, secondary = summarize_exception(err)
        secondary = secondary and not isinstance(err, CollectiveTimeout)
        payload = pickle.dumps(("error", traceback.format_exc(), time.time(), timed_out, summary, secondary))
        _write_atomic(out, payload)
        os._exit(1)  # skip interpreter teardown: peers may be blocked on us and the parent is stopping them
    _write_atomic(out, payload)
    try:
        dist.destroy_process_group()
    finally:
        exit_without_teardown(0)


def exit_without_teardown(code: int) -> None:
    """End this worker process with ``code``, skipping interpreter teardown: after a process group was used, the
    C++ destructors of the communication libraries occasionally abort ("terminate called without an active
    exception") or hang (pytorch/pytorch#75097) after all Python code has finished, and under torchrun a hung
    rank keeps every agent of the job waiting. Python-level exit handlers still run (multiprocessing releases its
    semaphores there, logging flushes), and Python's and C's standard streams are flushed (a C library's buffered
    log lines); non-daemon threads are not joined (graphscale leaves none running)."""
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        ctypes.CDLL(None).fflush(None)
    finally:
        os._exit(code)


def remove_with_run(path: str | Path) -> None:
    """Have the launcher of this spawned worker remove directory ``path`` when the run ends, however it ends (the
    launcher's cleanup, else its janitor after the launcher was killed). Register before creating ``path``.
    Outside a spawned worker (one worker in-process, torchrun) nothing is registered: the caller removes its own."""
    workdir = os.environ.get(LAUNCH_DIR_ENV)
    if workdir and os.path.isdir(workdir):
        marks = Path(workdir) / "remove"
        marks.mkdir(exist_ok=True)
        _write_atomic(marks / f"{os.getpid()}-{time.monotonic_ns()}", str(path).encode())


def _remove_registered(workdir: Path) -> None:
    """Remove the paths the run's workers registered (:func:`remove_with_run`)."""
    marks = workdir / "remove"
    for mark in sorted(marks.glob("*")) if marks.is_dir() else []:
        if mark.suffix != ".tmp":
            shutil.rmtree(mark.read_text(), ignore_errors=True)


def _die_with_launcher(launcher_pid: int) -> None:
    """Have the kernel SIGKILL this worker when the launcher exits (Linux), even when nothing of it runs then."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != launcher_pid:  # the launcher exited before the request took effect
        os._exit(1)


def _write_atomic(path: Path, payload: bytes) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(payload)
    tmp.replace(path)


def _read_outcome(path: Path) -> tuple | None:
    if not path.exists():
        return None
    return pickle.loads(path.read_bytes())


def _stop(procs: list) -> None:
    """Terminate the still-running workers we spawned, then kill any that ignore it."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + _KILL_GRACE_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def _sigterm_exits() -> Iterator[None]:
    """Inside the block SIGTERM raises ``SystemExit(143)``, so that the launcher's cleanup runs (main thread, and
    only where SIGTERM has its default action: a handler installed by the caller is left alone)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _spawn(fn: Callable, world_size: int, args: tuple, backend: str, kind: str, timeout_s: float,
           allocator_mode: str) -> list[Any]:
    from multiprocessing import spawn

    from graphscale.distributed.main_module import job_payload
    from graphscale.distributed.worker import BOOTSTRAP, WorkerProcess

    payload, needs_main = job_payload(fn, args, world_size)
    preparation = spawn.get_preparation_data("graphscale-worker")
    if not needs_main:  # nothing of the script is needed: the worker never runs it
        preparation = {k: v for k, v in preparation.items() if not k.startswith("init_main_")}
    if "authkey" in preparation:
        preparation["authkey"] = bytes(preparation["authkey"])  # (its wrapper refuses pickling)
    workdir = tempfile.mkdtemp(prefix="graphscale-launch-")
    (Path(workdir) / "job.pkl").write_bytes(payload)
    launch_file = Path(workdir) / "launch.pkl"
    launch_file.write_bytes(pickle.dumps({"preparation": preparation, "world_size": world_size, "backend": backend,
                                          "kind": kind, "timeout_s": timeout_s, "allocator_mode": allocator_mode}))
    command = [sys.executable, *subprocess._args_from_interpreter_flags(), "-c", BOOTSTRAP, str(launch_file),
               workdir]
    # its own session: a Ctrl-C in the terminal does not reach it
    janitor = subprocess.Popen([sys.executable, "-I", "-S", "-c", _JANITOR, workdir], stdin=subprocess.PIPE,
                               start_new_session=True)
    procs = []
    with _sigterm_exits():
        try:
            for rank in range(world_size):
                procs.append(WorkerProcess([*command, str(rank), str(os.getpid())]))
            return _collect(procs, Path(workdir))
        finally:
            _stop(procs)
            _remove_registered(Path(workdir))
            shutil.rmtree(workdir, ignore_errors=True)
            janitor.stdin.close()
            janitor.wait()


def _collect(procs: list, workdir: Path) -> list[Any]:
    """Wait for every worker's result; raise :class:`WorkerError` for the first failure."""
    outcomes: dict[int, tuple] = {}
    failed: dict[int, tuple] = {}  # rank -> (secondary, when, rank, traceback, timed out, summary)
    grace_until = None
    while len(outcomes) < len(procs):
        for rank, p in enumerate(procs):
            if rank in outcomes or rank in failed or p.is_alive():
                continue
            p.join()
            outcome = _read_outcome(workdir / f"rank{rank}.pkl")
            if outcome is not None and outcome[0] == "ok" and p.exitcode == 0:
                outcomes[rank] = outcome
            elif outcome is not None and outcome[0] == "error":
                failed[rank] = (outcome[5], outcome[2], rank, outcome[1], outcome[3], outcome[4])
            else:
                failed[rank] = (False, float("-inf"), rank, "", False, "")
        if failed and grace_until is None:
            grace_until = time.monotonic() + _CAUSE_GRACE_S
        if failed and (not all(f[0] for f in failed.values()) or time.monotonic() >= grace_until
                       or all(rank in failed or rank in outcomes for rank in range(len(procs)))):
            # The cause is a failure that is not a consequence: a connection closed or reset by a peer follows
            # from that peer's failure, so while only such failures are known the launcher waits a moment
            # (_CAUSE_GRACE_S) for the peer's own report. A worker that died without a traceback (crash,
            # os._exit) is the cause; otherwise the earliest traceback, since peers blocked on a failed worker
            # fail after it. Ties go to the lowest rank.
            _, _, rank, worker_traceback, timed_out, summary = min(failed.values())
            running = [r for r, p in enumerate(procs) if p.is_alive()] if timed_out else None
            _stop(procs)
            raise WorkerError(rank, worker_traceback, procs[rank].exitcode, running, summary,
                              consequences=sum(1 for f in failed.values() if f[0] and f[2] != rank))
        time.sleep(_POLL_S)
    return [outcomes[rank][1] for rank in range(len(procs))]
