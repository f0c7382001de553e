#!/usr/bin/env bash
# Set everything up, then train a 2-layer GCN on the bundled Cora dataset.
# Extra arguments go to `graphscale train`, e.g. `bash scripts/quickstart.sh --model gat`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/graphscale train --dataset cora --model gcn --epochs 200 "$@"
