"""Running a benchmark: who launched us (launcher.py), spawning local ranks (spawn.py) or starting one
rank (rank.py: devices, backend, groups, recording), the sweep (runner.py), soaks, provenance's calls in
launch's order, and `commbench list`'s probes. The features register here (features.py) and run
through its Session."""
