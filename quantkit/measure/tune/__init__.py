"""`quantkit tune`: vLLM's serving knobs searched for the highest capacity under an SLO."""
