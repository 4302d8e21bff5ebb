"""Workload patterns: the collectives of a training step, issued as a training stack issues them.

``fsdp`` (``commbench pattern fsdp``): FSDP's all-gathers and padded, pre/post-divided, optionally bucketed
reduce-scatters per unit of a model, and their overlap with compute.
"""
