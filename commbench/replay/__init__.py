"""`commbench replay`: a job's communication as PyTorch recorded it, replayed and timed on this world.

Data flows one way: files (loading: safe pickle, Flight Recorder, profiler traces) -> a Trace of recorded
operations per rank (model) -> a window (window) -> cross-rank checks (validate) -> each rank's
operations on this world's groups (mapping) -> passes through the Backend (execute) -> rows (rows) and
a console summary (summary). config.py holds the configuration and its checks, command.py registers the
feature, run.py is what each rank runs.
"""
