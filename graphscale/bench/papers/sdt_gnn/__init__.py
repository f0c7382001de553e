"""SDT-GNN's results: :mod:`.averaging` (model averaging against single and graph-parallel, ``bench averaging``)
and :mod:`.partition` (the partitioners, SPRING among them, ``bench partition``)."""
