"""What the server saw during a point: vLLM's /metrics, the GPUs through NVML, and the bound they name."""
