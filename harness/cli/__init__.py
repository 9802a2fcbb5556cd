"""Command lines: the only place that composes steps (run, then judge)."""
