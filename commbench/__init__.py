"""commbench: a collective-communication benchmark for PyTorch distributed."""

__version__ = "0.1.0"
