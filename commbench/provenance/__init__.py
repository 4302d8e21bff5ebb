"""Provenance: what every result ran on, what NCCL chose, and how far it is from the peak.

hardware.py, gpus.py, pci.py, cpu_probes.py and system.py probe a host; gather.py exchanges the records
between hosts; nccl_debug.py and nccl_log.py run and read NCCL's own log; baselines.py, peaks.py and
verdicts.py turn the hardware and configs/baselines.yaml into each row's peak, expected busbw and
verdict; run.py calls them in launch's order; describe.py and html.py present the records; explain/
turns them into each row's bounds and reasons (docs/explain.md). docs/provenance.md defines the numbers.
Importing this package imports nothing heavy: each module imports what it needs.
"""
