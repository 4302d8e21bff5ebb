"""Rewrite the option tables of docs/options.md from the declarations (commbench/cli/reference.py).

    python scripts/options_table.py          # rewrite the block between the page's markers
    python scripts/options_table.py --check  # exit 1, saying so, when the page is out of date

Not a measurement: the one script here that writes a file of the source tree. tests/test_options.py
runs the same comparison as --check.
"""

import argparse
import sys
from pathlib import Path

from commbench.cli.main import cli  # noqa: F401 (imports the features, which register)
from commbench.cli.reference import option_tables, replace_block
from commbench.running.features import registered_features

PAGE = Path(__file__).resolve().parents[1] / "docs" / "options.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the page is up to date")
    args = parser.parse_args()
    page = PAGE.read_text()
    wanted = replace_block(page, option_tables(registered_features()))
    if args.check:
        if wanted != page:
            print(f"{PAGE} is out of date: run python scripts/options_table.py", file=sys.stderr)
            return 1
        return 0
    if wanted != page:
        PAGE.write_text(wanted)
        print(f"rewrote the option tables of {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
