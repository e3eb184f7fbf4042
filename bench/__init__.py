"""Strata benchmarks: side-by-side throughput/latency/RSS against the Tansu peer. Entry point: bench.run."""
