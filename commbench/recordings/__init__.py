"""Recordings other programs wrote: torch's Flight Recorder dumps and torch.profiler traces, read safely.

Shared by the features that read them (replay, diagnose). Imports nothing above core and errors, and
never torch: reading a dump needs no accelerator and no process group.
"""
