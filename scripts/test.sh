#!/usr/bin/env bash
# Set up (if needed) and run the test suite. Extra arguments go to pytest (and skip the tiers after the first).
#
# Without arguments, three tiers run one after the other:
# 1. the unit tier: `pytest` (pyproject's addopts deselect the `perf` marker); every assertion in it is
#    deterministic (exact values, ledger bytes, tracked bytes, op counts), never OS memory or wall time; the
#    approximate strategies' accuracy tests (one seed each, bounds above the measured spread over seeds) run here;
# 2. the device kernel backend: every strategy's exactness tests again with GRAPHSCALE_KERNELS=torch (the
#    whole-tensor path CUDA takes, on CPU tensors), so both kernel paths are held to the single-process reference.
#    It selects the tests by name: an exactness test's name says what it equals or matches (keep new ones named
#    that way);
# 3. the perf tier (`pytest -m perf`): bounds on OS-measured memory, page faults and wall time, run serially after
#    the others so that no other test shares the machine with them; each bound's measured spread is in its test's
#    docstring (`python -m graphscale.testing.perf_spread` measures it again).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest --durations=15 "$@"
fi
.venv/bin/python -m pytest --durations=15
EXACT='equal or equals or matches or exact or reference or oracle or trajectory or reproduce or identical or independent or one_chunk or one_partition or single_worker'
# names that match but run no GNN kernel (plans, cost models, fixtures, sampling rates, option errors): the same on
# both backends, so the unit tier's run of them suffices
NO_KERNEL='keep_rate or cost_model or toy_graph_fixture or spec_formulas or bad_averaging_options'
echo "device kernel backend (GRAPHSCALE_KERNELS=torch): the strategies' exactness tests"
GRAPHSCALE_KERNELS=torch .venv/bin/python -m pytest -o addopts= -q -p no:cacheprovider tests/strategies \
  -m 'not accuracy and not perf' -k "($EXACT) and not ($NO_KERNEL)"
echo "perf tier: OS-measured memory, page faults and wall time, serially"
exec .venv/bin/python -m pytest -o addopts= -q -p no:cacheprovider -m perf --durations=15
