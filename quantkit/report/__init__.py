"""The report: gather (store -> variants), build (variants -> Report), render (Markdown, HTML,
JSON), plots, and the model card. `from quantkit import report` gives the build and render API."""

from .build import SCHEMA_VERSION, Report, Row, Variant, build_report, decode_bound
from .figures import lookup_bandwidth, pareto_front
from .render import DASH, fmt, fmt_bytes, fmt_ms, fmt_pm, read_report, render_html, render_markdown, tables, write_report

__all__ = ["DASH", "SCHEMA_VERSION", "Report", "Row", "Variant", "build_report", "decode_bound", "fmt", "fmt_bytes",
           "fmt_ms", "fmt_pm", "lookup_bandwidth", "pareto_front", "read_report", "render_html", "render_markdown",
           "tables", "write_report"]
