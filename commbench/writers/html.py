"""The HTML page every `commbench report` writes (a sweep's, fabric's): its skeleton and style, a
TextTable as HTML, and a saved run's metadata.

Invariants: one self-contained page that loads nothing; every text from a results file is HTML-escaped
here or by the caller before it joins the page.
"""

from html import escape

from commbench.core.words import plural
from commbench.results.saved import SavedRun
from commbench.writers.console import TextTable

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; }
th { background: #f0f0f0; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: bold; padding: 0.3em 0; }
p.footer { margin: -0.6em 0 1em; font-size: 0.9em; }
img { max-width: 100%; }
pre, code { background: #f6f6f6; }
details { margin: 0.5em 0; }
"""


def page(title: str, parts: list[str]) -> str:
    """The whole page: ``parts`` (HTML already escaped) one per line in its body."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(parts) + "\n</body></html>\n")


def html_table(table: TextTable) -> str:
    head = "".join(f"<th>{escape(column)}</th>" for column in table.columns)
    body = []
    for cells in table.rows:
        tds = "".join(f"<td>{escape(cell)}</td>" if index < table.left_columns
                      else f'<td class="number">{escape(cell)}</td>' for index, cell in enumerate(cells))
        body.append(f"<tr>{tds}</tr>")
    footer = "".join(f'<p class="footer">{escape(line)}</p>' for line in table.footer)
    return (f"<table><caption>{escape(table.title)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>{footer}")


def _key_values(pairs: list[tuple[str, object]]) -> str:
    rows = "".join(f"<tr><th>{escape(key)}</th><td>{escape(str(value))}</td></tr>" for key, value in pairs)
    return f"<table>{rows}</table>"


def metadata_html(run: SavedRun) -> str:
    """A run's metadata: where and how it ran, its environment and its configuration."""
    meta = run.meta
    versions = ", ".join(f"{name} {value}" for name, value in sorted((meta.get("versions") or {}).items()))
    hosts = meta.get("hostnames") or []
    pairs = [
        ("file", run.path), ("run id", meta.get("run_id", "")), ("status", meta.get("status", "")),
        ("error", meta.get("error") or ""), ("started", meta.get("started_at", "")),
        ("finished", meta.get("finished_at") or ""), ("command", " ".join(meta.get("command") or [])),
        ("backend", meta.get("backend", "")), ("device", meta.get("device", "")),
        ("world size", meta.get("world_size", "")), ("launcher", meta.get("launcher", "")),
        ("hosts", ", ".join(sorted(set(hosts)))), ("commbench", meta.get("commbench_version", "")),
        ("torch", meta.get("torch_version", "")), ("python", meta.get("python_version", "")),
        ("libraries", versions), ("rows", len(run.rows)),
    ]
    env = meta.get("env") or {}
    env_html = _key_values(sorted(env.items())) if env else "<p>none recorded</p>"
    benchmarks = meta.get("benchmarks") or ([meta["config"]] if meta.get("config") else [])
    configs = "".join(f"<pre>{escape(_config_text(config))}</pre>" for config in benchmarks)
    return (_key_values(pairs)
            + f"<details><summary>environment ({plural(len(env), 'variable')})</summary>{env_html}</details>"
            + f"<details><summary>configuration ({plural(len(benchmarks), 'benchmark')})</summary>{configs}"
            "</details>")


def _config_text(config: dict) -> str:
    return "\n".join(f"{key}: {value}" for key, value in config.items())
