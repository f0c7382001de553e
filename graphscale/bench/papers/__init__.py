"""Benches that reproduce a paper's hardware-independent results, one module or subpackage per paper:
:mod:`.gsplit` (GSplit, ``bench minibatch``), :mod:`.hongtu` (HongTu, ``bench offload``), :mod:`.gnnpipe`
(GNNPipe, ``bench pipeline``), :mod:`.sdt_gnn` (SDT-GNN: ``bench averaging``, ``bench partition``) and
:mod:`.neutrontask` (NeutronTask, ``bench task``)."""
