"""The docs hold together: the README stays a short first read, every relative link and #anchor in the
README and docs/ resolves, every page of docs/ is reachable from the README, the commands and options
the docs show exist in commbench's command line, and every figure measured on a machine names the
script that measured it or says that none did (the convention of docs/performance.md, "Where the
figures come from").

Pure: reads Markdown files and click's command tree; starts no process.
"""

import re
from pathlib import Path

import click
import pytest

from commbench.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
README_MAX_LINES = 200

FENCED_BLOCK = re.compile(r"^(`{3,}).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
# `commbench` as a command word (not commbench/..., commbench.load or commbench's), then what follows it
COMMAND = re.compile(r"(?:^|(?<=[\s;&|(]))commbench(?=\s|$)([^\n]*)")
WORD = re.compile(r"[a-z0-9][a-z0-9_-]*")  # a command word: run, pattern, 3d, ...
LONG_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
ALWAYS_VALID = {"--help", "--version"}  # click's, on every command
SCHEMES = ("http://", "https://", "mailto:")
# A paragraph that says where a figure was measured: the machine's load, the project's 2-core VM, ...
MEASURED_HERE = re.compile(r"load\s+average[^.;:`]{0,12}\d|2-core\s+(?:shared\s+)?(?:VM|machine|development)|"
                           r"shared\s+VM|two\s+(?:shared\s+|busy\s+)?cores|idle\s+machine", re.IGNORECASE)
SCRIPT = re.compile(r"scripts/([\w.-]+\.(?:py|sh))")
SCRIPT_COMMAND = re.compile(r"scripts/([\w.-]+\.(?:py|sh))([^`\n]*)")
NO_SCRIPT = re.compile(r"\bno\s+script\b")  # a figure no script produces says so


def without_code(markdown: str) -> str:
    """The prose of a page: fenced blocks removed (a link or heading inside code is neither)."""
    return FENCED_BLOCK.sub("", markdown)


def code_fragments(markdown: str) -> list[str]:
    """Fenced blocks (shell comments dropped, backslash continuations joined) and inline code spans."""
    fragments = []
    for match in FENCED_BLOCK.finditer(markdown):
        body = match.group(0).split("\n", 1)[1].rsplit("\n", 1)[0].replace("\\\n", " ")
        fragments.extend(re.sub(r"(?:^|\s)#.*$", "", line) for line in body.splitlines())
    fragments.extend(INLINE_CODE.findall(without_code(markdown)))
    return fragments


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text without markup, lower case, only letters, digits,
    spaces, hyphens and underscores kept, spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    text = "".join(char for char in text.strip().lower() if char.isalnum() or char in " -_")
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading's anchor; a repeated slug gets -1, -2, ... as on GitHub."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in HEADING.findall(without_code(markdown)):
        slug = github_slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(markdown: str) -> list[str]:
    return [target for target in LINK.findall(without_code(markdown)) if not target.startswith(SCHEMES)]


def link_problems(page: Path) -> list[str]:
    """Each relative link of ``page`` whose file or #anchor does not exist."""
    problems = []
    for target in relative_links(page.read_text()):
        path_text, _, anchor = target.partition("#")
        linked = (page.parent / path_text).resolve() if path_text else page
        if not linked.exists():
            problems.append(f"{page.name}: {target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text()):
            problems.append(f"{page.name}: {target}: no heading #{anchor} in {linked.name}")
    return problems


def resolve_command(words: list[str], root: click.Group) -> tuple[click.Command | None, str]:
    """The command ``commbench WORDS...`` runs (a word that is no command name is an argument of the
    command before it) and what is wrong, if anything. No word runs the default command."""
    command: click.Command = root
    if not words:
        return root.commands[root.default_command], ""  # type: ignore[attr-defined]
    for word in words:
        if not isinstance(command, click.Group):
            break
        if word not in command.commands:
            if command is root:
                return None, f"commbench {word}: no such command"
            break
        command = command.commands[word]
    return command, ""


def option_names(command: click.Command) -> set[str]:
    return {opt for param in command.params if isinstance(param, click.Option)
            for opt in (*param.opts, *param.secondary_opts) if opt.startswith("--")}


def command_problems(fragment: str, root: click.Group) -> list[str]:
    """Each `commbench ...` in a code fragment whose command or long options do not exist."""
    problems = []
    for match in COMMAND.finditer(fragment):
        rest = re.split(r"&&|\|\||[|;]", match.group(1))[0]
        words = []
        for token in rest.split():
            if not WORD.fullmatch(token):
                break
            words.append(token)
        command, problem = resolve_command(words, root)
        if command is None:
            problems.append(problem)
            continue
        known = option_names(command) | ALWAYS_VALID
        problems.extend(f"commbench {' '.join(words)}: no option {option}"
                        for option in LONG_OPTION.findall(rest) if option not in known)
    return problems


def every_option(command: click.Command) -> set[str]:
    found = option_names(command)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            found |= every_option(sub)
    return found


def blocks(markdown: str) -> list[tuple[str, str]]:
    """A page's blocks in order, each ("prose", text), ("shown", a table or a fenced block) or
    ("heading", text); blocks are separated by blank lines."""
    found = []
    text = FENCED_BLOCK.sub("```fenced```", markdown)
    for block in re.split(r"\n[ \t]*\n", text):
        lines = [line for line in block.splitlines() if line.strip()]
        prose = [line for line in lines if not line.lstrip().startswith(("|", "#", "```fenced```"))]
        if prose:
            found.append(("prose", "\n".join(prose)))
        elif lines:
            found.append(("heading" if lines[0].startswith("#") else "shown", "\n".join(lines)))
    return found


def paragraphs(markdown: str) -> list[str]:
    """A page's prose paragraphs: fenced blocks, tables and headings left out."""
    return [text for kind, text in blocks(markdown) if kind == "prose"]


def unsourced_figures(markdown: str) -> list[str]:
    """Each paragraph that says where a figure was measured (outside inline code: a quoted output is not
    the docs' own claim) but names no script and does not say there is none, nor does the paragraph
    that introduces the table or output it follows."""
    problems = []
    introducer, shown_since = "", False
    for kind, text in blocks(markdown):
        if kind == "heading":
            introducer, shown_since = "", False
            continue
        if kind == "shown":
            shown_since = True
            continue
        prose = INLINE_CODE.sub(lambda match: "" if MEASURED_HERE.search(match.group(1)) else match.group(0),
                                text)
        sources = [text, introducer] if shown_since else [text]
        sourced = any(SCRIPT.search(each) or NO_SCRIPT.search(each) for each in sources)
        if MEASURED_HERE.search(prose) and not sourced:
            problems.append(" ".join(text.split())[:100])
        if not shown_since:
            introducer = text
        shown_since = False
    return problems


def script_problems(markdown: str, root: Path) -> list[str]:
    """Each `scripts/NAME` that does not exist, and each option shown after it that its source lacks."""
    problems = []
    for fragment in [*code_fragments(markdown), *paragraphs(markdown)]:
        for name, rest in SCRIPT_COMMAND.findall(fragment):
            script = root / "scripts" / name
            if not script.exists():
                problems.append(f"scripts/{name}: no such script")
                continue
            source = script.read_text()
            problems.extend(f"scripts/{name}: no option {option}" for option in LONG_OPTION.findall(rest)
                            if f'"{option}"' not in source and option not in ALWAYS_VALID)
    return list(dict.fromkeys(problems))  # an inline command is both a fragment and part of a paragraph


# --- the checks on the helpers themselves: a broken doc must be caught ---------------------------

def test_github_slugs_follow_githubs_rules():
    assert github_slug("Checking results (`--check`)") == "checking-results---check"
    assert github_slug("Uneven (v) collectives") == "uneven-v-collectives"
    assert github_slug("The α-β fit") == "the-α-β-fit"
    assert github_slug("Backend support: `commbench list`") == "backend-support-commbench-list"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_a_missing_file_or_heading_is_reported(tmp_path):
    (tmp_path / "other.md").write_text("# Real heading\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#real-heading) [file](missing.md) [anchor](other.md#nope) "
                    "[self](#gone) [web](https://example.com/x.md)\n```\n[in code](nowhere.md)\n```\n")
    assert link_problems(page) == ["page.md: missing.md: no such file",
                                   "page.md: other.md#nope: no heading #nope in other.md",
                                   "page.md: #gone: no heading #gone in page.md"]


def test_a_figure_measured_here_without_its_script_is_reported():
    page = ("Measured on the 2-core VM (load average 7): 29 s.\n\n"
            "`python scripts/bench_spawn.py --nproc 2` on this machine (load average 4.4, shared):\n\n"
            "| ranks | wall |\n|---|---|\n| 2 | 13.3 s |\n\n"
            "Both ways on an idle machine took 3 s, as the table's script measured.\n\n"
            "Again on an idle machine: 2.9 s, where no table came between.\n\n"
            "By hand (no script) at load average 3: 24 s.\n\n"
            "A note `explain: load average 9.62` the run printed is output, not a claim.\n")
    assert [problem[:20] for problem in unsourced_figures(page)] == ["Measured on the 2-co",
                                                                      "Again on an idle mac"]


def test_a_missing_script_or_an_option_it_lacks_is_reported():
    page = ("`python scripts/bench_spawn.py --nproc 2 --rounds 1` and `python scripts/bench_spawn.py "
            "--ranks 2`\n\n```\nbash scripts/no_such.sh\n```\n")
    assert script_problems(page, ROOT) == ["scripts/no_such.sh: no such script",
                                           "scripts/bench_spawn.py: no option --ranks"]


def test_unknown_commands_and_options_are_reported():
    assert command_problems("commbench sweep smoke --iters 5", cli) == []
    assert command_problems("torchrun --nnodes 2 -m commbench pattern fsdp --model tiny", cli) == []
    assert command_problems("commbench --collective all --sizes 1K:1M", cli) == []
    assert command_problems("commbench swep smoke", cli) == ["commbench swep: no such command"]
    assert command_problems("commbench compare a.json b.json --fail-abve 5", cli) == [
        "commbench compare: no option --fail-abve"]
    assert command_problems("import commbench.cli; commbench/cli.py", cli) == []
    fragments = code_fragments("```bash\n# commbench frobnicate\ncommbench list \\\n    --nproc 2\n```\n")
    assert fragments == ["", "commbench list      --nproc 2"]


# --- the docs ----------------------------------------------------------------------------------

def test_the_readme_is_a_short_first_read():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    assert link_problems(page) == []


def test_the_readme_and_the_docs_index_link_every_docs_page():
    pages = {page.name for page in DOCS.glob("*.md")} - {"README.md"}
    from_readme = {Path(target.partition("#")[0]).name for target in relative_links(README.read_text())
                   if target.startswith("docs/")}
    from_index = {target.partition("#")[0] for target in relative_links((DOCS / "README.md").read_text())}
    assert pages - from_readme == set()
    assert pages - from_index == set()


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_command_and_option_shown_exists(page):
    problems = [problem for fragment in code_fragments(page.read_text())
                for problem in command_problems(fragment, cli)]
    assert problems == []


def test_every_option_is_explained_somewhere_in_the_docs():
    text = "\n".join(page.read_text() for page in PAGES)
    mentioned = set(LONG_OPTION.findall(text))
    assert every_option(cli) - ALWAYS_VALID - mentioned == set()


def test_the_readme_names_every_shipped_model_preset():
    from commbench.patterns.models import preset_names

    readme = README.read_text()
    assert [name for name in preset_names() if f"`{name}`" not in readme] == []


def test_the_readme_names_every_command_and_pattern():
    readme = " ".join(README.read_text().split())
    commands = [name for name in cli.commands if name != "run"]  # run is the default: `commbench` alone
    assert [name for name in commands if f"commbench {name}" not in readme] == []
    patterns = list(cli.commands["pattern"].commands)  # type: ignore[attr-defined]
    assert f"commbench pattern {'|'.join(patterns)}" in readme


def test_the_readme_promises_no_extra_that_installs_nothing():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    readme = " ".join(README.read_text().split())
    assert [name for name, packages in extras.items()
            if not packages and f"`{name}` extra brings" in readme] == []


def test_commbench_help_shows_every_option_of_a_plain_run(capsys):
    from commbench.cli import main

    assert main(["--help"]) == 0
    shown = capsys.readouterr().out
    run_options = option_names(cli.commands["run"])
    assert [option for option in sorted(run_options) if option not in shown] == []
    assert "Commands:" in shown and "pattern" in shown


@pytest.mark.parametrize("page", [*PAGES, ROOT / "scripts" / "README.md"], ids=lambda page: page.name)
def test_every_figure_measured_on_a_machine_names_its_script_or_says_there_is_none(page):
    assert unsourced_figures(page.read_text()) == []


@pytest.mark.parametrize("page", [*PAGES, ROOT / "scripts" / "README.md"], ids=lambda page: page.name)
def test_every_script_the_docs_name_exists_and_takes_the_options_shown(page):
    assert script_problems(page.read_text(), ROOT) == []
