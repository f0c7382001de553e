"""Benches of the project's own questions: :mod:`.advise` (the advisor's predictions against measurements),
:mod:`.memory` (OS-measured memory per worker), :mod:`.scaling` (single against each distributed strategy on the
same cores) and :mod:`.sampler` (the neighbour sampler's throughput)."""
