"""`commbench diagnose`: why a job hung or failed, from every rank's Flight Recorder dump.

reading.py turns one dump into a compact summary (numpy columns, interned signatures and stacks);
loading.py reads many, in parallel when they are many; engine.py, pure and torch-free, finds per process
group where progress stopped and why (verdict.py's classes); render.py prints the verdict first, one
screen; command.py is the command and the line a failed commbench run appends.
"""
