"""The FSDP pattern's memory estimate (commbench/patterns/estimate.py) against the peak a rank reaches.

Each configuration runs as the real CLI on 2 local gloo ranks (`commbench pattern fsdp ... --iters 1`);
its peak is the largest rank's resident memory (getrusage of the waited-for children, measured in a
fresh wrapper process per run), less a baseline: the same command on the tiny model (torch, gloo and
the run's machinery, no model to speak of). Printed side by side per configuration: the estimate, the
measured peak above the baseline, and their ratio.

Target: measured / estimate between 0.6 and 1.05 for every configuration: the estimate is meant as an
upper bound a run is refused by, and one far above what a run takes would refuse runs that fit. Each
row ends PASS or FAIL against it; exit status 1 when a row fails.

    python scripts/fsdp_memory_estimate.py [--model gpt2-small] [--layers N] [--configs fsdp2,...]
"""

import argparse
import os
import subprocess
import sys
from dataclasses import replace

from commbench.core.devices import approximate_bytes
from commbench.patterns.config import FsdpConfig
from commbench.patterns.estimate import fsdp_memory

RANKS = 2
TARGET = (0.6, 1.05)  # measured / estimate
CONFIGS = {
    "fsdp2": [],
    "fsdp2 --check": ["--check"],
    "fsdp1 bf16/fp32 --check": ["--fsdp-version", "1", "--param-dtype", "bfloat16", "--reduce-dtype",
                                "float32", "--check"],
    "fsdp2 --bucket-mb 25 --overlap": ["--bucket-mb", "25", "--overlap", "--compute-size", "64"],
}
WRAPPER = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:], capture_output=True, "
           "text=True); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, "
           "done.returncode, repr(done.stderr[-300:]))")


def peak_bytes(args: list[str], output_dir: str) -> int:
    command = [sys.executable, "-m", "commbench", "pattern", "fsdp", *args, "--iters", "1", "--nproc",
               str(RANKS), "--max-memory", "1T", "--quiet", "--output-dir", output_dir]
    # Ranks started as fresh interpreters, the wrapper's waited-for grandchildren: a forked rank's
    # parent is the launcher's fork server, which nobody waits for, so getrusage would not see it.
    env = {**os.environ, "COMMBENCH_RANK_START": "exec"}
    found = subprocess.run([sys.executable, "-c", WRAPPER, *command], capture_output=True, text=True,
                           check=True, env=env).stdout.split(maxsplit=2)
    if found[1] != "0":
        raise SystemExit(f"{' '.join(args)} failed (exit {found[1]}): {found[2]}")
    return int(found[0])


def config_of(model: str, layers: int | None, args: list[str]) -> FsdpConfig:
    """The FsdpConfig the CLI makes of these options (the few this script uses)."""
    values = dict(zip(args[::2], args[1::2], strict=False))
    config = FsdpConfig(model=model, layers=layers, check="--check" in args, overlap="--overlap" in args,
                        fsdp_version=int(values.get("--fsdp-version", 2)),
                        buckets=[values.get("--bucket-mb", "unit")])
    return replace(config, param_dtype=values.get("--param-dtype"), reduce_dtype=values.get("--reduce-dtype"))


def judge(measured: int, estimate: int) -> str:
    low, high = TARGET
    return "PASS" if low <= round(measured / estimate, 2) <= high else "FAIL"  # judged as printed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2-small")
    parser.add_argument("--layers", type=int, default=None, help="cut the model to its first N layers")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="which configurations, comma list")
    parser.add_argument("--output-dir", default="/tmp/commbench-fsdp-memory")
    options = parser.parse_args()
    model = ["--model", options.model] + ([] if options.layers is None else ["--layers", str(options.layers)])
    baseline = peak_bytes(["--model", "tiny"], options.output_dir)
    print(f"baseline (tiny model): {approximate_bytes(baseline)} per rank")
    print(f"{'configuration':34} {'estimate':>10} {'measured':>10} {'measured/estimate':>18}  "
          f"target {TARGET[0]:g} to {TARGET[1]:g}")
    verdicts = []
    for name in options.configs.split(","):
        args = CONFIGS[name]
        estimate = fsdp_memory(config_of(options.model, options.layers, args), RANKS, "cpu").total
        measured = peak_bytes([*model, *args], options.output_dir) - baseline
        verdicts.append(judge(measured, estimate))
        print(f"{name:34} {approximate_bytes(estimate):>10} {approximate_bytes(measured):>10} "
              f"{measured / estimate:>18.2f}  {verdicts[-1]}")
    return 1 if "FAIL" in verdicts else 0


if __name__ == "__main__":
    sys.exit(main())
