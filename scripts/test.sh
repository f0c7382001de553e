#!/usr/bin/env bash
# Set up (if needed) and run the test suite. Extra arguments go to pytest (and skip the second pass below).
#
# Without arguments a second pass runs every strategy's exactness tests again on the device kernel backend
# (GRAPHSCALE_KERNELS=torch: the whole-tensor path CUDA takes, on CPU tensors), so both kernel paths are held to
# the single-process reference. It selects the tests by name: an exactness test's name says what it equals or
# matches (keep new ones named that way).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest --durations=15 "$@"
fi
.venv/bin/python -m pytest --durations=15
EXACT='equal or equals or matches or exact or reference or oracle or trajectory or reproduce or identical or independent or one_chunk or one_partition or single_worker'
echo "device kernel backend (GRAPHSCALE_KERNELS=torch): the strategies' exactness tests"
GRAPHSCALE_KERNELS=torch exec .venv/bin/python -m pytest -o addopts= -q -p no:cacheprovider tests/strategies -k "$EXACT"
