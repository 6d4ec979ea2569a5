"""quantkit: quantize, serve, measure and report LLM precision versus throughput."""

__version__ = "0.1.0"
