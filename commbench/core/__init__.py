"""The vocabulary every layer speaks: message sizes and durations, dtypes, --splits, sub-communicator
plans, the rules for devices and local ranks, and where the shipped configs live. Pure functions of
their inputs; nothing here imports torch at import time or starts a process."""
