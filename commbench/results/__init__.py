"""Results as data: the Row and run metadata model, the one row builder (make_row), reading saved runs
back as untrusted input, pandas frames (commbench.load), the α-β fit, what a run's passes say, and the
registry of result kinds the features fill. Importing it imports no torch."""
