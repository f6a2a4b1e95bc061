"""Inference: runs an engine behind the bus and streams deltas to `stream.raw.<rid>`."""
