"""Measuring a served model under load, in layers (each imports only those below it): tune (the
knob search), capacity (bench, capacity under an SLO, stored ladders), loadgen (the load generator),
observe (the server's /metrics and GPUs), stats (a point, its statistics and its SLO verdict)."""
