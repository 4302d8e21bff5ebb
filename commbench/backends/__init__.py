"""Backends run collectives over CollectiveArgs; nothing outside this package calls torch.distributed ops."""

from commbench.backends.base import Backend, CollectiveArgs

__all__ = ["Backend", "CollectiveArgs"]
