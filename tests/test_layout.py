"""The code's shape stays readable: module and function sizes, parameter counts, the modules at the root,
the public API of the packages that declare one, and the import-linter contracts (STYLE.md).

A length limit is a prompt to look, not a reason to split (STYLE.md, "Cohesion, not line counts"): one
test lists everything past a limit at once, so that whoever looks sees the whole picture, and a module
that holds one job may grow past 400 lines without being cut along no seam."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "commbench"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 7
# Packages whose __init__ is their public API: the rest of the code imports only that.
PUBLIC_API_PACKAGES = ("commbench.coordination",)
SOURCES = sorted(PACKAGE.rglob("*.py"))

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _is_click_command(function: Function) -> bool:
    """click commands take one parameter per option; their width is the command line's."""
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr in ("command", "option", "argument", "group"):
            return True
    return False


def _parameters(function: Function) -> list[str]:
    arguments = function.args
    names = [arg.arg for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]
    return [name for name in names if name not in ("self", "cls")]


def past_the_limits(name: str, source: str) -> list[str]:
    """What in one module's ``source`` is past a limit, one line each: the module's length, then each
    function's length and width (click commands aside: their width is the command line's)."""
    found = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{name}: {lines} lines (limit {MAX_MODULE_LINES})")
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, Function):
            continue
        length = function.end_lineno - function.lineno + 1
        if length > MAX_FUNCTION_LINES:
            found.append(f"{name}:{function.lineno} {function.name}: {length} lines "
                         f"(limit {MAX_FUNCTION_LINES})")
        width = len(_parameters(function))
        if width > MAX_PARAMETERS and not _is_click_command(function):
            found.append(f"{name}:{function.lineno} {function.name}: {width} parameters "
                         f"(limit {MAX_PARAMETERS})")
    return found


def test_no_module_or_function_is_past_the_limits():
    """Every module over 600 lines and every function over 60 lines or 7 parameters, listed at once."""
    found = [line for path in sorted(PACKAGE.rglob("*.py"))
             for line in past_the_limits(str(path.relative_to(PACKAGE)), path.read_text())]
    assert not found, "past the limits:\n" + "\n".join(found)


def _module(function_lines: int, parameters: int, lines: int) -> str:
    """A module of ``lines`` lines: a function of ``function_lines`` lines, one of ``parameters``
    parameters, and a click command wider than that."""
    def names(prefix: str, count: int) -> str:
        return ", ".join(f"{prefix}{index}" for index in range(count))

    text = ("def long():\n" + "    pass\n" * (function_lines - 1)
            + f"def wide({names('p', parameters)}):\n    pass\n"
            + f"@cli.command()\ndef command({names('o', MAX_PARAMETERS + 3)}):\n    pass\n")
    return text + "\n" * (lines - text.count("\n"))


def test_the_limits_name_every_long_module_long_function_and_wide_signature():
    assert past_the_limits("fits.py", _module(MAX_FUNCTION_LINES, MAX_PARAMETERS, MAX_MODULE_LINES)) == []
    assert past_the_limits("big.py", _module(MAX_FUNCTION_LINES + 1, MAX_PARAMETERS + 1,
                                             MAX_MODULE_LINES + 1)) == [
        f"big.py: {MAX_MODULE_LINES + 1} lines (limit {MAX_MODULE_LINES})",
        f"big.py:1 long: {MAX_FUNCTION_LINES + 1} lines (limit {MAX_FUNCTION_LINES})",
        f"big.py:{MAX_FUNCTION_LINES + 2} wide: {MAX_PARAMETERS + 1} parameters (limit {MAX_PARAMETERS})",
    ]


def test_the_root_holds_at_most_twelve_modules():
    """The packages show the flow (docs/architecture.md); the root keeps the entry points and errors."""
    assert len(list(PACKAGE.glob("*.py"))) <= 12


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import in a module's tree, those inside functions included."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return found


def test_packages_with_a_public_api_are_imported_only_through_it():
    """Outside such a package no module imports its submodules (the package's own modules do)."""
    reaching_in = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        imported = _imported(ast.parse(path.read_text()))
        for package in PUBLIC_API_PACKAGES:
            if module != package and not module.startswith(f"{package}."):
                reaching_in += [f"{module}:{line} imports {name}" for line, name in imported
                                if name.startswith(f"{package}.")]
    assert not reaching_in, "\n".join(reaching_in)


@pytest.mark.processes
def test_the_layers_contract_holds():
    """pyproject's import-linter contracts: layers, independent features, no cycles, torch-free files."""
    lint_imports = Path(sys.executable).parent / "lint-imports"
    if not lint_imports.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    result = subprocess.run([str(lint_imports), "--no-logo", "--no-cache"], cwd=PACKAGE.parent,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:]


# The modules that read environment variables, as docs/architecture.md lists them ("Invariants").
READS_ENVIRONMENT = {"cli/main.py", "config/launch.py", "fabric/command.py", "provenance/probing.py",
                     "running/launch.py", "running/rank.py", "running/rank_start.py", "running/spawn.py"}


def _reads_environment(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os" \
                and node.attr in ("environ", "getenv", "environb", "putenv", "unsetenv"):
            return True
    return False


def test_the_modules_that_read_the_environment_are_the_ones_the_architecture_names():
    found = {str(path.relative_to(PACKAGE)) for path in SOURCES
             if _reads_environment(ast.parse(path.read_text()))}
    assert found == READS_ENVIRONMENT
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    invariant = text[text.index("- Environment variables are read"):]
    invariant = invariant[:invariant.index("\n- ")]
    for module in READS_ENVIRONMENT:
        package, name = module.split("/")
        assert f"`{module}`" in invariant or f"`{name}`" in invariant, module


def _module_map() -> set[str]:
    """Every module docs/architecture.md's module map names: `pkg/mod.py`, or a bare `mod.py` after one of
    its package in the same row."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    table = text[text.index("## Module map"):]
    table = table[:table.index("\n## ", 1)]
    named = set()
    for line in table.splitlines():
        if not line.startswith("|"):
            continue
        package = ""
        for module, directory in re.findall(r"`([\w/]+\.py)`|`([\w/]+)/`", line):
            if directory:  # a package named whole: its modules, and the package of bare names after it
                package = directory
                named.update(str(path.relative_to(PACKAGE)) for path in (PACKAGE / directory).rglob("*.py"))
            elif "/" in module:
                package = module.rsplit("/", 1)[0]
                named.add(module)
            else:
                named.add(f"{package}/{module}" if package else module)
    return named


def test_the_module_map_names_every_module():
    modules = {str(path.relative_to(PACKAGE)) for path in SOURCES if path.name != "__init__.py"}
    assert sorted(modules - _module_map()) == []
    # outside the package (scripts/), named beside the module that serves them
    named_elsewhere = {name for name in _module_map() - modules if (PACKAGE.parent / name).exists()}
    assert sorted(name for name in _module_map() - modules - named_elsewhere
                  if not name.endswith("__init__.py")) == []
