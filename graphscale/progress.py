"""Training and setup progress on stderr: a bar on a terminal, plain lines when stderr is redirected.

On a terminal, :class:`EpochProgress` shows a tqdm bar with the latest loss and accuracies. Redirected (a log
file, a pipe, a CI job) a bar would write a carriage-return-separated line per update, so it prints one line
every :data:`LINES`-th of the epochs instead, and one for the last epoch::

    single/gcn epoch 20/200: loss 0.8131, val 0.768, test 0.790, 0.05 s/epoch

Setup steps (:func:`setup_progress`) follow the same rule: a bar per step on a terminal, a line when a step starts and
one when it ends otherwise.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

#: lines printed over a run when stderr is not a terminal
LINES = 10


class EpochProgress:
    """Progress over epochs ``start..total-1`` (``total`` = the run's epochs).

    Args:
        start: the first epoch of this run (after a resumed checkpoint, not 0).
        total: the run's epoch count.
        desc: what is trained (``strategy/model``).
        enabled: ``False`` shows nothing (``--no-progress``, or a worker other than rank 0).
        stream: where to write (default ``sys.stderr``); a bar when it is a terminal, lines otherwise.
    """

    def __init__(self, start: int, total: int, desc: str, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.total, self.desc, self.enabled = total, desc, enabled
        self.stream = stream or sys.stderr
        self.every = max(1, math.ceil(total / LINES))
        self.bar = None
        self._last = time.perf_counter()
        self._epochs = 0
        if enabled and self.stream.isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=start, desc=desc, unit="epoch", dynamic_ncols=True, leave=True,
                            file=self.stream)

    def update(self, epoch: int, loss: float, val_acc: float, test_acc: float) -> None:
        """Epoch ``epoch`` (0-based) ended with these figures."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss:.4f}", val=f"{val_acc:.3f}", test=f"{test_acc:.3f}")
            return
        self._epochs += 1
        done = epoch + 1
        if done % self.every and done != self.total:
            return
        now = time.perf_counter()
        per_epoch = (now - self._last) / self._epochs
        self._last, self._epochs = now, 0
        print(f"{self.desc} epoch {done}/{self.total}: loss {loss:.4f}, val {val_acc:.3f}, test {test_acc:.3f}, "
              f"{per_epoch:.2f} s/epoch", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@contextlib.contextmanager
def setup_progress(what: str, enabled: bool = True, stream: TextIO | None = None) -> Iterator[None]:
    """Progress of one slow setup step (loading, partitioning, writing a store or graph directory, preparing
    features): on a terminal a one-step tqdm bar whose elapsed time a helper thread refreshes twice a second, full
    when the step ends; otherwise a line when it starts and one with its time when it ends::

        graphscale: setup: loading cora ...
        graphscale: setup: loading cora: done in 1.2 s
    """
    stream = stream or sys.stderr
    if not enabled:
        yield
        return
    label = f"graphscale: setup: {what}"
    if not stream.isatty():
        print(f"{label} ...", file=stream, flush=True)
        start = time.perf_counter()
        yield
        print(f"{label}: done in {time.perf_counter() - start:.1f} s", file=stream, flush=True)
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=1, desc=label, file=stream, leave=True, dynamic_ncols=True,
               bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}]")
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.5):
            bar.refresh()

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
        bar.update(1)
    finally:
        stop.set()
        ticker.join()
        bar.close()


class StepProgress:
    """A ``(step, done, total)`` progress callback (as :func:`graphscale.data.ingest.ingest` calls it): on a terminal
    a tqdm bar per step; otherwise a line when a step starts and at every :data:`LINES`-th of it, and one when it
    ends (``total`` 0 = unknown: counts only)::

        graphscale: convert: build CSR 50% (2,000,000/4,000,000)

    Args:
        what: the command, in the lines (``convert``).
        enabled: ``False`` shows nothing (``--no-progress``).
        stream: where to write (default ``sys.stderr``).
    """

    def __init__(self, what: str, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.what, self.enabled = what, enabled
        self.stream = stream or sys.stderr
        self._bar, self._step, self._shown = None, None, -1

    def __call__(self, step: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if step != self._step:
            self.close()
            self._step, self._shown = step, -1
            if self.stream.isatty():
                from tqdm.auto import tqdm

                self._bar = tqdm(total=total or None, desc=f"graphscale: {self.what}: {step}", file=self.stream,
                                 leave=False, dynamic_ncols=True, unit_scale=True)
        if self._bar is not None:
            self._bar.update(done - self._bar.n)
            return
        tenth = LINES * done // total if total else -1
        if tenth > self._shown or self._shown < 0:
            self._shown = max(tenth, 0)
            share = f"{100 * done // total}% ({done:,}/{total:,})" if total else f"{done:,}"
            print(f"graphscale: {self.what}: {step} {share}", file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        self._bar, self._step = None, None
