"""Continuous profiling: intervals pushed to a Pyroscope-compatible store (--push)."""
