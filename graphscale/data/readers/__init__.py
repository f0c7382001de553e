"""Dataset readers, one module per on-disk format; :mod:`graphscale.data.datasets` dispatches a spec to them."""
