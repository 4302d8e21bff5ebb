"""A console that cannot show µ, ± or box drawing (LC_ALL=C without UTF-8 coercion, PYTHONIOENCODING=ascii)
gets ASCII, one character for each, and commands run to the end."""

import io
import sys
import threading

import pytest

from commbench.cli.main import main
from commbench.writers.encoding import ascii_form, prepare_streams
from tests.dist_helpers import commbench
from tests.test_hostile_inputs import saved_run

ASCII_ENV = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0",
             "PYTHONIOENCODING": "ascii"}


@pytest.mark.parametrize(("character", "expected"), [
    ("µ", "u"), ("±", "~"), ("×", "x"), ("·", "-"), ("→", ">"), ("é", "e"), ("─", "-"), ("│", "|"),
    ("┼", "+"), ("\udcff", "\\xff"), ("中", "?")])
def test_each_character_a_console_lacks_becomes_ascii(character, expected):
    assert ascii_form(character) == expected


def test_a_stream_prepared_for_ascii_writes_every_character():
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    prepare_streams(stream)
    stream.write("p50 12.5 µs ±3% ┃ 2×")
    stream.flush()
    assert raw.getvalue() == b"p50 12.5 us ~3% | 2x"


def test_compare_prints_aligned_ascii_tables_to_an_ascii_console(tmp_path, monkeypatch):
    base, new = saved_run(tmp_path / "a.json"), saved_run(tmp_path / "b.json")
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="ascii", write_through=True))
    outcome: list[int] = []
    worker = threading.Thread(target=lambda: outcome.append(main(["compare", str(base), str(new)])))
    worker.start()
    worker.join(60)
    sys.stdout.flush()
    text = raw.getvalue().decode("ascii")  # nothing but ASCII reached the console
    assert outcome == [0], text
    assert " us " in text and "all_reduce" in text
    tables: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.startswith(("+", "|")):
            tables[-1].append(line.rstrip())
        elif tables[-1]:
            tables.append([])
    assert tables[0] and all(len({len(line) for line in table}) == 1 for table in tables if table), text



@pytest.mark.processes
def test_a_run_and_list_finish_on_an_ascii_console(tmp_path):
    run = commbench("--collective", "all_reduce", "--sizes", "1K", "--iters", "2", "--warmup", "1", "--json",
                    str(tmp_path / "r.json"), "--csv", str(tmp_path / "r.csv"), env=ASCII_ENV, timeout=180)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert "us" in run.stdout and run.stdout.isascii()
    listed = commbench("list", env=ASCII_ENV, timeout=180)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr[-2000:]
    assert listed.stdout.isascii() and "all_reduce" in listed.stdout
