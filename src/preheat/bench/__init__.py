"""Benchmarks, demo and (later) trace replay and reports."""
