"""What commbench prints and writes for a fixed set of commands, captured so that a refactoring can show
its output unchanged: `capture DIR` before and after, then `compare BEFORE AFTER`.

    python scripts/output_snapshot.py capture /tmp/before      # on the old code
    python scripts/output_snapshot.py capture /tmp/after       # on the new code
    python scripts/output_snapshot.py compare /tmp/before /tmp/after

The commands: every command's --help, `list`, a plain sweep, `--mode both --check`, `--format
nccl-tests` and `jsonl`, `--impl all`, a soak (`--repeat`) and `compare` of two, fabric, pattern fsdp and
pattern tp, and replay of a job recorded here (scripts/record_example.py). Each is run in a fresh
directory with COLUMNS=100 and its stdout piped, so tables are drawn as a pipe sees them.

What is kept of each: the exit status; stdout and stderr, with every number, run id, time stamp, path
and host name replaced by a placeholder and runs of spaces folded (measured values differ from run to
run and rich sizes its columns to them); the CSV's header and, per row, every text cell and which cells
are empty; the JSON's structure (keys, types, text values) with numbers as placeholders. So a change in
a label, a column, a row, a note, a key or an exit status shows; a change in a measured value does not.
Two captures of the same code can still differ where a long line wraps at a different word (the numbers
in it differ in width): read the diff rather than trusting its count alone.
"""

import argparse
import csv
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SMALL = ["--iters", "3", "--warmup", "1", "--nproc", "2", "--timeout", "120"]
# (name, arguments after `commbench`, files the command writes, relative to its directory)
COMMANDS: list[tuple[str, list[str], list[str]]] = [
    *[(f"help-{name or 'main'}", [*([name] if name else []), "--help"], [])
      for name in ("", "run", "sweep", "compare", "plot", "report", "env", "list", "replay", "fabric",
                   "pattern", "pattern fsdp", "pattern tp", "pattern moe", "pattern pp", "pattern 3d")],
    ("list", ["list"], []),
    ("sweep", ["--collective", "all_reduce,reduce_scatter_base", "--sizes", "1K:64K", *SMALL,
               "--csv", "out.csv", "--json", "out.json"], ["out.csv", "out.json"]),
    ("both-check", ["--collective", "all_gather_base,all_reduce", "--mode", "both", "--check",
                    "--sizes", "1K:16K", *SMALL, "--csv", "out.csv", "--json", "out.json"],
     ["out.csv", "out.json"]),
    ("nccl-tests", ["--collective", "all_reduce", "--sizes", "1K:8K", "--format", "nccl-tests", *SMALL,
                    "--json", "out.json"], ["out.json"]),
    ("jsonl", ["--collective", "broadcast", "--sizes", "1K:8K", "--format", "jsonl", *SMALL,
               "--json", "out.json"], []),
    ("impl-all", ["--collective", "all_reduce,all_gather_base,reduce_scatter_base", "--sizes", "1K:16K",
                  "--impl", "all", *SMALL, "--csv", "out.csv", "--json", "out.json"],
     ["out.csv", "out.json"]),
    ("repeat-a", ["--collective", "all_reduce", "--sizes", "1K:4K", "--repeat", "3", *SMALL,
                  "--json", "../a.json"], ["../a.json"]),
    ("repeat-b", ["--collective", "all_reduce", "--sizes", "1K:4K", "--repeat", "3", *SMALL,
                  "--json", "../b.json"], []),
    ("compare", ["compare", "../a.json", "../b.json"], []),
    ("compare-gate", ["compare", "../a.json", "../b.json", "--fail-above", "1000"], []),
    ("fabric", ["fabric", "--size", "64K", "--iters", "2", "--warmup", "1", "--nproc", "2",
                "--json", "out.json", "--csv", "out.csv"], ["out.csv", "out.json"]),
    ("fsdp", ["pattern", "fsdp", "--model", "tiny", "--iters", "1", "--nproc", "2",
              "--json", "out.json", "--csv", "out.csv"], ["out.csv", "out.json"]),
    ("tp", ["pattern", "tp", "--model", "tiny", "--iters", "1", "--nproc", "2", "--json", "out.json"],
     ["out.json"]),
    ("replay", ["replay", "../recorded/ddp", "--select", "last:1", "--iters", "2", "--json", "out.json",
                "--csv", "out.csv"], ["out.csv", "out.json"]),
]

# a number not inside a word (float32, p50, eth0 and c10d stay as they are; 64K and 3x are masked)
NUMBER = re.compile(r"(?<![A-Za-z_\d.])[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
# lines that come and go with the measurement itself, not with the code (a straggler named or not, a
# soak's spikes and drift), dropped; a fit's line, with or without a slope or a warning, kept as a fit
VARIABLE_LINES = re.compile(r"^(straggler: |note: spikes?: |note: drift: )")
# a fit, or an explanation (whose reasons follow the load of the machine), kept as such
FIT_LINE = re.compile(r"^(?:# )?(?:\w+ )?(α-β fit|note: explain): ")
TEMP_PATH = re.compile(r"/tmp/[^\s\"',)]*")
# JSON keys whose text is a judgement of the measured values (a fit's reliability, explain's reasons)
VARIABLE_KEYS = {"reliability", "reasons", "regime"}
BOX_RUNS = re.compile(r"([━─═]){2,}")
# which way two runs of the same code differ, and whether compare finds that significant, is noise
DIRECTION = re.compile(r"\b(faster|slower)\b")
SIGNIFICANT = re.compile(r"\b(yes|no) \(q=")
RUN_ID = re.compile(r"\b\d{8}-\d{6}[-\w]*")
ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[+-]\d{2}:?\d{2}|Z)?")
# CSV columns whose numbers follow from the command line, not from a measurement
EXACT_COLUMNS = {"size", "size_bytes", "bytes", "world_size", "nproc", "root", "repeat", "elements",
                 "count", "group_size", "ranks", "src", "dst", "peer", "rank"}


def mask_text(text: str, places: dict[str, str], exact: bool = False) -> str:
    """``text`` with this machine's places named; unless ``exact``, measured values masked too."""
    for place, name in places.items():
        text = text.replace(place, name)
    if exact:
        return text
    text = TEMP_PATH.sub("<TMP>", ISO_TIME.sub("<TIME>", RUN_ID.sub("<RUN>", text)))
    lines: list[str] = []
    body: list[str] = []  # a table's body rows, in sorted order (compare orders them by the measured change)
    for line in text.splitlines():
        line = BOX_RUNS.sub(r"\1", NUMBER.sub("N", line))
        line = " ".join(SIGNIFICANT.sub("<yes|no> (q=", DIRECTION.sub("<faster|slower>", line)).split())
        if line.startswith("│"):
            body.append(line)
            continue
        lines.extend(sorted(body))
        body = []
        if VARIABLE_LINES.match(line):
            continue
        fit = FIT_LINE.match(line)
        lines.append(f"{fit.group(1)}: ..." if fit else line)
    lines.extend(sorted(body))
    return "\n".join(lines).strip() + "\n"


def mask_json(value: object, places: dict[str, str]) -> object:
    if isinstance(value, dict):
        return {key: "<judged>" if key in VARIABLE_KEYS else mask_json(item, places)
                for key, item in sorted(value.items())}
    if isinstance(value, list):
        masked = [mask_json(item, places) for item in value]
        return masked
    if isinstance(value, bool):
        return value
    if value is None or isinstance(value, int | float):  # a measured value, or none where none was found
        return "<value>"
    return mask_text(str(value), places).strip()


def mask_csv(path: Path, places: dict[str, str]) -> str:
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    if not rows:
        return ""
    header, lines = rows[0], [",".join(rows[0])]
    for row in rows[1:]:
        cells = []
        for column, cell in zip(header, row, strict=False):
            if column in EXACT_COLUMNS or not NUMBER.fullmatch(cell.strip() or "x"):
                cells.append(mask_text(cell, places).strip() if column not in EXACT_COLUMNS else cell)
            else:
                cells.append("N")
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n"


def record_replay_input(workdir: Path) -> None:
    """A real recording of a small job (scripts/record_example.py under torchrun), replayed below."""
    script = Path(__file__).resolve().parent / "record_example.py"
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                    str(script), str(workdir / "recorded")], check=True, capture_output=True, timeout=600,
                   cwd=workdir)


def capture(target: Path, only: set[str]) -> int:
    target.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="commbench-snapshot-"))
    env = {**os.environ, "COLUMNS": "100", "PYTHONHASHSEED": "0"}
    places = {str(workdir): "<DIR>", os.uname().nodename: "<HOST>"}
    try:
        if not only or "replay" in only:
            record_replay_input(workdir)
        for name, arguments, files in COMMANDS:
            if only and name not in only:
                continue
            rundir = workdir / name
            rundir.mkdir()
            args = [part for argument in arguments for part in
                    (argument.split() if argument.startswith("pattern ") else [argument])]
            result = subprocess.run([sys.executable, "-m", "commbench", *args], cwd=rundir, env=env,
                                    capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
            exact = name.startswith("help-")
            parts = [f"$ commbench {' '.join(args)}", f"exit {result.returncode}",
                     "--- stdout", mask_text(result.stdout, places, exact), "--- stderr",
                     mask_text(result.stderr, places, exact)]
            for file in files:
                path = rundir / file
                parts.append(f"--- {file}")
                if not path.exists():
                    parts.append("(missing)\n")
                elif file.endswith(".csv"):
                    parts.append(mask_csv(path, places))
                else:
                    parts.append(json.dumps(mask_json(json.loads(path.read_text()), places), indent=1) + "\n")
            (target / f"{name.replace(' ', '-')}.txt").write_text("\n".join(parts))
            print(f"{name}: exit {result.returncode}", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def compare(before: Path, after: Path) -> int:
    names = sorted({path.name for path in (*before.glob("*.txt"), *after.glob("*.txt"))})
    differing = 0
    for name in names:
        old, new = before / name, after / name
        if not old.exists() or not new.exists():
            print(f"{name}: only in {'after' if not old.exists() else 'before'}")
            differing += 1
            continue
        diff = list(difflib.unified_diff(old.read_text().splitlines(), new.read_text().splitlines(),
                                         f"before/{name}", f"after/{name}", lineterm="", n=1))
        if diff:
            differing += 1
            print("\n".join(diff))
    print(f"{len(names) - differing} of {len(names)} outputs unchanged")
    return 1 if differing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    take = commands.add_parser("capture", help="run the commands, write their masked output to DIR")
    take.add_argument("dir", type=Path)
    take.add_argument("--only", default="", help="comma list of command names (default: all)")
    check = commands.add_parser("compare", help="diff two captures; exit 1 when any output differs")
    check.add_argument("before", type=Path)
    check.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "capture":
        return capture(args.dir, {name for name in args.only.split(",") if name})
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
