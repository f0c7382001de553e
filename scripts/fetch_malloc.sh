#!/usr/bin/env bash
# Unpack tcmalloc and jemalloc (Debian packages) into .venv/malloc without root, for
# `graphscale bench peers --allocator tcmalloc|jemalloc`. Prints the folder to add to LD_LIBRARY_PATH.
# Fails (exit 1) where apt-get cannot download them; nothing else in graphscale needs them.
set -euo pipefail
cd "$(dirname "$0")/.."
dest="$(pwd)/${GRAPHSCALE_VENV:-.venv}/malloc"
found() { find "$dest" -name "$1" 2>/dev/null | head -n 1; }
if [ -z "$(found libtcmalloc_minimal.so.4)" ] || [ -z "$(found libjemalloc.so.2)" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && timeout 120 apt-get download -q libtcmalloc-minimal4 libjemalloc2 >/dev/null 2>&1)
  mkdir -p "$dest"
  for deb in "$work"/*.deb; do dpkg -x "$deb" "$dest"; done
fi
dirname "$(found libjemalloc.so.2)"
