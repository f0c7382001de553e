"""Link prediction's parts: metrics against OGB's evaluator, keyed negatives, decoders, edge splits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphscale.data.graph import Graph
from graphscale.tasks.decoders import build_decoder
from graphscale.tasks.metrics import auc, hits_at_k, mrr
from graphscale.tasks.negatives import EVAL_CANDIDATES, eval_tails, train_tails
from graphscale.tasks.split import TEST, TRAIN, VAL, check_fractions, split_edges

ogb_evaluate = pytest.importorskip("ogb.linkproppred")


def scores(n: int, seed: int, ties: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(n, generator=g, dtype=torch.float64)
    return (s * 4).round() / 4 if ties else s  # rounding makes ties


@pytest.mark.parametrize("ties", [False, True])
def test_metrics_equal_ogbs_evaluator(ties):
    pos, neg = scores(300, 0, ties) + 0.5, scores(400, 1, ties)
    for name, k in (("ogbl-ddi", 20), ("ogbl-collab", 50), ("ogbl-ppa", 100)):
        expected = ogb_evaluate.Evaluator(name).eval({"y_pred_pos": pos, "y_pred_neg": neg})[f"hits@{k}"]
        assert hits_at_k(pos, neg, k) == pytest.approx(expected, abs=1e-12)
    assert hits_at_k(pos, neg[:10], 20) == 1.0  # fewer negatives than K: OGB's 1
    rows = scores(300 * 30, 2, ties).reshape(300, 30)
    lists = ogb_evaluate.Evaluator("ogbl-citation2").eval({"y_pred_pos": pos, "y_pred_neg": rows})
    assert mrr(pos, rows) == pytest.approx(float(lists["mrr_list"].mean()), rel=1e-6)
    expected_auc = ogb_evaluate.Evaluator("ogbl-vessel").eval({"y_pred_pos": pos.numpy(), "y_pred_neg": neg.numpy()})
    assert auc(pos, neg) == pytest.approx(expected_auc["rocauc"], abs=1e-12)


def test_metrics_of_known_cases():
    assert auc(torch.tensor([2.0, 3.0]), torch.tensor([0.0, 1.0])) == 1.0
    assert auc(torch.tensor([1.0]), torch.tensor([1.0])) == 0.5  # a tie counts one half
    assert np.isnan(auc(torch.tensor([]), torch.tensor([1.0])))
    # rank of 1.0 among [2, 1, 0]: optimistic 2, pessimistic 3 -> 2.5
    assert mrr(torch.tensor([1.0]), torch.tensor([[2.0, 1.0, 0.0]])) == pytest.approx(1 / 2.5)


def test_negatives_are_keyed_by_seed_epoch_and_edge_id():
    ids = torch.arange(1000)
    every = train_tails(ids, 97, seed=3, epoch=5)
    assert torch.equal(train_tails(ids[500:700], 97, seed=3, epoch=5), every[500:700])  # any subset, any worker
    assert torch.equal(train_tails(ids.flip(0), 97, 3, 5), every.flip(0))
    assert int(every.min()) >= 0 and int(every.max()) < 97
    assert (train_tails(ids, 97, 3, 6) != every).float().mean() > 0.9  # a new epoch, new negatives
    assert (train_tails(ids, 97, 4, 5) != every).float().mean() > 0.9  # a new seed too
    counts = torch.bincount(every, minlength=97).double()
    assert counts.std() / counts.mean() < 0.5  # roughly uniform
    cand = eval_tails(ids[:50], 97, seed=3)
    assert cand.shape == (50, EVAL_CANDIDATES)
    assert torch.equal(eval_tails(ids[10:20], 97, seed=3), cand[10:20])
    assert not torch.equal(cand[:, 0], every[:50])  # the evaluation stream is not the training one


def test_decoders():
    zu, zv = torch.randn(7, 5, dtype=torch.float64), torch.randn(7, 5, dtype=torch.float64)
    dot = build_decoder("dot", 5, 0, torch.float64)
    assert torch.allclose(dot(zu, zv), (zu * zv).sum(1))
    assert torch.allclose(build_decoder("distmult", 5, 0, torch.float64)(zu, zv), dot(zu, zv))  # r = 1 at start
    mlp, again = build_decoder("mlp", 5, 4, torch.float64), build_decoder("mlp", 5, 4, torch.float64)
    assert torch.equal(mlp(zu, zv), again(zu, zv))  # seeded: every worker starts from the same parameters
    assert mlp(zu[:, None, :], zv[None, :, :]).shape == (7, 7)  # any leading shape
    with pytest.raises(ValueError, match="--decoder must be one of dot, mlp, distmult, got 'bilinear'"):
        build_decoder("bilinear", 5, 0)


def ring_with_chords(n: int = 60) -> Graph:
    src = torch.cat([torch.arange(n), torch.arange(0, n, 3)])
    dst = torch.cat([(torch.arange(n) + 1) % n, (torch.arange(0, n, 3) + 7) % n])
    return Graph.from_edges(torch.cat([src, dst]), torch.cat([dst, src]), n).coalesce()


def test_split_of_an_undirected_graph():
    graph = ring_with_chords()
    split = split_edges(graph, [0.7, 0.1, 0.2], seed=1)
    m = split.pairs.shape[1]
    assert split.undirected and m == graph.num_edges // 2 and bool((split.pairs[0] < split.pairs[1]).all())
    assert split.counts() == {"train": m - round(0.1 * m) - round(0.2 * m), "val": round(0.1 * m),
                              "test": round(0.2 * m)}
    message = set(zip(split.message_graph.indices.tolist(), split.message_graph.dst_of_edges().tolist()))
    for e, (u, v) in enumerate(split.pairs.t().tolist()):
        held_out = int(split.split_of[e]) in (VAL, TEST)
        assert ((u, v) in message) is not held_out and ((v, u) in message) is not held_out  # both directions
    assert split.message_graph.is_symmetric()
    assert torch.equal(split_edges(graph, [0.7, 0.1, 0.2], seed=1).split_of, split.split_of)  # seeded
    assert not torch.equal(split_edges(graph, [0.7, 0.1, 0.2], seed=2).split_of, split.split_of)
    assert split_edges(graph, [0.5, 0.1, 0.2], seed=1).counts()["train"] == round(0.5 * m)  # the rest unsupervised


def test_split_counts_stranded_vertices():
    """A vertex whose every edge is held out is counted, and the warning names the counts."""
    graph = ring_with_chords()
    split = split_edges(graph, [0.4, 0.3, 0.3], seed=0)
    degree = split.message_graph.in_degrees()
    had = graph.in_degrees() > 0
    assert split.stranded == int((had & (degree == 0)).sum()) > 0
    assert split.warning().startswith(f"--link-split leaves {split.stranded} of 60 vertices without any training edge")
    assert int((split.split_of == TRAIN).sum()) > 0


@pytest.mark.parametrize("fractions, message", [
    ([0.8, 0.0, 0.2], "must be positive finite numbers, got 0.8,0,0.2"),
    ([0.8, -0.1, 0.2], "must be positive"),
    ([0.9, 0.1, 0.1], "must sum to at most 1, got 0.9,0.1,0.1 \\(sum 1.1\\)"),
    ([0.9, 0.1], "takes three fractions TRAIN,VAL,TEST, got 2"),
])
def test_bad_fractions(fractions, message):
    with pytest.raises(ValueError, match=message):
        check_fractions(fractions)


def test_a_split_too_small_for_the_graph():
    with pytest.raises(ValueError, match="leaves a split empty"):
        split_edges(ring_with_chords(8), [0.9, 0.01, 0.05], seed=0)


def test_a_split_written_by_part_reads_back_whole(tmp_path):
    """The link folder is the split's one on-disk form: graph-parallel reads a part, model-averaging reads every
    part back at their edge ids, with a given split's negatives."""
    from dataclasses import replace

    from graphscale.tasks.link_store import is_link_folder, read_link_part, read_link_split, write_link_parts

    split = split_edges(ring_with_chords(), [0.3, 0.3, 0.3], seed=0)  # some pairs in no split, some vertices stranded
    negatives = {"neg_pairs": {"val": torch.tensor([[0, 1], [5, 9]])},
                 "neg_tails": {"test": torch.arange(int((split.split_of == TEST).sum()) * 3).reshape(-1, 3) % 60}}
    for given in ({}, negatives):
        written = replace(split, **given)
        owner = torch.arange(60) % 3
        folder = tmp_path / f"store{len(given)}.link"
        write_link_parts(written, owner, 3, folder)
        assert is_link_folder(folder)
        back = read_link_split(folder)
        assert (back.num_nodes, back.undirected, back.stranded) == (60, True, split.stranded) and back.stranded > 0
        assert back.warning() == split.warning() and back.message_graph is None
        assert torch.equal(back.split_of, split.split_of)
        supervised = split.split_of != 3
        assert torch.equal(back.pairs[:, supervised], split.pairs[:, supervised])
        assert {k: v.tolist() for k, v in back.neg_pairs.items()} == {k: v.tolist() for k, v in written.neg_pairs.items()}
        assert {k: v.tolist() for k, v in back.neg_tails.items()} == {k: v.tolist() for k, v in written.neg_tails.items()}
        part = read_link_part(folder, 1)
        assert bool((owner[part.pairs[0]] == 1).all()) and part.num_train == split.counts()["train"]
    (folder / "meta.json").write_text('{"num_nodes": 60, "parts": 3, "counts": {}, "warning": null}')
    assert not is_link_folder(folder)  # an older form, without num_pairs: the cache writes it again
    assert not is_link_folder(tmp_path / "absent.link")


def test_metrics_from_per_pair_summaries_equal_the_whole_scores(monkeypatch):
    """A partitioned run gathers per-pair summaries of blocks of pairs: the metrics equal those of all the scores."""
    from graphscale.tasks import metrics
    from graphscale.tasks.link import link_metrics, score_summary, summary_metrics

    pos = scores(500, 3, ties=True)
    neg = scores(500 * 40, 4, ties=True).reshape(500, 40)
    whole = link_metrics({"val": (pos, neg), "train": (pos, neg[:, :1])}, [5, 50])
    monkeypatch.setattr(metrics, "RANK_ROWS", 7)  # ranks computed in row blocks
    blocks = [score_summary(pos[s], neg[s]) for s in (slice(0, 123), slice(123, 123), slice(123, 500))]
    joined = tuple(torch.cat(parts) for parts in zip(*blocks))
    train = score_summary(pos, neg[:, :1])
    assert train[2] is None  # one candidate: no MRR
    assert summary_metrics({"val": joined, "train": train}, [5, 50]) == whole
    rank = 0.5 * ((neg > pos[:, None]).sum(1) + (neg >= pos[:, None]).sum(1)).double() + 1
    assert whole["val_mrr"] == float((1.0 / rank).mean()) and "train_mrr" not in whole


@pytest.mark.parametrize("name", ["dot", "distmult"])  # exact row-wise products (an MLP's matmul bits vary with shape)
def test_evaluation_in_blocks_equals_the_whole_splits_scores(monkeypatch, name):
    """``LinkTask.evaluate`` scores each split in blocks of positives, its candidates drawn per block: the metrics
    equal those of every positive's and candidate's score computed at once (the same candidates, the same ranks)."""
    from graphscale.tasks import link
    from graphscale.tasks.link import LinkTask, link_metrics
    from graphscale.tasks.split import SPLIT_NAMES

    graph = random_graph_for_split()
    split = split_edges(graph, (0.8, 0.1, 0.1), seed=2)
    decoder = build_decoder(name, 5, seed=0, dtype=torch.float64)
    z = torch.randn(graph.num_nodes, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    task = LinkTask(split, decoder, seed=4, hits_k=[3, 20], device="cpu")
    whole = {}
    with torch.no_grad():
        for name_ in SPLIT_NAMES:
            ids = split.ids(name_)
            u, v = split.pairs[:, ids]
            cand = eval_tails(ids, graph.num_nodes, 4, count=1 if name_ == "train" else EVAL_CANDIDATES)
            whole[name_] = (decoder(z[u], z[v]), decoder(z[u][:, None, :], z[cand]))
    expected = link_metrics(whole, [3, 20])
    monkeypatch.setattr(link, "EVAL_PAIRS", 7)  # several blocks per split, the last one short
    assert split.ids("val").numel() % 7 and split.ids("test").numel() > 7
    assert task.evaluate(z) == expected
    assert set(expected) >= {"val_mrr", "test_mrr", "train_auc"} and "train_mrr" not in expected


def random_graph_for_split() -> Graph:
    from graphscale.testing.graphs import random_graph

    return random_graph(80, 6.0, num_features=4, num_classes=2, seed=5)
