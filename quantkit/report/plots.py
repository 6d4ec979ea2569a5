"""The report's plots (matplotlib, Agg, PNG bytes), drawn from a Report only.

matplotlib is imported here, and this module only by `report.write_report`, so importing quantkit
stays light. Figures are built with `matplotlib.figure.Figure` (no pyplot): no global state, no
GUI backend, safe to call from a library.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .build import Report

WIDTH, HEIGHT, DPI = 8.0, 5.0, 110
TWO_PANELS = {"latency_vs_offered_load"}


def draw(name: str, report: "Report") -> bytes:
    """PNG bytes of the plot `name` (one of report.plots)."""
    fn = {"recovery_vs_throughput": _recovery_vs_throughput, "recovery_vs_capacity": _recovery_vs_capacity,
          "itl_vs_throughput": _itl_vs_throughput, "latency_vs_offered_load": _latency_vs_offered_load,
          "ttft_vs_concurrency": _ttft_vs_concurrency}[name]
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    panels = 2 if name in TWO_PANELS else 1
    fig = Figure(figsize=(WIDTH * (1.5 if panels == 2 else 1), HEIGHT), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, panels, squeeze=False)[0]
    fn(*axes, report)
    for ax in axes:
        ax.margins(x=0.08, y=0.08)  # room for the point labels at the edges
        ax.grid(True, alpha=0.3)
    buf = io.BytesIO()
    # no timestamp/version metadata: the same report gives the same bytes
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _colors(report: "Report") -> dict[str, str]:
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf"]
    return {r.name: palette[i % len(palette)] for i, r in enumerate(report.rows)}


def _recovery_vs_throughput(ax, report: "Report") -> None:
    colors = _colors(report)
    pts = [r for r in report.rows if r.status != "failed" and r.top and r.top.output_tok_s is not None
           and r.recovery is not None]
    for r in pts:
        ax.errorbar(r.top.output_tok_s, r.recovery, yerr=r.recovery_stderr, fmt="o", color=colors[r.name],
                    markersize=8 if r.pareto else 6, capsize=3, label=f"{r.name} ({r.top_kind} {r.top.load})")
        ax.annotate(r.name, (r.top.output_tok_s, r.recovery), textcoords="offset points", xytext=(6, 6), fontsize=9)
    front = sorted((r for r in pts if r.pareto), key=lambda r: r.top.output_tok_s)
    if front:
        # the front as a staircase: nothing above-right of it was measured
        xs, ys = [], []
        for r in front:
            if xs:
                xs.append(r.top.output_tok_s)
                ys.append(ys[-1])
            xs.append(r.top.output_tok_s)
            ys.append(r.recovery)
        ax.plot(xs, ys, "--", color="#555", linewidth=1.2, label="Pareto front")
    ax.axhline(1.0, color="#999", linewidth=0.8, linestyle=":")
    ax.set_xlabel("output tokens/s (at the knee, or highest load measured)")
    ax.set_ylabel("accuracy recovery (quantized / baseline)")
    ax.set_title("Accuracy recovery vs throughput")
    ax.legend(fontsize=8, loc="best")


def _recovery_vs_capacity(ax, report: "Report") -> None:
    """Each variant at its best capacity under the SLO (tuned where tuning won), the front dashed,
    and the recommendation circled."""
    from .build import best_capacity

    colors = _colors(report)
    pts = [(r, best_capacity(r)) for r in report.rows if r.status != "failed" and r.recovery is not None]
    pts = [(r, c) for r, c in pts if c is not None]
    chosen = report.decision.recommended if report.decision else None
    for r, c in pts:
        ax.errorbar(c.goodput, r.recovery, yerr=r.recovery_stderr, fmt="o", color=colors[r.name],
                    markersize=8 if r.pareto else 6, capsize=3, label=f"{r.name} ({c.label}, {c.load_text()})")
        ax.annotate(r.name, (c.goodput, r.recovery), textcoords="offset points", xytext=(6, 6), fontsize=9)
        if chosen is not None and chosen.variant == r.name:
            ax.plot([chosen.cell.goodput], [r.recovery], "o", markersize=16, markerfacecolor="none",
                    markeredgecolor="#111", label="recommended")
    front = sorted(((r, c) for r, c in pts if r.pareto), key=lambda rc: rc[1].goodput)
    if front:
        xs, ys = [], []
        for r, c in front:
            if xs:
                xs.append(c.goodput)
                ys.append(ys[-1])
            xs.append(c.goodput)
            ys.append(r.recovery)
        ax.plot(xs, ys, "--", color="#555", linewidth=1.2, label="Pareto front")
    ax.axhline(1.0, color="#999", linewidth=0.8, linestyle=":")
    ax.set_xlabel(f"capacity: requests/s meeting the SLO ({report.slo})")
    ax.set_ylabel("accuracy recovery (quantized / baseline)")
    ax.set_title("Accuracy recovery vs capacity under the SLO")
    ax.legend(fontsize=8, loc="best")


def _itl_vs_throughput(ax, report: "Report") -> None:
    colors = _colors(report)
    for r in report.rows:
        pts = [p for p in r.points if p.output_tok_s is not None and p.itl_p95 is not None]
        if r.status == "failed" or not pts:
            continue
        pts.sort(key=lambda p: p.output_tok_s)
        ax.plot([p.output_tok_s for p in pts], [p.itl_p95 * 1000 for p in pts], "o-", color=colors[r.name],
                label=f"{r.name} ({r.method})")
        for p in pts:
            ax.annotate(p.load, (p.output_tok_s, p.itl_p95 * 1000), textcoords="offset points", xytext=(4, -10),
                        fontsize=7, color=colors[r.name])
    _log_if_wide(ax)
    ax.set_xlabel("output tokens/s")
    ax.set_ylabel("ITL p95 (ms)")
    ax.set_title("Latency vs throughput across load points")
    ax.legend(fontsize=8, loc="best")


def _ttft_vs_concurrency(ax, report: "Report") -> None:
    colors = _colors(report)
    xs_all: set[int] = set()
    for r in report.rows:
        pts = sorted((p for p in r.points if p.profile == "concurrency" and p.ttft_p50 is not None),
                     key=lambda p: p.concurrency)
        if r.status == "failed" or not pts:
            continue
        xs = [p.concurrency for p in pts]
        xs_all.update(xs)
        ax.plot(xs, [p.ttft_p50 * 1000 for p in pts], "o-", color=colors[r.name], label=f"{r.name} p50")
        p95 = [(p.concurrency, p.ttft_p95 * 1000) for p in pts if p.ttft_p95 is not None]
        if p95:
            ax.plot(*zip(*p95), "s--", color=colors[r.name], alpha=0.6, label=f"{r.name} p95")
    if len(xs_all) > 1 and max(xs_all) / min(xs_all) >= 4:
        ax.set_xscale("log", base=2)  # concurrency sweeps double: equal steps on a log2 axis
    ax.set_xticks(sorted(xs_all), [str(x) for x in sorted(xs_all)])
    _log_if_wide(ax)
    ax.set_xlabel("concurrency")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title("Time to first token vs concurrency")
    ax.legend(fontsize=8, loc="best", ncol=2)


def _latency_vs_offered_load(ax_ttft, ax_tpot, report: "Report") -> None:
    """Each variant's ladder (its capacity search's steady-state points, saturated ones left out: their
    percentiles grow with the window's length), p95 solid and p99 dashed, against the offered load;
    every limit of the measured SLO and the tiers drawn as a horizontal line, so a reader sees where
    each precision stops."""
    from ..measure.stats.point import OVERLOADED

    colors = _colors(report)
    for r in report.rows:
        pts = sorted((p for p in r.ladder if p.verdict not in (None, *OVERLOADED)),
                     key=lambda p: p.rate if p.rate is not None else p.concurrency or 0)
        if not pts:
            continue
        xs = [p.rate if p.rate is not None else p.concurrency for p in pts]
        for ax, metric in ((ax_ttft, "ttft"), (ax_tpot, "tpot")):
            for q, style in (("p95", "o-"), ("p99", "s--")):
                ys = [(x, getattr(p, f"{metric}_{q}") * 1000) for x, p in zip(xs, pts) if getattr(p, f"{metric}_{q}")]
                if ys:
                    ax.plot(*zip(*ys), style, color=colors[r.name], alpha=1.0 if q == "p95" else 0.6,
                            label=f"{r.name} {q}")
    limits: dict[tuple[str, float], list[str]] = {}
    for t in report.tiers:
        for term in t.slo.terms:
            if term.metric in ("ttft", "tpot"):
                limits.setdefault((term.metric, term.limit_s), []).append(f"{t.name} {term.stat}")
    for (metric, limit), names in limits.items():
        ax = ax_ttft if metric == "ttft" else ax_tpot
        ax.axhline(limit * 1000, color="#444", linewidth=0.9, linestyle=":")
        ax.annotate(", ".join(names), (0.01, limit * 1000), xycoords=("axes fraction", "data"), fontsize=7,
                    color="#444", va="bottom")
    axis = "offered load (req/s)" if any(p.rate is not None for r in report.rows for p in r.ladder) else "concurrency"
    for ax, what in ((ax_ttft, "TTFT"), (ax_tpot, "TPOT")):
        _log_if_wide(ax)
        ax.set_xlabel(axis)
        ax.set_ylabel(f"{what} (ms)")
        ax.set_title(f"{what} p95 / p99 vs offered load")
    if ax_tpot.get_legend_handles_labels()[0]:
        ax_tpot.legend(fontsize=7, loc="best", ncol=2)


def _log_if_wide(ax) -> None:
    """Log y when the curves span more than 20x: one slow variant (FP8 on a CPU without FP8
    kernels) would otherwise flatten every other curve onto the axis."""
    ys = [y for line in ax.get_lines() for y in line.get_ydata() if y > 0]
    if ys and max(ys) / min(ys) > 20:
        ax.set_yscale("log")
