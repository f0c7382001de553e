"""The Python API: ``graphscale.train(model, data, **options) -> Report``.

::

    import graphscale as gs
    report = gs.train("gcn", "cora", strategy="graph-parallel", workers=2, epochs=50)
    report.final.test_acc; report.epochs[-1].bytes; report.to_json("r.json"); report.plot("curves.png")

:func:`train` is ``graphscale train`` from Python: it builds the same :class:`~graphscale.config.RunConfig` (the
keywords are the command line's options, :func:`keyword_fields`) and runs it with :func:`graphscale.run.run`, so a
call and the command with the same options train the same model on the same data.

``model`` is a graphscale model name (``"gcn"``, ``"sage"``, ...), a ``torch.nn.Module`` (a graphscale ``GNN``, a
PyG model: :mod:`graphscale.nn.pyg`), or a zero-argument callable returning one. Worker processes rebuild the model
(:func:`model_factory`): a module is sent as a pickled copy of itself as it is at the call (its initial
parameters), a callable by reference (its module and name, so it must be defined at a module's top level); the
module passed is never changed. Something that cannot be sent (a lambda, a function or class defined inside a
function or typed at an interactive prompt) is refused before anything runs, naming the factory form, for every
worker count (one worker would not need to send it; the same call must keep working with more).

``data`` is a dataset spec (``"cora"``, ``"ogb:DIR"``, ...: ``graphscale datasets``), a graphscale ``Graph``, a PyG
``Data``, or an OGB node-property dataset object (:mod:`graphscale.data.convert`), or ``None`` (the dataset of
``partitions=``, else Cora). An in-memory graph is written once, as a graph directory, under the cache directory
(``cache_dir=``, else ``$GRAPHSCALE_CACHE_DIR`` or ``~/.cache/graphscale``: ``inputs/NAME-DIGEST``,
:func:`graphscale.prepare.input_dataset`) and read from there by every strategy, as ``--dataset graphdir:DIR``.
"""

from graphscale.api.inference import load_model, predict
from graphscale.api.keywords import EXTRA_KEYWORDS, keyword_fields, keyword_overrides
from graphscale.api.models import ModuleCopy, model_factory
from graphscale.api.report import EpochRecord, Final, Report
from graphscale.api.training import train

__all__ = ["EXTRA_KEYWORDS", "EpochRecord", "Final", "ModuleCopy", "Report", "keyword_fields", "keyword_overrides",
           "load_model", "model_factory", "predict", "train"]
