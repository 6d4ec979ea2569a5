"""A load point and what it may conclude: its requests and statistics, the SLO and its tiers, the steady-state window and the confidence of its verdict."""
