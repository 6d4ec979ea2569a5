"""Searching the load axis: `quantkit bench` (the knee), capacity under an SLO, its load profiles, and capacity re-derived from a stored ladder."""
