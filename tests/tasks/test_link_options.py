"""``--task``, ``--decoder``, ``--hits-k``, ``--link-split``: parsed, and bad values refused in one line before any
worker starts."""

from __future__ import annotations

import pytest

from graphscale.cli import main
from graphscale.config import build_config
from graphscale.validation import validate


def refusal(args: list[str], capsys) -> str:
    assert main(["train", "--epochs", "1", "--no-progress", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    return err.removeprefix("graphscale: error: ").rstrip("\n")


@pytest.mark.parametrize("args, message", [
    (["--task", "link", "--link-split", "0.8,0,0.2"],
     "--link-split fractions must be positive finite numbers, got 0.8,0,0.2"),
    (["--task", "link", "--link-split", "0.9,0.1,0.1"],
     "--link-split fractions must sum to at most 1, got 0.9,0.1,0.1 (sum 1.1)"),
    (["--task", "link", "--link-split", "0.9,0.1"], "--link-split takes three fractions TRAIN,VAL,TEST, got 2 (0.9,0.1)"),
    (["--task", "link", "--hits-k", "0,50"], "--hits-k must be integers >= 1, got 0,50"),
    (["--task", "link", "--strategy", "pipeline", "--workers", "2"],
     ("--task link: strategy 'pipeline' computes its last stage's rows chunk by chunk and takes the loss of each "
      "chunk's own rows as they come, while a link pair's loss needs both endpoints' embeddings, which other chunks "
      "(computed later, or history) hold; strategies that run it here: data-parallel, "
      "graph-parallel, model-averaging, offload, single, split-parallel")),
    (["--task", "link", "--strategy", "graph-parallel", "--workers", "2", "--partitions", "/no/store"],
     ("--task link: strategy 'graph-parallel' partitions the split's message-passing graph itself (the held-out "
      "edges removed), which a given store does not hold (drop --partitions); strategies that run it here: "
      "data-parallel, offload, single, split-parallel")),
    (["--decoder", "mlp"], "--decoder is read by --task link only; this run's task is 'node'"),
    (["--link-split", "0.8,0.1,0.1"], "--link-split is read by --task link only; this run's task is 'node'"),
])
def test_bad_link_options_are_one_line(args, message, capsys):
    assert refusal(args, capsys) == message


@pytest.mark.parametrize(("strategy", "reason"), [("pipeline", "computes its last stage's rows chunk by chunk"),
                                                ("task-parallel", "streams subgraphs through its T and P stages")])
def test_every_strategy_without_link_prediction_refuses_it_by_name_and_reason(strategy, reason):
    config = build_config({"task": "link", "strategy": {"name": strategy, "workers": 2}, "oversubscribe": True})
    with pytest.raises(ValueError, match=f"^--task link: strategy '{strategy}' {reason}.*both endpoints' embeddings"):
        validate(config)


def test_unknown_decoder_and_task(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--task", "link", "--decoder", "bilinear"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "argument --decoder: invalid choice: 'bilinear'" in err
    with pytest.raises(ValueError, match="^--decoder must be one of dot, mlp, distmult, got 'bilinear'$"):
        validate(build_config({"task": "link", "decoder": "bilinear"}))
    with pytest.raises(ValueError, match="^--task must be one of node, link, got 'edge'$"):
        validate(build_config({"task": "edge"}))


def test_link_options_from_a_toml_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('task = "link"\ndecoder = "distmult"\nhits_k = [10]\nlink_split = [0.8, 0.1, 0.1]\n')
    config = build_config({}, path)
    assert (config.task, config.decoder, config.hits_k, config.link_split) == ("link", "distmult", [10],
                                                                               [0.8, 0.1, 0.1])
    path.write_text('decoder = "mlp"\n')
    with pytest.raises(ValueError, match=f"^{path}: decoder is read by --task link only"):
        build_config({}, path)
