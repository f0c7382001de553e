"""``edgelist:FILE[:LABELS]:weighted``: the third column is the edge's weight (both directions), the same graph
through ``load_dataset`` and through ``ingest`` (a graph directory keeps the weights), trained by PyG's ``GCN`` as
its own loop trains it with those weights; a line without a numeric weight is one error naming the file and line."""

from __future__ import annotations

import pytest
import torch

from graphscale.data.datasets import load_dataset
from graphscale.data.formats import load_graph_dir
from graphscale.data.ingest import ingest

TEXT = """# a weighted edge list
src,dst,weight
10 20 0.5
20 30 2
30 10 1.25
20 10 0.5
40 40 3
30,40,0.75
"""


def _weights(graph) -> dict[tuple[int, int], float]:
    dst = torch.repeat_interleave(torch.arange(graph.num_nodes), graph.indptr[1:] - graph.indptr[:-1])
    return {(int(u), int(v)): float(w) for u, v, w in zip(graph.indices, dst, graph.edge_weight, strict=True)}


def test_the_third_column_weighs_both_directions(tmp_path):
    file = tmp_path / "g.txt"
    file.write_text(TEXT)
    graph = load_dataset(f"edgelist:{file}:weighted")
    assert graph.meta["original_ids"].tolist() == [10, 20, 30, 40]
    assert _weights(graph) == {(0, 1): 0.5, (1, 0): 0.5, (1, 2): 2.0, (2, 1): 2.0, (2, 0): 1.25, (0, 2): 1.25,
                               (2, 3): 0.75, (3, 2): 0.75}  # the self-loop dropped, the repeated edge once
    assert load_dataset(f"edgelist:{file}").edge_weight is None
    ingest(f"edgelist:{file}:weighted", tmp_path / "dir")
    stored = load_graph_dir(tmp_path / "dir")
    assert torch.equal(stored.indices, graph.indices) and torch.equal(stored.edge_weight, graph.edge_weight)


@pytest.mark.parametrize(("line", "match"), [
    ("30 10 heavy", r"g\.txt, line 9: weight 'heavy' is not a finite number$"),
    ("30 10", r"g\.txt, line 9: no weight \(the spec says weighted"),
    ("30 10 nan", r"g\.txt, line 9: weight 'nan' is not a finite number$"),
    ("10 20 0.25", r"g\.txt, line 9: edge 0-1 has weight 0\.25, but line 6 gave it 0\.5; an undirected edge")])
def test_a_bad_weight_is_one_line_naming_the_file_and_line(tmp_path, line, match):
    file = tmp_path / "g.txt"
    file.write_text(TEXT + line + "\n")
    with pytest.raises(ValueError, match=match) as err:
        load_dataset(f"edgelist:{file}:weighted")
    assert "\n" not in str(err.value)


def test_a_weighted_edge_list_trains_as_pygs_loop_with_its_weights(tmp_path):
    pytest.importorskip("torch_geometric")
    from torch_geometric.nn.models import GCN

    import graphscale as gs
    from graphscale.data.readers.pyg import to_pyg
    from graphscale.testing import random_graph
    from tests.api.test_edge_weights import pyg_loop

    g = random_graph(30, num_features=4, num_classes=3, seed=5, dtype=torch.float64)
    src, dst = g.indices, torch.repeat_interleave(torch.arange(g.num_nodes), g.indptr[1:] - g.indptr[:-1])
    lines = [f"{int(u)} {int(v)} {0.1 + (int(u) * 7 + int(v) * 7) % 10 / 10}" for u, v in zip(src, dst) if u < v]
    (tmp_path / "g.txt").write_text("\n".join(lines) + "\n")
    present = sorted({int(u) for u in src} | {int(v) for v in dst})
    labels = "\n".join(f"{v} {int(g.y[v])}" for v in present)
    (tmp_path / "labels.txt").write_text(labels + "\n")
    spec = f"edgelist:{tmp_path / 'g.txt'}:{tmp_path / 'labels.txt'}:weighted"
    graph = load_dataset(spec)
    assert graph.weighted and graph.num_nodes == len(present)
    data = to_pyg(graph)
    data.x = torch.eye(graph.num_nodes, dtype=torch.float64)[:, :4] + 0.5
    torch.manual_seed(0)
    model = GCN(4, 8, 2, 3).double()
    report = gs.train(model, data, epochs=3, dtype="float64", progress=False, lr=0.01, weight_decay=5e-4)
    torch.manual_seed(0)
    expected = pyg_loop(GCN(4, 8, 2, 3).double(), data)
    assert all(abs(a.loss - b) <= 1e-10 * abs(b) for a, b in zip(report.epochs, expected, strict=True))
