"""The cost layer: what every cost model prices work with, below the strategies (which price their runs with it) and
``graphscale advise`` (which ranks the strategies' predictions): :mod:`.prediction` (the prediction interface),
:mod:`.machine` (the machine profile's figures), :mod:`.pricing` (layers, host-side work, transfers, lock-step
workers, memory), :mod:`.link` (``--task link``'s scoring: its memory and time) and :mod:`.dims` (a model's
shapes). ``docs/architecture.md`` ("How costs are modelled") lists
every cost model and what it is for."""
