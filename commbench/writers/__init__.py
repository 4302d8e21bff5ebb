"""Where rows go as they are measured: the Output protocol producers write to, the result files (CSV and
JSON, written as rows arrive) and the console formats (rich tables, nccl-tests' columns, JSON lines)."""
