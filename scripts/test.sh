#!/usr/bin/env bash
# Set up (if needed) and run the test suite. Extra arguments go to pytest (and skip the perf tier).
#
# Without arguments, two tiers run:
# 1. the unit tier: `pytest -n 2` (GRAPHSCALE_TEST_JOBS=N: N pytest-xdist processes, default 2; 0: one process
#    without xdist), each process with its torch threads set to its share of the cores, its own worker pool, cache
#    directory and temporary directories, the tests marked `slow` handed out first (tests/conftest.py, and
#    docs/testing.md for the measurements); pyproject's addopts deselect the `perf` marker; every assertion in it is
#    deterministic (exact values, ledger bytes, tracked bytes, op counts), never OS memory or wall time; every
#    strategy's exactness tests run on both kernel paths (default and GRAPHSCALE_KERNELS=torch, the whole-tensor
#    path CUDA takes, on CPU tensors: tests/strategies/conftest.py); the approximate strategies' accuracy tests
#    (one seed each, bounds above the measured spread over seeds) run here;
# 2. the perf tier (`pytest -m perf`): bounds on OS-measured memory, page faults and wall time, run serially after
#    the unit tier has finished, so that no other test shares the machine with them; each bound's measured spread
#    is in its test's docstring (`python -m graphscale.testing.perf_spread` measures it again).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest --durations=15 "$@"
fi
JOBS=${GRAPHSCALE_TEST_JOBS:-2}
case "$JOBS" in
  ''|*[!0-9]*) echo "GRAPHSCALE_TEST_JOBS=$JOBS: expected a number of pytest-xdist processes (0: none)" >&2; exit 2 ;;
esac
if [ "$JOBS" -eq 0 ]; then
  .venv/bin/python -m pytest --durations=15
else
  .venv/bin/python -m pytest -n "$JOBS" --maxschedchunk 2 --durations=15
fi
echo "perf tier: OS-measured memory, page faults and wall time, serially"
exec .venv/bin/python -m pytest -o addopts= -q -p no:cacheprovider -m perf --durations=15
