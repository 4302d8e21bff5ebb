"""A full fabric pass's results.json, written and read back by two versions of commbench side by side.

    python scripts/bench_results_file.py --before /tmp/main-checkout          # 1,024 ranks: minutes
    python scripts/bench_results_file.py --before /tmp/main-checkout --world 64

For each tree (``--before``, a checkout of an older commbench, then this one), in fresh processes:
scripts/bench_scale.py's "fabric pass full" step (a whole full fabric pass on rank 0 on the fake group,
its rows synthetic, the files written as commbench fabric writes them), then that tree's reader on the
results.json it wrote, twice: ``load_run`` (the rows, checked) and ``commbench.load`` (the DataFrame).
Printed per tree: results.json's bytes and per row, the pass's seconds; per reading: wall and CPU
seconds, the peak resident memory above the process's before it (VmHWM), the rows read, or the one line
the reader refused the file with. Each reading runs under an address-space limit (--memory-limit), so
that a reader that would take the shared machine's memory fails alone. Then the ratio of the files'
bytes, and the load average before and after: absolute times on a shared machine are noisy.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PASS_STEP = "fabric pass full"

# Run in a fresh process with the tree's code first on sys.path: read one file, print what it cost.
READER = r"""
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import commbench  # noqa: E402
from commbench.errors import UsageError  # noqa: E402
from commbench.results.saved import load_run  # noqa: E402
import pandas  # noqa: E402, F401 - imported before anything is measured

def status_kib(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0

how, path = sys.argv[2], sys.argv[3]
Path("/proc/self/clear_refs").write_text("5")
before = status_kib("VmRSS")
started, cpu = time.perf_counter(), time.process_time()
try:
    rows = len(load_run(path).rows) if how == "load_run" else len(commbench.load(path))
    outcome = {"rows": rows}
except UsageError as error:
    outcome = {"refused": str(error)}
except MemoryError:
    outcome = {"refused": "MemoryError (over --memory-limit)"}
outcome.update(seconds=time.perf_counter() - started, cpu_s=time.process_time() - cpu,
               peak_mib=max(0, status_kib("VmHWM") - before) / 1024)
print(json.dumps(outcome))
"""


def load_line() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def write_pass(tree: Path, world: int, workdir: Path, timeout: float) -> dict:
    """bench_scale's full-pass step run by ``tree``'s own script and code."""
    workdir.mkdir(parents=True, exist_ok=True)
    result = workdir / "result.json"
    command = [sys.executable, str(tree / "scripts" / "bench_scale.py"), "--worker", PASS_STEP,
               "--world", str(world), "--workdir", str(workdir), "--result", str(result)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          cwd=tree)
    if done.returncode != 0 or not result.exists():
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    found = json.loads(result.read_text())
    return {**found, "wall_s": time.perf_counter() - started, "json": str(workdir / "pass.json")}


def read_back(tree: Path, how: str, path: str, memory_limit: int, timeout: float) -> dict:
    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))

    done = subprocess.run([sys.executable, "-c", READER, str(tree), how, path], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL, preexec_fn=limited)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"refused": f"the reader failed (exit {done.returncode}): {last}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def describe(result: dict) -> str:
    if "error" in result:
        return f"not measured: {result['error']}"
    size, csv_size = result["json_bytes"], result["csv_bytes"]
    return (f"{result['rows']:,} rows; results.json {size:,} B ({size / 2**20:,.0f} MiB, "
            f"{size / result['rows']:.0f} B a row), results.csv {csv_size / 2**20:,.0f} MiB; the pass "
            f"{result['seconds']:.0f} s, {result['peak_mib']:.0f} MiB peak on rank 0")


def describe_reading(reading: dict) -> str:
    cost = f"{reading['seconds']:.1f} s ({reading['cpu_s']:.1f} CPU s), {reading['peak_mib']:,.0f} MiB peak" \
        if "seconds" in reading else ""
    if "refused" in reading:
        return f"refused: {reading['refused']}" + (f"  [{cost}]" if cost else "")
    return f"{reading['rows']:,} rows in {cost}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="a checkout of the commbench to compare with (its scripts and code)")
    parser.add_argument("--world", type=int, default=1024)
    parser.add_argument("--memory-limit", type=float, default=12.0, help="GiB of address space per reading")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per pass and per reading")
    parser.add_argument("--workdir", help="where the files go (default: a temporary directory, removed)")
    args = parser.parse_args()
    trees = ([("before", Path(args.before).resolve())] if args.before else []) + [("after", ROOT)]
    limit = int(args.memory_limit * 2**30)
    print(f"load average before: {load_line()}; {args.world} ranks, a full fabric pass", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-results-file-") as temporary:
        base = Path(args.workdir) if args.workdir else Path(temporary)
        written: dict[str, dict] = {}
        cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
        for name, tree in trees:
            written[name] = write_pass(tree, args.world, base / name, args.timeout)
            print(f"\n{name} ({tree}): {describe(written[name])}", flush=True)
            if "error" in written[name]:
                continue
            for how in ("load_run", "commbench.load"):
                reading = read_back(tree, how, written[name]["json"], limit, args.timeout)
                print(f"  {how}: {describe_reading(reading)}", flush=True)
            Path(written[name]["json"]).unlink()  # a GiB each: one at a time on the disk
            Path(written[name]["json"]).with_suffix(".csv").unlink(missing_ok=True)
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
    if all("json_bytes" in found for found in written.values()) and len(written) == 2:
        before, after = written["before"]["json_bytes"], written["after"]["json_bytes"]
        print(f"\nresults.json after / before: {after / before:.3f} ({after / 2**20:,.0f} MiB against "
              f"{before / 2**20:,.0f} MiB; the cap on a results file is 1,024 MiB)")
    cpu_s = used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime
    print(f"CPU seconds of all the processes: {cpu_s:.0f}; load average after: {load_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
