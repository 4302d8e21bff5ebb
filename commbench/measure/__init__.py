"""The measurement core: the collectives' registry (one descriptor per collective), planning sizes and
buffers, issuing ops through a Backend and timing them (sync, async, CUDA events and graphs), adaptive
sample counts, statistics, and --check's known inputs and comparison. Only the running layer and the
features call into it; it knows nothing of rows, files or the console."""
