"""compare, plot, report, explain, iterations, the α-β fit and commbench.load work on saved files without
importing torch, as functions and as commands."""

import subprocess
import sys

import pytest

from tests.dist_helpers import ROOT, launcherless_env

READING_MODULES = ("commbench.analysis.compare", "commbench.analysis.gate", "commbench.analysis.plot",
                   "commbench.analysis.report", "commbench.analysis.explain", "commbench.analysis.iterations",
                   "commbench.results.fit", "commbench.results.frame")


def _python(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=launcherless_env(),
                            cwd=ROOT, timeout=180, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def _imported(stderr: str) -> set[str]:
    """Module names from `python -X importtime` output ('import time: self | cumulative | name')."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def _torch(modules: set[str]) -> list[str]:
    return sorted(name for name in modules if name.split(".")[0] == "torch")


@pytest.mark.processes
def test_the_reading_modules_import_without_torch():
    imported = _imported(_python("-X", "importtime", "-c", f"import {', '.join(READING_MODULES)}").stderr)
    assert set(READING_MODULES) <= imported and "pandas" in imported  # the parse sees what was imported
    assert _torch(imported) == []


def test_compare_plot_report_and_fits_of_real_runs_leave_torch_unimported(two_runs, tmp_path):
    a, b = (str(saved.json) for saved in two_runs)
    program = f"""
import sys
from commbench.analysis.gate import compare_command
from commbench.results.fit import fit_rows
from commbench.analysis.plot import plot_command
from commbench.analysis.report import report_command
from commbench.analysis.explain import explain_command
from commbench.results.saved import load_run
import commbench

compare_command([{a!r}, {b!r}], 3900.0, 0.05, False)
plot_command([{a!r}, {b!r}], {str(tmp_path / "p.png")!r}, None)
report_command([{a!r}, {b!r}], {str(tmp_path / "r.html")!r})
explain_command({a!r}, None, None)
assert fit_rows(load_run({a!r}).rows) and len(commbench.load([{a!r}, {b!r}])) == 36
print("torch imported:", sorted(name for name in sys.modules if name.split(".")[0] == "torch"))
"""
    assert _python("-c", program).stdout.strip().endswith("torch imported: []")
    assert (tmp_path / "p.png").is_file() and (tmp_path / "r.html").is_file()
    # The command too (report and plot run the same functions as above behind the same CLI module).
    command = _python("-X", "importtime", "-m", "commbench", "compare", a, b)
    imported = _imported(command.stderr)
    assert "commbench.cli" in imported and _torch(imported) == []
