"""NeutronTask's results, one command (``bench task``): :mod:`.task` is its entry (options, the sections'
dispatch, the plot); its sections live in :mod:`.cost` (comm, memory, replication), :mod:`.accuracy` (accuracy,
subgraphs) and :mod:`.speed` (pipeline, ablation), over what they share in :mod:`.runs`."""
