"""graphscale: train graph neural networks past the memory and speed of one device."""

__version__ = "0.1.0"
