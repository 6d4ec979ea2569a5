"""Measuring a served model under load: the client (loadgen), what it sends (workload), what a
point is (point, slo), searches over the load axis (search), bench and tune."""
