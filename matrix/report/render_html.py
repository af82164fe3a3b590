"""index.html: the report as one self-contained page (no CDN, no fetch), readable at a glance.

Each grid cell shows its status as colour, symbol and word (Okabe-Ito colours,
safe for colour-blind readers); hovering shows its provenance, clicking opens
it with the command that reproduces it and its failing tests. Every string from
the inputs goes through html.escape.
"""

from __future__ import annotations

from collections.abc import Iterator
from html import escape
from pathlib import Path

from matrix.cells import CELLS
from matrix.report.model import COLUMN_NAMES, COLUMNS, HOST_NAMES, ROWS, STACK_NAMES, Report, detail_rows
from matrix.report.status import CellReport, Status

COLOURS = {
    Status.PASS: "#009E73",
    Status.KNOWN_FAIL: "#E69F00",
    Status.REGRESSION: "#D55E00",
    Status.FIXED: "#56B4E9",
    Status.FLAKY: "#CC79A7",
    Status.CRASHED: "#000000",
    Status.MISROUTED: "#F0E442",
    Status.SKIPPED: "#999999",
    Status.MISSING: "#DDDDDD",
    Status.STALE: "#0072B2",
}
PROVENANCE = {
    "vllm_version": "vLLM",
    "vllm_commit": "vLLM commit",
    "torch_version": "torch",
    "torch_build": "torch build",
    "vllm_requires_torch": "vLLM asks for",
    "torch_mismatch": "torch mismatch",
    "kernel_release": "kernel",
    "wsl": "WSL",
    "gpu": "GPU",
    "gpu_driver": "driver",
    "execution": "execution",
    "execution_reason": "why",
    "runner_name": "runner",
    "image": "image",
    "image_digest": "image digest",
    "started_at": "started",
    "env_hash": "environment hash",
    "kit_commit": "kit",
}
FAILING = (Status.REGRESSION, Status.FLAKY, Status.FIXED, Status.KNOWN_FAIL)
# Per cell, the page lists this many failing tests with their messages; compat.json has them all.
LISTED_FAILURES = 40
MESSAGE_CHARS = 1500

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.5em}
table.grid{border-collapse:collapse;table-layout:fixed;width:100%;max-width:1400px}
.grid th,.grid td{border:1px solid #bbb;padding:.4em;vertical-align:top;text-align:left}
.grid th{background:#f3f3f3}
td.cell{border-left:8px solid var(--c)}
td.cell summary{cursor:pointer;font-weight:600;list-style:none}
td.cell .sym{font-size:1.2em}
td.cell .line{font-size:.85em;color:#444}td.cell.dim{opacity:.2}
td.cell .ev{font-size:.75em;color:#666;font-style:italic}
td.cell .bench{font-size:.75em;color:#333}
ol.timeline{font-size:.8em;margin:.2em 0;padding-left:1.2em}
.filter label{display:inline-block;margin:.15em .6em .15em 0;padding:.1em .4em;border-left:6px solid var(--c)}
dl.prov{display:grid;grid-template-columns:max-content 1fr;gap:.1em .6em;font-size:.85em;margin:.4em 0}
dl.prov dt{color:#666}dl.prov dd{margin:0;word-break:break-all}
pre{white-space:pre-wrap;word-break:break-word;background:#f7f7f7;padding:.4em;font-size:.8em;max-height:14em;overflow:auto}
code{background:#f3f3f3;padding:0 .2em}
table.detail{border-collapse:collapse;font-size:.8em}
.detail td,.detail th{border:1px solid #ddd;padding:.1em .3em}
.detail th.c{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap}
"""

JS = """
(function () {
  var boxes = document.querySelectorAll('.filter input[type=checkbox]');
  // A link may carry a filter: index.html#status=regression,known-fail
  var wanted = /status=([^&]*)/.exec(location.hash);
  if (wanted) {
    var keep = decodeURIComponent(wanted[1]).split(',');
    boxes.forEach(function (b) { b.checked = keep.indexOf(b.value) >= 0; });
  }
  function apply() {
    var on = {};
    boxes.forEach(function (b) { on[b.value] = b.checked; });
    document.querySelectorAll('td.cell').forEach(function (td) {
      td.classList.toggle('dim', !on[td.getAttribute('data-status')]);
    });
  }
  boxes.forEach(function (b) { b.addEventListener('change', apply); });
  apply();
  // One release at a time (the newest first); a link may pick one: #release=0.28.0
  var select = document.getElementById('release');
  function show() {
    document.querySelectorAll('section.release').forEach(function (sec) {
      sec.hidden = select.value !== 'all' && sec.getAttribute('data-release') !== select.value;
    });
  }
  if (select) {
    var picked = /release=([^&]*)/.exec(location.hash);
    if (picked) { select.value = decodeURIComponent(picked[1]); }
    select.addEventListener('change', show);
    show();
  }
})();
"""


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _title(cell: CellReport) -> str:
    env = cell.envelope
    bits = [f"{cell.cell.id}: {cell.status.value}"]
    if env:
        bits.append(f"vLLM {env.vllm_version or '?'} · {env.gpu or '?'} · {env.runner_name or '?'}")
        if cell.age_days is not None:
            bits.append(f"{cell.age_days:g} days old")
    elif cell.reason:
        bits.append(cell.reason)
    return "\n".join(bits)


def _timeline(report: Report, cell: CellReport) -> str:
    steps = report.timeline(cell.cell.id)
    if len(steps) < 2:
        return ""
    items = "".join(
        f"<li><b>{_e(step.vllm)}</b> {step.status.symbol} {step.status.value}"
        + (f" · {_e(step.summary)}" if step.summary else "")
        + "</li>"
        for step in steps
    )
    return f'<div>across releases:</div><ol class="timeline">{items}</ol>'


def _cell(report: Report, cell: CellReport) -> str:
    s = cell.status
    parts = [
        f'<td class="cell" data-status="{s.value}" data-cell="{_e(cell.cell.id)}" style="--c:{COLOURS[s]}" '
        f'title="{_e(_title(cell))}"><details><summary><span class="sym" aria-hidden="true">{s.symbol}</span> '
        f"{s.value}</summary>"
    ]
    if cell.underlying:
        parts.append(f"<div>was {cell.underlying.value} when last run</div>")
    if cell.reason:
        parts.append(f"<div>{_e(cell.reason)}</div>")
    if cell.envelope:
        rows = "".join(f"<dt>{PROVENANCE[key]}</dt><dd>{_e(value)}</dd>" for key, value in cell.envelope.provenance())
        age = f"<dt>age</dt><dd>{cell.age_days:g} days</dd>" if cell.age_days is not None else ""
        parts.append(f'<dl class="prov">{rows}{age}</dl>')
    for evidence in report.evidence(cell):
        parts.append(f"<div>evidence: {_e(evidence)}</div>")
    parts.append(f"<div>reproduce: <code>{_e(cell.command)}</code></div>")
    parts.append(_timeline(report, cell))
    for issue in cell.issues:
        parts.append(f'<div>issue: <a href="{_e(issue)}">{_e(issue)}</a></div>')
    failing = [case for case in cell.cases if case.status in FAILING]
    for case in failing[:LISTED_FAILURES]:
        parts.append(f"<div>{case.status.symbol} {case.status.value}: <code>{_e(case.name)}</code></div>")
        if case.message:
            parts.append(f"<pre>{_e(case.message[:MESSAGE_CHARS])}</pre>")
    if len(failing) > LISTED_FAILURES:
        parts.append(f"<div>… and {len(failing) - LISTED_FAILURES} more: see the detail table and compat.json</div>")
    parts.append("</details>")
    line = cell.summary or ("" if cell.envelope else cell.reason)
    if line:
        parts.append(f'<div class="line">{_e(line)}</div>')
    evidence = report.evidence(cell)
    if evidence:
        parts.append(f'<div class="ev">{_e(evidence[0].split(" (")[0])}</div>')
    bench = report.bench(cell)
    if bench is not None:
        source = " (test server)" if bench.server == "fake" else ""
        parts.append(f'<div class="bench" title="{_e(bench.line)}">bench{source}: {_e(bench.verdict)}</div>')
    parts.append("</td>")
    return "".join(parts)


def _grid(report: Report, vllm: str) -> str:
    head = "".join(f"<th>{_e(COLUMN_NAMES[c])}</th>" for c in COLUMNS)
    rows = []
    for stack, host in ROWS:
        cells = "".join(_cell(report, report.cell(vllm, stack, host, r, m)) for r, m in COLUMNS)
        rows.append(f"<tr><th>{STACK_NAMES[stack]} · {_e(HOST_NAMES[host])}</th>{cells}</tr>")
    return f'<table class="grid"><thead><tr><th></th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _detail(report: Report, vllm: str) -> Iterator[str]:
    tests = detail_rows(report, vllm)
    head = "".join(f'<th class="c">{c.id}</th>' for c in CELLS)
    yield (
        f"<details><summary>Test × cell detail ({len(tests)} tests)</summary>"
        f'<table class="detail"><thead><tr><th>test</th>{head}</tr></thead><tbody>'
    )
    for name, row in tests:
        yield (
            f"<tr><td>{_e(name)}</td>"
            + "".join(
                f'<td title="{row[c.id].value}">{row[c.id].symbol}</td>' if c.id in row else "<td></td>" for c in CELLS
            )
            + "</tr>"
        )
    yield "</tbody></table></details>"


def chunks(report: Report) -> Iterator[str]:
    """The page, piece by piece: a large report is written without ever holding it whole."""
    inputs = report.inputs
    legend = "".join(
        f'<label style="--c:{COLOURS[s]}"><input type="checkbox" value="{s.value}" checked> {s.symbol} '
        f"<b>{s.value}</b>: {_e(s.meaning)}</label>"
        for s in Status
    )
    yield (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        "<title>vLLM WSL2 pinned-memory compatibility</title>"
        f"<style>{CSS}</style></head><body>"
        "<h1>vLLM WSL2 pinned-memory compatibility</h1>"
        f"<p>Generated {report.generated_at:%Y-%m-%d %H:%M} UTC by kit <code>{_e(report.kit_commit)}</code> from "
        f"{len(inputs.files)} file(s), {inputs.testcases_read} test case(s); unattributed "
        f"{len(inputs.unattributed)}, unreadable {len(inputs.unreadable)}. Rows: GPU stack × host; columns: "
        "model runner × graph mode; <i>a→b</i>: VLLM_WSL2_ENABLE_PIN_MEMORY unset gives <i>a</i>, =1 gives "
        "<i>b</i>. Hover a cell for its provenance, click it for details.</p>"
        f'<div class="filter legend" role="group" aria-label="filter by status">{legend}</div>'
    )
    if len(report.versions) > 1:
        options = "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in report.versions)
        yield (
            f'<p><label>vLLM release <select id="release">{options}<option value="all">all releases</option>'
            "</select></label></p>"
        )
    for vllm in report.versions:
        yield f'<section class="release" data-release="{_e(vllm)}"><h2>vLLM {_e(vllm)}</h2>{_grid(report, vllm)}'
        yield from _detail(report, vllm)
        yield "</section>"
    if report.changes:
        items = "".join(
            f"<li><code>{_e(c.cell)}</code> since <b>{_e(c.vllm)}</b>: {_e(c.before)} → {_e(c.after)}"
            + "".join(f"<br><small>{_e(rule)}</small>" for rule in c.rules)
            + "</li>"
            for c in report.changes
        )
        yield f"<h2>Changes across releases</h2><ul>{items}</ul>"
    contradictions = report.contradictions
    if contradictions:
        items = "".join(
            f"<li>rule <code>{_e(c.rule)}</code> expects {_e(c.key)}={_e(c.expected)} for <code>{_e(c.cell)}</code> "
            f"(pin_env {_e(c.pin_env)}) with vLLM {_e(c.vllm)}; vLLM decided {_e(c.observed)} ({_e(c.status)})</li>"
            for c in contradictions
        )
        yield f"<h2>Rules the results contradict</h2><ul>{items}</ul>"
    if report.diff is not None:
        items = []
        for title, changes in (
            ("New regressions", report.diff.new_regressions),
            ("Newly fixed", report.diff.newly_fixed),
            ("Went missing", report.diff.went_missing),
        ):
            listed = ", ".join(f"<code>{_e(c.cell)}</code> (vLLM {_e(c.vllm)}, was {_e(c.was)})" for c in changes)
            items.append(f"<li><b>{title}</b>: {listed or 'none'}</li>")
        yield f"<h2>Changes since the previous report</h2><ul>{''.join(items)}</ul>"
    problems = [("unreadable", p) for p in inputs.unreadable] + [("unattributed", p) for p in inputs.unattributed]
    problems += [("warning", p) for p in inputs.warnings]
    if problems:
        items = "".join(f"<li>{kind}: <code>{_e(p.path)}</code>: {_e(p.reason)}</li>" for kind, p in problems)
        yield f"<h2>Inputs not counted in the grid</h2><ul>{items}</ul>"
    yield f"<script>{JS}</script></body></html>\n"


def render(report: Report) -> str:
    return "".join(chunks(report))


def write(report: Report, path: Path) -> None:
    with path.open("w") as f:
        f.writelines(chunks(report))
