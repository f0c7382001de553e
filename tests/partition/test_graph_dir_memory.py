"""`graphscale partition --dataset graphdir:DIR` with restream: peak RSS at fixed |V| stays flat as the records grow 4x
(partition and store; each run in its own process)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from graphscale.data.synthetic import generate_to_dir

pytestmark = pytest.mark.perf  # OS-measured peak RSS: the serial perf tier


def peak_rss(folder, out, tmp_path) -> int:
    summary = tmp_path / f"{out}.json"
    subprocess.run([sys.executable, "-m", "graphscale", "partition", "--dataset", f"graphdir:{folder}", "--method",
                    "restream", "--parts", "4", "--out", str(tmp_path / out), "--chunk-edges", "65536",
                    "--feature-chunk-mb", "4", "--json", str(summary), "--no-progress"],
                   capture_output=True, text=True, check=True, timeout=600)
    return json.loads(summary.read_text())["metrics"]["peak_rss_bytes"]


def test_partitioning_a_graph_directory_is_flat_in_the_number_of_records(tmp_path, record_property):
    """Bound: the 4x graph's peak at most 8 MiB above the 1x one's; keeping even one int32 per record would add
    more than 9 MiB for its 2.4M extra records. A first run on a tiny graph loads the numba kernels."""
    n = 200_000
    warm = tmp_path / "warm"
    generate_to_dir("sbm:nodes=2000,degree=4,features=16", warm)
    peak_rss(warm, "warm-store", tmp_path)
    peaks = []
    for degree in (4, 16):
        folder = tmp_path / f"g{degree}"
        generate_to_dir(f"sbm:nodes={n},degree={degree},features=16", folder)
        peaks.append(peak_rss(folder, f"s{degree}", tmp_path))
    record_property("x4_minus_x1_mib", (peaks[1] - peaks[0]) / 2**20)
    assert peaks[1] - peaks[0] < 8 * 2**20, [p / 2**20 for p in peaks]
