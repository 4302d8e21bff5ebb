"""plot and report on real saved runs (tests/conftest.py)."""

import base64
import json
import os
from html.parser import HTMLParser

from commbench.cli import main
from commbench.plot import collect_lines, line_labels, plot_title
from commbench.results import load_run
from tests.dist_helpers import commbench

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_plot_writes_a_png_with_a_line_per_run_and_series(two_runs, tmp_path):
    a, b = (saved.json for saved in two_runs)
    out = tmp_path / "plots" / "busbw.png"
    result = commbench("plot", str(a), str(b), "-o", str(out), timeout=120)
    assert result.returncode == 0, result.stderr
    data = out.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000
    assert result.stdout.strip() == f"plot: {out}"
    runs = [load_run(a), load_run(b)]
    lines = collect_lines(runs)
    assert len(lines) == 2 * 5  # per run: 2 gate collectives x 2 modes, and broadcast
    labels = line_labels(lines)
    assert len(set(labels)) == len(labels)  # every line can be told apart in the legend
    assert labels[0].startswith(runs[0].label) and "all_reduce" in labels[0] and "sync" in labels[0]
    assert plot_title(runs) == "backend gloo · device cpu · world size 2"


def test_plot_only_some_collectives_and_svg(two_runs, tmp_path, capsys):
    out = tmp_path / "b.svg"
    assert main(["plot", str(two_runs[0].json), "-o", str(out), "--collective", "broadcast"]) == 0
    assert out.read_text().lstrip().startswith(("<?xml", "<svg"))
    assert main(["plot", str(two_runs[0].json), "-o", str(out), "--collective", "scatter"]) == 2
    assert "nothing to plot for scatter" in capsys.readouterr().err
    assert main(["plot", str(two_runs[0].json), "-o", str(tmp_path / "x.bmp")]) == 2
    assert "the image type comes from the suffix" in capsys.readouterr().err


def test_without_matplotlib_plot_and_report_say_how_to_install_it(two_runs, tmp_path):
    blocker = tmp_path / "no_matplotlib" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('matplotlib is blocked for this test')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(blocker.parent), os.environ.get("PYTHONPATH", "")])}
    for command in (["plot", "-o", str(tmp_path / "p.png")], ["report", "-o", str(tmp_path / "r.html")]):
        result = commbench(command[0], str(two_runs[0].json), *command[1:], env=env, timeout=120)
        assert result.returncode == 2
        assert result.stderr.strip() == ("commbench: error: plots need matplotlib, which is not installed: "
                                         "pip install 'commbench[plot]'")
    assert not (tmp_path / "p.png").exists() and not (tmp_path / "r.html").exists()


class _Page(HTMLParser):
    """Collects what the tests check: images, table count, text; fails on unbalanced tags."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.tables = 0
        self.text: list[str] = []
        self.open: list[str] = []
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "img":
            self.images.append(attributes["src"])
            return
        if tag in ("meta", "br"):
            return
        if tag == "table":
            self.tables += 1
        if tag in ("script", "link", "iframe") or "href" in attributes:
            self.external.append(tag)
        self.open.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, (self.open[-5:], tag)
        self.open.pop()

    def handle_data(self, data):
        self.text.append(data)


def test_report_is_one_self_contained_page(two_runs, tmp_path):
    a, b = (saved.json for saved in two_runs)
    payload = json.loads(b.read_text())
    payload["meta"]["command"] = ["commbench", "--note", "<script>alert('x')</script> & more"]
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(payload))
    out = tmp_path / "report.html"
    assert main(["report", str(a), str(hostile), "-o", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    page = _Page()
    page.feed(html)
    page.close()
    assert page.open == [] and page.external == []  # balanced, and nothing loaded from elsewhere
    assert "<script>" not in html and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; more" in html
    assert len(page.images) == 3  # one plot per collective
    for source in page.images:
        assert source.startswith("data:image/png;base64,")
        assert base64.b64decode(source.split(",", 1)[1]).startswith(PNG_SIGNATURE)
    text = " ".join(page.text)
    for expected in ("gate · all_reduce · float32 · op sum", "α-β fits", "sync α-β fit: α = ",
                     "summary per collective", "Comparison:", load_run(a).label, "torch", "world size"):
        assert expected in text, expected
    # per run: metadata and environment; all fits; per run a table per group (3); the comparison: 3 + summary;
    # per run its hardware by host and its busbw against the peak (commbench.provenance.html)
    assert page.tables == 2 * 2 + 1 + 2 * 3 + 4 + 2 * 2
