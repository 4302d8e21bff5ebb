"""plot and report on real saved runs (tests/conftest.py)."""

import base64
import io
import json
import os
import struct
from html.parser import HTMLParser

import matplotlib.pyplot as pyplot

from commbench.analysis.plot import DPI, collect_lines, draw, line_labels, plot_title, run_labels
from commbench.cli import main
from commbench.results.saved import load_run
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
    # Runs are named by what differs between them (here only the start time), never by run id.
    assert labels[0].startswith(run_labels(runs)[0]) and "all_reduce" in labels[0] and "sync" in labels[0]
    assert not any(run.label in label for run in runs for label in labels)
    assert plot_title(runs) == "backend gloo · device cpu · world size 2"


def test_plot_only_some_collectives_and_svg(two_runs, tmp_path, capsys):
    out = tmp_path / "b.svg"
    assert main(["plot", str(two_runs[0].json), "-o", str(out), "--collective", "broadcast"]) == 0
    assert out.read_text().lstrip().startswith(("<?xml", "<svg"))
    assert main(["plot", str(two_runs[0].json), "-o", str(out), "--collective", "scatter"]) == 2
    assert "nothing to plot for scatter" in capsys.readouterr().err
    assert main(["plot", str(two_runs[0].json), "-o", str(tmp_path / "x.bmp")]) == 2
    assert "the image type comes from the suffix" in capsys.readouterr().err


def test_without_matplotlib_plot_says_how_to_install_it_and_report_leaves_the_plots_out(two_runs, tmp_path):
    blocker = tmp_path / "no_matplotlib" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('matplotlib is blocked for this test')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(blocker.parent), os.environ.get("PYTHONPATH", "")])}
    result = commbench("plot", str(two_runs[0].json), "-o", str(tmp_path / "p.png"), env=env, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip() == ("commbench: error: plots need matplotlib, which is not installed "
                                     "(matplotlib is blocked for this test): pip install matplotlib")
    assert not (tmp_path / "p.png").exists()
    report = tmp_path / "r.html"
    result = commbench("report", str(two_runs[0].json), "-o", str(report), env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"report: {report}"
    assert "the report has no plots: plots need matplotlib" in result.stderr
    page = _Page()
    page.feed(report.read_text(encoding="utf-8"))
    text = " ".join(page.text)
    assert page.images == [] and "No plots: plots need matplotlib" in text
    assert "pip install matplotlib" in text
    assert "α-β fits" in text and "Results" in text  # the rest of the page is there


def test_the_legend_of_two_runs_of_six_collectives_lies_inside_the_saved_figure(six_collective_runs):
    runs = [load_run(saved.json) for saved in six_collective_runs]
    figure = draw(runs)
    figure.set_dpi(DPI)
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=DPI)
    renderer = figure.canvas.get_renderer()  # the renderer that drew the saved image
    canvas = figure.bbox
    width, height = struct.unpack(">II", image.getvalue()[16:24])  # the PNG's IHDR: the saved canvas
    assert (width, height) == (round(canvas.width), round(canvas.height))
    (legend,) = figure.legends
    names = [text.get_text() for text in legend.get_texts()]
    assert len(names) == 2 * 6 * 2  # runs x collectives x modes
    for box in [legend.get_window_extent(renderer)] + [text.get_window_extent(renderer)
                                                       for text in legend.get_texts()]:
        assert 0 <= box.x0 and box.x1 <= canvas.width and 0 <= box.y0 and box.y1 <= canvas.height, box
    for axes in figure.axes:  # below the panels, clear of their tick labels and axis titles
        assert legend.get_window_extent(renderer).y1 <= axes.get_tightbbox(renderer).y0
    starts = run_labels(runs)
    assert len(set(starts)) == 2 and all(name.startswith(tuple(starts)) for name in names)
    assert not any(run.label in name for run in runs for name in names)  # no run ids
    pyplot.close(figure)


def test_runs_are_labelled_by_what_differs_between_them(six_collective_runs):
    runs = [load_run(saved.json) for saved in six_collective_runs]
    host = runs[0].meta["hostnames"][0]
    runs[0].meta["started_at"] = "2026-01-05T10:00:00+00:00"
    runs[1].meta["started_at"] = "2026-01-05T10:00:07+00:00"
    assert run_labels(runs) == ["10:00:00", "10:00:07"]  # one day: the time, to the second needed
    # NCCL's version is added to what the run recorded (a CUDA build of torch records CUDA's too, the
    # same in both runs, so it names neither)
    runs[1].meta.update(hostnames=["node7", "node7"], backend="nccl", started_at="2026-01-06T09:00:00+00:00",
                        versions={**(runs[1].meta.get("versions") or {}), "nccl": "2.21.5"})
    assert run_labels(runs) == [f"{host}, gloo, 2026-01-05", "node7, nccl, NCCL 2.21.5, 2026-01-06"]
    runs[1].meta = dict(runs[0].meta)
    assert run_labels(runs) == ["six_a.json", "six_b.json"]  # nothing recorded differs: the files do


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
    # per run its hardware by host and its busbw against the peak (commbench.provenance.html), and its
    # explanation (commbench.provenance.explain)
    assert page.tables == 2 * 2 + 1 + 2 * 3 + 4 + 2 * 2 + 2
    assert "explain: what this hardware allows" in text
