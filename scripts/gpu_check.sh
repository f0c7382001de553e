#!/usr/bin/env bash
# The device checks of the GPU path, as one prepared script for a machine with a CUDA GPU and a CUDA build of torch
# (it keeps that torch: GRAPHSCALE_TORCH=""). Sized for a short lease: about 8 minutes on an H100.
#   1. pytest -m gpu: every strategy on CUDA against CPU (gloo; NCCL with a GPU per worker), the kernels, the
#      compiled dropout kernels bit for bit, bench device's op count on CUDA;
#   2. bench device on the issue's 2M-vertex SBM (time, max_memory_allocated, ops, kernel launches vs PyG);
#   3. bench offload --device cuda: host-to-device rates against a plain pinned copy, same run.
# Tables go to stdout and, when $OUT is set, to $OUT/*.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
GRAPHSCALE_TORCH="" bash scripts/setup.sh >/dev/null
py=.venv/bin/python
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$out/gpu.txt"
timeout 300 $py -m pytest -m gpu -o addopts= -q -rs tests/gpu 2>&1 | tail -25 | tee "$out/pytest_gpu.txt"
timeout 240 .venv/bin/graphscale bench device --device cuda --dataset sbm:nodes=2000000,degree=10,features=128 \
  --repeats 10 --warmup 3 2>&1 | tail -12 | tee "$out/bench_device.txt"
timeout 180 .venv/bin/graphscale bench offload --device cuda --skip-measured 2>&1 | tail -30 | tee "$out/bench_offload.txt"
