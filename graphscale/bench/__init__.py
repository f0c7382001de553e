"""``graphscale bench NAME``: benches grouped by what each answers. :mod:`.peers`: graphscale against other
systems (PyTorch Geometric); :mod:`.papers`: one module or subpackage per paper whose hardware-independent results
are reproduced; :mod:`.tools`: the project's own questions (the advisor's predictions, memory per worker, scaling,
the sampler's throughput); :mod:`.table`: the plots and argument types the benches share. Each bench's entry module
(listed in :data:`graphscale.cli.BENCHES`) has ``add_arguments(parser)`` and ``run(args)``."""
