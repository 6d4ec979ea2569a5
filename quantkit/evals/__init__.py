"""Accuracy: lm-eval against the served checkpoint (run), tasks and suites (tasks), the results
schema (results), and recovery and gates (gates)."""
