"""explain: is this number right? From what a run recorded (each host's hardware, rank 0's NCCL_*
environment, what NCCL chose per row, the rows and their α-β fits), the busbw each algorithm can reach
on this hardware, the best of them, the physical peak behind each, the size regime, and the reasons a
row falls short, ranked by what each is estimated to cost (docs/explain.md).

nccl_env.py reads the NCCL variables that change NCCL's choice; hosts.py turns hardware records into the
links a run's groups use; bounds.py is the bound model (each figure with its formula and sources);
rules.py the reason rules, each a small function with its evidence; engine.py puts them together per
series and row; text.py writes the sentences, the console line and the report's section.

Invariants: pure functions of saved data (no torch, no probing, no files), so a run explained as it
ends and one explained from its results.json years later read the same; nothing is guessed: a bound
that the records cannot support is absent and says why.
"""
