"""`commbench diagnose`: why a job hung or failed, from every rank's Flight Recorder dump.

reading.py turns one dump into a compact summary (numpy columns, interned signatures and stacks);
loading.py reads many, in worker processes when they are many, and merges them into a Job; tracks.py
lays out each member's collectives per group; engine.py, pure and torch-free, finds per process group
where progress stopped and why (verdict.py's classes); render.py prints the verdict first, one screen;
command.py is the command and the verdict a failed commbench run's error line carries.
"""
