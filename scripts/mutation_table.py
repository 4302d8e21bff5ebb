"""The mutation table: per module, of all its mutants, how many the fast tests killed, how many survived,
how many no fast test reached, and how many of those two tests/equivalent_mutants.yaml lists as
equivalent (no behaviour tells them from the code, for the reason it gives). A module passes when at
least 90% of all its mutants are killed and every other one is listed as equivalent.

Reads mutmut's results in mutants/ (scripts/mutation.sh runs mutmut first). An equivalent entry names
the mutant and its mutated line as mutmut wrote it; an entry whose line no longer matches (the function
changed, so mutmut renumbered its mutants) counts as not listed, and is named, so that the list stays
true. Exit status 1 when a module does not pass, 2 when mutmut has no results for one.

    python scripts/mutation_table.py [--show] [MODULE.py ...]   (default: pyproject's only_mutate)
"""

import argparse
import ast
import difflib
import json
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "tests" / "equivalent_mutants.yaml"
TARGET = 0.90  # of all mutants, killed
KILLED_CODES = {1, 3}  # a test failed, or pytest itself did (mutmut counts both as killed)
# the tests ran past mutmut's CPU-time limit (an endless loop the mutant made): caught, as a test run's
# timeout would catch it
TIMEOUT_CODES = {36, 24, -24, 152, 255}
NOT_REACHED_CODES = {33, 5}  # no fast test runs the mutated function
SURVIVED_CODE = 0


def listed_modules() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]


def _functions(path: Path) -> dict[str, list[str]]:
    """Every function of mutmut's rewritten module, by name (methods too): its source lines."""
    source = path.read_text()
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (ast.get_source_segment(source, node) or "").splitlines()
            found[node.name] = [line.strip() for line in lines[1:]]  # the body: the names differ
    return found


def mutated_line(functions: dict[str, list[str]], mutant: str) -> str:
    """The line the mutant changed, as mutmut wrote it ('' when the function is not found)."""
    name = mutant.rpartition(".")[2]
    original = functions.get(name.rpartition("__mutmut_")[0] + "__mutmut_orig")
    changed = functions.get(name)
    if original is None or changed is None:
        return ""
    added = [line[1:].strip() for line in difflib.unified_diff(original, changed, lineterm="", n=0)
             if line.startswith("+") and not line.startswith("+++")]
    return " / ".join(added) or "(a line removed)"


@dataclass
class ModuleResult:
    module: str
    killed: int = 0
    timeouts: int = 0  # of the killed, by a timeout
    survived: list[str] = field(default_factory=list)
    not_reached: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)  # not checked, suspicious, segfault: not killed
    equivalent: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # listed, but the line no longer matches

    @property
    def total(self) -> int:
        return self.killed + len(self.survived) + len(self.not_reached) + len(self.other)

    @property
    def unexplained(self) -> list[str]:
        return [name for name in self.survived + self.not_reached + self.other if name not in self.equivalent]

    @property
    def passed(self) -> bool:
        return self.total > 0 and self.killed >= TARGET * self.total and not self.unexplained


def judge(module: str, equivalents: dict[str, dict]) -> ModuleResult:
    meta = ROOT / "mutants" / (module + ".meta")
    if not meta.exists():
        print(f"mutation_table: no mutmut results for {module} (run scripts/mutation.sh {module})",
              file=sys.stderr)
        raise SystemExit(2)
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    functions = _functions(ROOT / "mutants" / module)
    result = ModuleResult(module)
    for name, code in codes.items():
        if code in KILLED_CODES | TIMEOUT_CODES:
            result.killed += 1
            result.timeouts += code in TIMEOUT_CODES
            continue
        (result.survived if code == SURVIVED_CODE else result.not_reached if code in NOT_REACHED_CODES
         else result.other).append(name)
        entry = equivalents.get(name)
        if entry is not None:
            if mutated_line(functions, name) == entry["line"]:
                result.equivalent.append(name)
            else:
                result.stale.append(name)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="module paths (default: every module mutmut mutates)")
    parser.add_argument("--show", action="store_true",
                        help="each mutant neither killed nor listed, with its line")
    args = parser.parse_args()
    equivalents = yaml.safe_load(EQUIVALENTS.read_text()) or {}
    results = [judge(module, equivalents) for module in args.modules or listed_modules()]
    print(f"{'module':42} {'mutants':>7} {'killed':>7} {'survived':>8} {'not reached':>11} "
          f"{'equivalent':>10} {'killed %':>8}  verdict")
    for each in results:
        share = 100.0 * each.killed / each.total if each.total else 0.0
        print(f"{each.module:42} {each.total:7d} {each.killed:7d} {len(each.survived):8d} "
              f"{len(each.not_reached):11d} {len(each.equivalent):10d} {share:7.1f}%  "
              f"{'PASS' if each.passed else 'FAIL'} (target: {TARGET:.0%} killed, the rest equivalent)")
        if each.timeouts:
            print(f"    of the killed, {each.timeouts} by a timeout (the mutant never finished)")
        if each.other:
            print(f"    {len(each.other)} neither killed nor survived (not checked, suspicious, segfault)")
        for name in each.stale:
            print(f"    stale entry in {EQUIVALENTS.name}: {name} no longer mutates the line it names")
        if args.show:
            functions = _functions(ROOT / "mutants" / each.module)
            for name in each.unexplained:
                kind = "survived" if name in each.survived else "not reached" if name in each.not_reached \
                    else "other"
                print(f"    {kind:11} {name}: {mutated_line(functions, name)}")
    return 0 if all(each.passed for each in results) else 1


if __name__ == "__main__":
    sys.exit(main())
