#!/usr/bin/env bash
# Set up (if needed) and run the test suite. Extra arguments go to pytest (and skip the tiers after the first).
#
# Without arguments, three tiers run:
# 1. the unit tier: `pytest` (GRAPHSCALE_TEST_JOBS=N>0: `pytest -n N`, pytest-xdist processes, each with its own
#    worker pool, cache directory and temporary directories, the tests marked `slow` handed out first, see
#    tests/conftest.py; not the default: measured slower on an idle 2-core machine, docs/testing.md);
#    pyproject's addopts deselect the `perf` marker; every assertion in it is deterministic
#    (exact values, ledger bytes, tracked bytes, op counts), never OS memory or wall time; the approximate
#    strategies' accuracy tests (one seed each, bounds above the measured spread over seeds) run here;
# 2. the device kernel backend (with GRAPHSCALE_TEST_JOBS=N>0 at the same time as the unit tier, in one more
#    process): every strategy's exactness tests again with
#    GRAPHSCALE_KERNELS=torch (the whole-tensor path CUDA takes, on CPU tensors), so both kernel paths are held to
#    the single-process reference. It selects the tests by name: an exactness test's name says what it equals or
#    matches (keep new ones named that way);
# 3. the perf tier (`pytest -m perf`): bounds on OS-measured memory, page faults and wall time, run serially after
#    the others have finished, so that no other test shares the machine with them; each bound's measured spread is
#    in its test's docstring (`python -m graphscale.testing.perf_spread` measures it again).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest --durations=15 "$@"
fi
JOBS=${GRAPHSCALE_TEST_JOBS:-0}
case "$JOBS" in
  ''|*[!0-9]*) echo "GRAPHSCALE_TEST_JOBS=$JOBS: expected a number of pytest-xdist processes (0: none)" >&2; exit 2 ;;
esac
EXACT='equal or equals or matches or exact or reference or oracle or trajectory or reproduce or identical or independent or one_chunk or one_partition or single_worker'
# names that match but run no GNN kernel (plans, cost models, fixtures, sampling rates, option errors): the same on
# both backends, so the unit tier's run of them suffices
NO_KERNEL='keep_rate or cost_model or toy_graph_fixture or spec_formulas or bad_averaging_options'
device_tier() {
  GRAPHSCALE_KERNELS=torch .venv/bin/python -m pytest -o addopts= -q -p no:cacheprovider tests/strategies \
    -m 'not accuracy and not perf' -k "($EXACT) and not ($NO_KERNEL)"
}
if [ "$JOBS" -eq 0 ]; then
  .venv/bin/python -m pytest --durations=15
  echo "device kernel backend (GRAPHSCALE_KERNELS=torch): the strategies' exactness tests"
  device_tier
else
  device_log=$(mktemp)
  trap 'rm -f "$device_log"' EXIT
  device_tier > "$device_log" 2>&1 &
  device_pid=$!
  unit=0
  .venv/bin/python -m pytest -n "$JOBS" --maxschedchunk 2 --durations=15 || unit=$?
  device=0
  wait "$device_pid" || device=$?
  echo "device kernel backend (GRAPHSCALE_KERNELS=torch), run alongside the unit tier: the strategies' exactness tests"
  cat "$device_log"
  rm -f "$device_log"  # (the perf tier's exec below skips the EXIT trap)
  if [ "$unit" -ne 0 ] || [ "$device" -ne 0 ]; then
    echo "unit tier exit status $unit, device kernel backend exit status $device: the perf tier does not run" >&2
    exit 1
  fi
fi
echo "perf tier: OS-measured memory, page faults and wall time, serially"
exec .venv/bin/python -m pytest -o addopts= -q -p no:cacheprovider -m perf --durations=15
