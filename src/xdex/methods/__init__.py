"""Method recipes built on the shared engine."""
