"""Benches against other systems: :mod:`.peers` (a GCN epoch against PyTorch Geometric, ``bench peers``) and
:mod:`.device` (the same on one device, with ops and kernels per epoch, ``bench device``)."""
