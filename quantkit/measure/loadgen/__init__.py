"""The load generator: prompts and arrivals, worker processes that stream requests, and what each request is credited with."""
