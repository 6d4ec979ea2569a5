"""The report's renderers: the same tables in Markdown and HTML, the JSON as it is, the files.

Nothing is computed here that `build.py` did not put into the Report: the renderers only format.
jinja2 (HTML) and matplotlib (plots.py) are imported inside the functions that need them.
"""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..safeload import read_json
from ..files import atomic_write_bytes, fmt_bytes
from .build import SCHEMA_VERSION, DecodeBound, Point, Report, TaskScore
from .decision import CapacityCell, Decision, from_proxy, ratio_held
from .fidelity import fidelity_table
from .tiers import tier_lines, tier_table
from .text import DASH, fmt_ci, fmt_str


# ----------------------------------------------------------------------------------------------
# Formatting (shared by Markdown, HTML and the model card, report/card.py: the same strings in all
# three; `missing` lets the card write "missing" where the report writes "—")


def fmt(value: float | None, digits: int = 3, missing: str = DASH) -> str:
    """Significant digits without scientific notation for everyday magnitudes; `missing` for None."""
    if value is None:
        return missing
    if value == 0:
        return "0"
    mag = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - mag)
    return f"{value:,.{decimals}f}"


def fmt_pm(value: float | None, stderr: float | None, digits: int = 4, missing: str = DASH) -> str:
    """`0.9706 ± 0.0713`; the one formatter of a value and its uncertainty (report, card, CLI)."""
    if value is None:
        return missing
    text = f"{value:.{digits}f}"
    return text + (f" ± {stderr:.{digits}f}" if stderr is not None else "")


def fmt_ms(seconds: tuple[float | None, ...], missing: str = DASH) -> str:
    """Latencies stored in seconds, in milliseconds: `p50 / p95` for a pair, one value for a 1-tuple."""
    if all(x is None for x in seconds):
        return missing
    return " / ".join(fmt(x * 1000 if x is not None else None, missing=missing) for x in seconds)


def _tok_s(p: Point | None, kind: str | None = None) -> str:
    if p is None or p.output_tok_s is None:
        return DASH
    text = fmt(p.output_tok_s)
    if kind:
        text += f" ({kind} {p.load})"
    if p.failures:
        text += f" [{p.failures} failed]"
    if p.client_limited:
        text += " [client-limited]"
    if p.usage_mismatch:
        text += " [usage mismatch]"
    if p.started_busy:
        text += " [started busy]"
    return text


def _tpot(p: Point | None) -> str:
    return fmt(p.tpot_p50 * 1000) if p is not None and p.tpot_p50 is not None else DASH


def _score(s: TaskScore | None) -> str:
    return fmt_pm(s.value, s.stderr) if s else DASH


def _perplexity(r) -> str:
    """wikitext's word perplexity and, for a quantized variant, its paired recovery: a long-context
    cost (an FP8 KV cache's) shows there and not in the short accuracy items."""
    paired = next((s for s in r.scores if s.task.startswith("wikitext") and s.recovery is not None), None)
    if r.perplexity is None or paired is None:
        return fmt(r.perplexity)
    return f"{fmt(r.perplexity)} ({fmt_ci(paired.recovery, paired.recovery_low, paired.recovery_high)})"


def tables(report: Report) -> list[tuple[str, list[str], list[list[str]], str | None]]:
    """(title, header, rows, caption) for every table; both renderers print exactly these."""
    r_ = report.rows
    out = []
    if (capacity := capacity_table(r_)) is not None:
        out.append(capacity)
    if (bounds := bound_table(r_)) is not None:
        out.append(bounds)
    if (tiers := tier_table(report.tiers, report.price_per_hour)) is not None:
        out.append(tiers)
    out.append(("Checkpoints", ["variant", "method", "status", "format", "size on disk", "weight memory",
                                "KV cache (tokens)", "conversion time", "kernel vLLM chose"],
                [[r.name, r.method, r.status + (f": {r.error}" if r.error else ""), r.format or DASH,
                  fmt_bytes(r.size_bytes), fmt_bytes(r.weight_memory_bytes),
                  f"{r.kv_cache_tokens:,}" if r.kv_cache_tokens is not None else DASH,
                  f"{fmt(r.convert_time_s)} s" if r.convert_time_s is not None else DASH,
                  _short_kernel(r.kernels)] for r in r_],
                "size on disk: all files of the checkpoint; weight memory: what vLLM loaded, summed over GPUs; "
                "kernel: the vLLM log's line naming the linear kernel (every quantization/kernel line is listed "
                "below)"))
    out.append(("Throughput and latency", ["variant", "output tok/s c=1", "output tok/s at knee",
                                           "TTFT p50 / p95 (ms) c=1", "TTFT p50 / p95 (ms) at knee",
                                           "ITL p50 / p95 (ms) c=1", "ITL p50 / p95 (ms) at knee",
                                           "TPOT p50 (ms) c=1", "TPOT p50 (ms) at knee"],
                [[r.name, _tok_s(r.c1), _tok_s(r.top, r.top_kind),
                  fmt_ms((r.c1.ttft_p50, r.c1.ttft_p95)) if r.c1 else DASH,
                  fmt_ms((r.top.ttft_p50, r.top.ttft_p95)) if r.top else DASH,
                  fmt_ms((r.c1.itl_p50, r.c1.itl_p95)) if r.c1 else DASH,
                  fmt_ms((r.top.itl_p50, r.top.itl_p95)) if r.top else DASH, _tpot(r.c1), _tpot(r.top)] for r in r_],
                "at knee: the knee of the sweep, the capacity under the SLO (\"capacity\"), or the highest load measured "
                "(\"highest\"); [client-limited]: quantkit's own client was saturated at that point (its figures may "
                "read low); [usage mismatch]: the server's token counts disagreed with the text it sent (the tokens "
                "were counted from the text); [started busy]: the server still had an earlier point's requests when "
                "it started"))
    acc_rows = []
    for r in r_:
        by_task = {s.task: s for s in r.scores}
        recovery = (fmt_ci(r.recovery, r.recovery_low, r.recovery_high) + from_proxy(r) if r.gate != "reference"
                    else fmt_pm(r.recovery, None) + f" (reference{', from ' + r.accuracy_from if r.accuracy_from else ''})")
        gate = r.gate or DASH
        if r.gate in ("fail", "inconclusive"):
            gate += ": " + "; ".join(d.removesuffix(f": {r.gate}") for d in r.gate_detail if d.endswith(f": {r.gate}"))
        acc_rows.append([r.name] + [_score(by_task.get(t)) for t in report.tasks]
                        + [recovery if r.recovery is not None else DASH, _perplexity(r), gate,
                           "yes" if r.pareto else ""])
    out.append(("Accuracy", ["variant"] + report.tasks + ["recovery (mean)", "wikitext word ppl", "gate", "Pareto"],
                acc_rows, "primary metric ± stderr per task (each variant on its own items); recovery = quantized / "
                "baseline on the same items, averaged over accuracy tasks, [95% interval] from the paired per-item "
                "scores (delta method with their covariance); a gate passes when the interval's lower bound "
                "reaches it, fails when the upper bound is below it, and is inconclusive otherwise; wikitext: word "
                "perplexity, and in brackets its recovery (baseline ppl / this ppl) with the 95% interval from the "
                "same documents resampled together"))
    if (fidelity := fidelity_table(r_, DASH)) is not None:  # beside the accuracy it sharpens
        out.append(fidelity)
    out.append(("Batch-1 decode bound from memory bandwidth", ["variant", "weight bytes", "bandwidth (GB/s)",
                                                                 "bound tok/s", "measured tok/s c=1", "measured / bound"],
                [[r.name, fmt_bytes(r.bound.weight_bytes), _bandwidth(r.bound), fmt(r.bound.max_tok_s),
                  fmt(r.bound.measured_tok_s), fmt(r.bound.ratio * 100) + "%" if r.bound.ratio is not None else DASH]
                 for r in r_],
                "bound = bandwidth / bytes read per token (size on disk), bandwidths added over tensor-parallel "
                f"GPUs; bandwidth: {report.bandwidth_source}"))
    out.append(("Evaluation protocol", ["task", "version", "n-shot", "limit", "items", "chat template", "BOS",
                                        "primary metric", "data", "variants"],
                [[p.task, p.version or DASH, fmt_str(p.n_shot), fmt_str(p.limit, "all"), _items(p),
                  _yn(p.chat_template), _yn(p.add_bos_token), p.primary_metric or DASH, p.data or DASH,
                  ", ".join(p.variants)]
                 for p in report.protocol], None))
    workloads = []
    for r in r_:
        if w := r.workload:
            workloads.append([r.name, fmt_str(w.input_len), fmt_str(w.output_len), fmt_str(w.num_prompts),
                              w.dataset or "random", w.api or DASH,
                              ", ".join(p.load for p in r.points) or DASH, " ".join(r.serve_args) or DASH])
    out.append(("Bench workload", ["variant", "input tokens", "output tokens", "requests per point", "dataset",
                                   "API", "points", "vllm serve flags"], workloads, None))
    env = [[k, str(v) if v not in (None, "") else DASH] for k, v in report.environment.items()]
    env.append(["recipe hash", report.recipe_hash or DASH])
    env.append(["memory bandwidth", (fmt(report.bandwidth_gbs, 4) + " GB/s, " if report.bandwidth_gbs else "")
                + report.bandwidth_source])
    out.append(("Environment", ["item", "value"], env, None))
    return out


def _items(p: Any) -> str:
    """Items scored: one number, or each variant's when results grew to different sizes."""
    counts = {n for n in p.items.values() if n is not None}
    if len(counts) <= 1:
        return fmt_str(p.n_samples)
    text = ", ".join(f"{name} {n}" for name, n in p.items.items())
    return text + (f" ({p.growth})" if p.growth else "")


def capacity_table(rows: list[Any]) -> tuple[str, list[str], list[list[str]], str] | None:
    """The per-variant table under the recommendation (None when nothing was measured)."""
    def cell_text(c: CapacityCell | None, base: CapacityCell | None = None) -> str:
        if c is None:
            return DASH
        if c.load is None:
            return "not met" + (f" ({c.blocker})" if c.blocker else "")
        text = f"{c.load_text()}: {fmt(c.goodput)} req/s, {fmt(c.output_tok_s)} tok/s"
        if base is not None and base.goodput > 0 and c is not base:
            text += f" ({c.goodput / base.goodput:.2f} x)"
        return text

    out = []
    for r in rows:
        if r.capacity is None and r.capacity_tuned is None:
            continue
        bound_cell = r.capacity_tuned if r.capacity_tuned is not None and r.capacity_tuned.bound else r.capacity
        bound = DASH if bound_cell is None or not bound_cell.bound else bound_cell.bound
        tuned = cell_text(r.capacity_tuned, r.capacity)
        if r.capacity_tuned is not None and r.capacity_tuned.label == "defaults":
            tuned = f"defaults kept ({r.capacity_tuned.trials} trials, {r.capacity_tuned.servers} servers)"
        elif r.capacity_tuned is not None and r.capacity_tuned.serve_args:
            tuned += f" with {' '.join(r.capacity_tuned.serve_args)}"
        out.append([r.name, cell_text(r.capacity), tuned,
                    fmt_pm(r.recovery, r.recovery_stderr) + from_proxy(r) if r.recovery is not None else DASH,
                    r.gate or DASH, bound])
    if not out:
        return None
    slo = next((c.slo for r in rows for c in (r.capacity, r.capacity_tuned) if c is not None), "")
    return ("Capacity under the SLO", ["variant", "capacity on vLLM defaults", "capacity tuned (x defaults)",
                                       "recovery", "gate", "bound"], out,
            f"SLO {slo}. capacity = the highest load meeting the SLO, searched to the stated tolerance; req/s = goodput "
            "(requests that met every bound, per second) at that load; tok/s = output tokens/s there. Bound: what "
            "stops it, from vLLM's /metrics at the first load that broke the SLO.")


def bound_table(rows: list[Any]) -> tuple[str, list[str], list[list[str]], str] | None:
    """Beside the capacity table: the figures each ladder's bound was read from, where they include
    the server's CPU (None for ladders measured before host.py, whose reports stay as they were)."""
    def cores(figures: dict[str, float], role: str) -> str:
        mean, top = figures.get(f"{role}_busiest"), figures.get(f"{role}_cores_max")
        return DASH if mean is None else fmt(mean) + (f" (max {fmt(top)})" if top is not None else "")

    out = []
    for r in rows:
        for c in (r.capacity, r.capacity_tuned):
            if c is None or c.bound_figures is None:
                continue
            f = c.bound_figures
            step, util = f.get("step_s"), f.get("gpu_util_mean")
            out.append([r.name, c.label, c.bound or DASH, cores(f, "engine_core"), cores(f, "api_server"),
                        fmt(f.get("worker_cores")), fmt(f.get("client_cores")), fmt(util) + "%" if util is not None else DASH,
                        fmt(f.get("gpu_sm_clock_mhz")) + (f" (power-capped {f['gpu_power_capped']:.0%})"
                                                          if f.get("gpu_power_capped") else ""),
                        fmt(step * 1000 if step is not None else None),
                        fmt(f.get("decode_batch_mean"))])
    if not out:
        return None
    from ..measure.observe.bounds import GPU_BUSY, HOST_BUSY

    return ("What bounds each ladder", ["variant", "configuration", "bound", "engine core (cores)",
                                        "API server (cores)", "workers (cores)", "client (cores)", "GPU busy",
                                        "SM clock (MHz)", "step (ms)", "decode batch"], out,
            "read at the load where the bound was named (the first that broke the SLO). Cores: CPU-seconds per second "
            "over the point; engine core and API server: the busiest process's mean (max: the role's busiest "
            "interval), workers and client: all of their processes. host: an API server process at "
            f"{HOST_BUSY:g} of a core or more, or, on a GPU below {GPU_BUSY:g}% busy, the engine core at {HOST_BUSY:g} "
            "or more (on a CPU backend the engine core's time is the compute's). power-capped: the share of the "
            "point's seconds NVML said the power limit held the SM clock down. step: wall time per engine step "
            "(vLLM's counters, idle time included); decode batch: tokens generated per step.")


def decision_lines(report: Report, markdown: bool = False) -> list[str]:
    """The "Recommended deployment" section as plain sentences (HTML prints them escaped), or with
    `markdown` as Markdown lines: the sentences escaped, the command a code span."""
    d: Decision | None = report.decision
    if d is None or d.status == "no_capacity":
        return []
    text = md_escape if markdown else str
    lines = []
    if d.status == "recommended" and d.recommended is not None:
        c = d.recommended
        lines.append(d.summary[0].upper() + d.summary[1:] + ".")
        lines.append(f"capacity: {c.cell.load_text()}, {fmt(c.cell.goodput)} requests/s, "
                     f"{fmt(c.cell.output_tok_s)} output tokens/s within {c.cell.slo} ({c.cell.points} load points)")
        if d.ratio_vs_baseline is not None:
            held = ratio_held(c.cell, d.baseline)
            ratio = (f"{held}{d.ratio_vs_baseline:.2f} x" if held is not None
                     else f"not bounded ({d.ratio_vs_baseline:.2f} x at the ladders' tops, which both held)")
            lines.append(f"vs the baseline on vLLM defaults under the same SLO: {ratio} "
                         f"({fmt(d.baseline.goodput if d.baseline else None)} requests/s)")
        lines.append("accuracy recovery: " + (fmt_pm(c.recovery, c.recovery_stderr) + from_proxy(c)
                                              if c.recovery is not None else DASH) + f", gate: {c.gate or DASH}")
        if c.cell.bound:
            lines.append(f"bound: {c.cell.bound}: {c.cell.bound_evidence}; knob: {c.cell.knob}")
        lines = [text(line) for line in lines]
        command = c.cell.command or ("vllm serve " + " ".join(["MODEL", *c.cell.serve_args]))
        lines.append(md_code(command) if markdown else command)
    else:
        lines.append(Md("**No recommendation**: ") + md_escape(f"{d.summary}.") if markdown
                     else f"No recommendation: {d.summary}.")
        if d.closest is not None and d.closest.cell.load is not None:
            lines.append(text(f"closest: {d.closest.variant} ({d.closest.cell.label}) at {d.closest.cell.load_text()}, "
                              f"{fmt(d.closest.cell.goodput)} requests/s"))
    lines += [text(f"note: {n}") for n in d.notes]
    lines += [text(line) for line in tier_lines(report.tiers)]
    if report.slo_definition:
        lines.append(text(report.slo_definition))
    return lines


def _yn(value: bool | None) -> str:
    return DASH if value is None else ("yes" if value else "no")


def _bandwidth(bound: DecodeBound) -> str:
    if bound.bandwidth_gbs is None or bound.gpus == 1:
        return fmt(bound.bandwidth_gbs, 4)
    return f"{fmt(bound.gpus * bound.bandwidth_gbs, 4)} ({bound.gpus} × {fmt(bound.bandwidth_gbs, 4)})"


def _short_kernel(lines: list[str]) -> str:
    """The line naming the linear-layer kernel if there is one (the log also names the attention
    backend and the quantization config); the table cell is short, the full list follows."""
    if not lines:
        return DASH
    first = next((x for x in lines if re.search(r"linear|kernel|marlin|machete|gemm|scaled_?mm", x, re.I)), lines[0])
    return first if len(first) <= 80 else first[:77] + "..."


# ----------------------------------------------------------------------------------------------
# Markdown


class Md(str):
    """Markdown that is safe as it stands (text md_escape made, a code span md_code made): written
    unchanged where other text is escaped."""


# What Markdown (CommonMark, GFM) would read as markup in text: emphasis (`*`, `~`, an `_` that is
# not inside a word), code (`), HTML and autolinks (a `<`; an `&` that starts an entity), a
# blockquote (a leading `>`), a link or an image (a `]` followed by `(`, `[` or `:`; a lone bracket
# is text, as in "0.97 [0.95, 0.99]"), the escape itself. What stays is read as it is (">= 0.95").
_MD_MARKUP = re.compile(r"[\\`*~]|<|&(?=#?[0-9A-Za-z]+;)|^>|(?<![^\W_])_|_(?![^\W_])|\](?=[(\[:])")
_MD_ENTITY = {"&": "&amp;", "<": "&lt;"}
# a line's start that would open a block: a heading (`# `), a list item (`- `, `+ `, `1. `)
_MD_BLOCK_START = re.compile(r"^(#{1,6}|[-+]|\d{1,9}[.)])(?=\s|$)")


def md_escape(text: Any) -> Md:
    """`text` as Markdown that renders exactly it, on one line: a name, an error, a path from the
    store never becomes a tag, a link or emphasis in the report or the card (both write through this)."""
    if isinstance(text, Md):
        return text
    line = " ".join(str(text).split())
    line = _MD_MARKUP.sub(lambda m: _MD_ENTITY.get(m.group(0), "\\" + m.group(0)), line)
    return Md(_MD_BLOCK_START.sub(lambda m: m.group(0)[:-1] + "\\" + m.group(0)[-1], line))


def md_code(text: Any) -> Md:
    """`text` as an inline code span, on one line, whatever backticks it holds (the fence is longer
    than any run of them inside)."""
    line = " ".join(str(text).split())
    if not line:
        return Md("")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", line)), default=0) + 1)
    pad = " " if line.startswith("`") or line.endswith("`") else ""
    return Md(f"{fence}{pad}{line}{pad}{fence}")


def md_fence(lines: list[str], info: str = "") -> list[str]:
    """A fenced code block holding `lines` as they are: its fence is longer than any backtick run
    inside, so no line of theirs can close it."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, *lines, fence]


def _md_cell(text: Any) -> str:
    return md_escape(text).replace("|", "\\|")


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table's lines, each cell escaped (md_escape; an Md cell as it is) on one line with
    its pipes escaped: the report's tables and the model card's (card.py) are written by this one
    function."""
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(_md_cell(c) for c in cells) + " |"

    return [line(header), "|" + "---|" * len(header), *(line(row) for row in rows)]


def _version(report: Report) -> str:
    from .. import __version__

    return str(report.environment.get("quantkit") or __version__)


# The plots go after the first three tables (what each variant is, its speed, its accuracy): the
# reader sees the trade-off before the detail tables.
PLOTS_AFTER = 3  # (4 when the capacity table leads, one more when the fidelity table follows the accuracy)


def _plots_after(report: Report) -> int:
    return (PLOTS_AFTER + (report.decision is not None) + any(r.fidelity is not None for r in report.rows)
            + (bound_table(report.rows) is not None))


def render_markdown(report: Report) -> str:
    """The report in Markdown; every text from the store (names, errors, notes, kernels) escaped."""
    lines = [f"# {md_escape(report.title)}", "", f"Generated {report.created_at} by quantkit {_version(report)}.", ""]
    failed = [r for r in report.rows if r.status != "done"]
    for r in failed:
        lines.append(f"> **{md_escape(r.name)}: {md_escape(r.status)}**" + (f": {_md_cell(r.error)}" if r.error else ""))
    if failed:
        lines.append("")
    for note in report.notes:
        lines += [f"> note: {_md_cell(note)}", ""]
    if decision := decision_lines(report, markdown=True):
        lines += ["## Recommended deployment", ""] + [f"- {line}" for line in decision] + [""]
    plots_after = _plots_after(report)
    for i, (title, header, rows, caption) in enumerate(tables(report)):
        if i == plots_after:
            lines += _md_plots(report)
        lines += [f"## {title}", ""]
        if not rows:
            lines += [f"{DASH} (nothing measured)", ""]
            continue
        lines += markdown_table(header, rows) + [""]
        if caption:
            lines += [f"_{_md_cell(caption)}_", ""]
    kernel_rows = [r for r in report.rows if r.kernels]
    if kernel_rows:
        lines += ["## Kernels and schemes vLLM chose (from its log)", ""]
        for r in kernel_rows:
            lines += [f"**{md_escape(r.name)}**", "", *md_fence(r.kernels), ""]
    gate_rows = [r for r in report.rows if r.gate_detail]
    if gate_rows:
        lines += ["## Gates", ""]
        for r in gate_rows:
            lines += [f"- **{md_escape(r.name)}**: " + "; ".join(md_escape(d) for d in r.gate_detail)]
        lines.append("")
    return "\n".join(lines)


def _md_plots(report: Report) -> list[str]:
    lines = ["## Plots", ""]
    for p in report.plots:
        lines += [f"![{md_escape(p.title)}](plots/{p.name}.png)" if p.drawn else f"- {md_escape(p.title)}: {md_escape(p.note)}", ""]
    return lines


# ----------------------------------------------------------------------------------------------
# HTML (self-contained: inline CSS, images as data URIs, no script, nothing fetched)

_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{{ report.title }}</title>
<style>
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1600px; }
table { border-collapse: collapse; margin: 0.5em 0 0.3em; font-size: 13px; }
th, td { border: 1px solid #bbb; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #eef1f5; }
tr.failed td { background: #fde8e8; }
tr.pareto td:first-child { font-weight: bold; }
.caption { font-size: 12px; color: #555; margin-bottom: 1.2em; }
.alert { background: #fde8e8; border-left: 4px solid #c0392b; padding: 0.4em 0.8em; margin: 0.4em 0; }
.note { background: #fff6dd; border-left: 4px solid #e0a800; padding: 0.4em 0.8em; margin: 0.4em 0; }
img.plot { display: block; max-width: 100%; margin: 0.5em 0 1.5em; border: 1px solid #ddd; }
pre { background: #f6f6f6; padding: 0.5em; font-size: 12px; white-space: pre-wrap; }
</style></head>
<body>
{% macro plots() %}<h2>Plots</h2>
{% for p in report.plots %}
{% if p.drawn and images.get(p.name) %}
<h3>{{ p.title }}</h3>
<img class="plot" alt="{{ p.title }}" data-plot="{{ p.name }}" src="data:image/png;base64,{{ images[p.name] }}">
{% else %}<p class="note">{{ p.title }}: {{ p.note or 'image not embedded' }}</p>{% endif %}
{% endfor %}{% endmacro %}
<h1>{{ report.title }}</h1>
<p>Generated {{ report.created_at }} by quantkit {{ version }}.</p>
{% for r in report.rows if r.status != 'done' %}
<div class="alert"><b>{{ r.name }}: {{ r.status }}</b>{% if r.error %}: {{ r.error }}{% endif %}</div>
{% endfor %}
{% for n in report.notes %}<div class="note">note: {{ n }}</div>{% endfor %}
{% if decision %}<h2>Recommended deployment</h2><ul class="decision">
{% for line in decision %}<li>{{ line }}</li>{% endfor %}</ul>{% endif %}
{% for title, header, rows, caption in tables %}
{% if loop.index0 == plots_after %}{{ plots() }}{% endif %}
<h2>{{ title }}</h2>
{% if rows %}
<table><tr>{% for h in header %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in rows %}<tr class="{{ row_class.get(title, {}).get(row[0], '') }}">{% for c in row %}<td>{{ c }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% if caption %}<div class="caption">{{ caption }}</div>{% endif %}
{% else %}<p>{{ dash }} (nothing measured)</p>{% endif %}
{% endfor %}
{% if kernel_rows %}<h2>Kernels and schemes vLLM chose (from its log)</h2>
{% for r in kernel_rows %}<h3>{{ r.name }}</h3><pre>{{ r.kernels | join('\n') }}</pre>{% endfor %}{% endif %}
{% if gate_rows %}<h2>Gates</h2><ul>
{% for r in gate_rows %}<li><b>{{ r.name }}</b>: {{ r.gate_detail | join('; ') }}</li>{% endfor %}</ul>{% endif %}
</body></html>
"""


def render_html(report: Report, images: dict[str, bytes] | None = None) -> str:
    """The report as one HTML file; `images` maps plot name -> PNG bytes (embedded as data URIs)."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    row_class = {"Checkpoints": {r.name: "failed" for r in report.rows if r.status == "failed"},
                 "Accuracy": {r.name: "pareto" for r in report.rows if r.pareto}}
    return env.from_string(_HTML).render(
        report=report, tables=tables(report), dash=DASH, row_class=row_class, version=_version(report),
        plots_after=_plots_after(report),
        images={k: base64.b64encode(v).decode("ascii") for k, v in (images or {}).items()},
        kernel_rows=[r for r in report.rows if r.kernels], gate_rows=[r for r in report.rows if r.gate_detail],
        decision=decision_lines(report),
    )


# ----------------------------------------------------------------------------------------------
# Writing


def write_report(report: Report, out_dir: Path) -> dict[str, Path]:
    """Write report.md, report.html, report.json and plots/<name>.png into out_dir.

    Returns {"md", "html", "json", "plot:<name>"} -> path. Each file is written to a temporary name
    and renamed, so a reader never sees half a report."""
    from .plots import draw

    out_dir = Path(out_dir)
    (out_dir / "plots").mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    images: dict[str, bytes] = {}
    for plot in report.plots:
        if not plot.drawn:
            continue
        png = draw(plot.name, report)
        images[plot.name] = png
        paths[f"plot:{plot.name}"] = atomic_write_bytes(out_dir / "plots" / f"{plot.name}.png", png)
    # the records are masked as they are stored; a store written before that is masked here
    from ..secrets import mask_secrets, mask_text

    paths["md"] = atomic_write_bytes(out_dir / "report.md", mask_text(render_markdown(report)).encode())
    paths["html"] = atomic_write_bytes(out_dir / "report.html", mask_text(render_html(report, images)).encode())
    paths["json"] = atomic_write_bytes(out_dir / "report.json", (json.dumps(
        mask_secrets(report.model_dump(mode="json")), indent=2, ensure_ascii=False) + "\n").encode())
    return paths



def read_report(path: Path) -> Report:
    """A report.json back into a Report (schema_version checked)."""
    data = read_json(path, "a quantkit report.json", "give the report.json `quantkit compare` wrote", expect=dict)
    if data.get("schema_version") != SCHEMA_VERSION:
        raise UsageError(f"{path} has report schema_version {data.get('schema_version')}, this quantkit reads {SCHEMA_VERSION}")
    return Report.model_validate(data)
