"""The code's shape stays readable: module and function sizes, parameter counts, and the file commands'
independence from torch (STYLE.md; each limit is one a reader feels)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "commbench"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 7
SOURCES = sorted(PACKAGE.rglob("*.py"))


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]


def _is_click_command(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """click commands take one parameter per option; their width is the command line's."""
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr in ("command", "option", "argument", "group"):
            return True
    return False


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    arguments = function.args
    names = [arg.arg for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]
    return [name for name in names if name not in ("self", "cls")]


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_no_module_is_longer_than_the_limit(path):
    assert len(path.read_text().splitlines()) <= MAX_MODULE_LINES


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_no_function_is_longer_or_wider_than_the_limits(path):
    tree = ast.parse(path.read_text())
    too_long = [f"{f.name} ({f.end_lineno - f.lineno + 1} lines)" for f in _functions(tree)
                if f.end_lineno - f.lineno + 1 > MAX_FUNCTION_LINES]
    too_wide = [f"{f.name} ({len(_parameters(f))} parameters)" for f in _functions(tree)
                if len(_parameters(f)) > MAX_PARAMETERS and not _is_click_command(f)]
    assert not too_long and not too_wide


def test_the_root_holds_at_most_twelve_modules():
    """The packages show the flow (docs/architecture.md); the root keeps the entry points and errors."""
    assert len(list(PACKAGE.glob("*.py"))) <= 12


@pytest.mark.processes
def test_the_layers_contract_holds():
    """pyproject's import-linter contracts: layers, independent features, no cycles, torch-free files."""
    lint_imports = Path(sys.executable).parent / "lint-imports"
    if not lint_imports.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    result = subprocess.run([str(lint_imports), "--no-logo", "--no-cache"], cwd=PACKAGE.parent,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:]
