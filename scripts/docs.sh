#!/usr/bin/env bash
# Build the documentation site (mkdocs.yml, docs/) with warnings as errors, as CI does: a broken link or anchor, a
# page missing from the nav, an unresolved cross-reference or a docstring whose parameters do not match its
# signature fails the build. Installs the `docs` extra into the venv first (once per pyproject.toml / this script).
# The site goes to a temporary directory, removed afterwards; `.venv/bin/mkdocs serve` previews it instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${GRAPHSCALE_VENV:-.venv}
stamp="$VENV/.graphscale-docs-installed"
want="$(cat pyproject.toml scripts/docs.sh | sha256sum | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/python" -m pip install -q -e ".[docs]"
  echo "$want" > "$stamp"
fi
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
# NO_MKDOCS_2_WARNING: mkdocs-material's banner about its successor, printed on every build
NO_MKDOCS_2_WARNING=1 "$VENV/bin/python" -m mkdocs build --strict --site-dir "$site"
echo "docs: mkdocs build --strict passed ($(find "$site" -name '*.html' | wc -l) pages)"
