"""Inference: runs an engine behind the bus and streams each engine step's text to safety_out (`stream.steps.<checker>.<producer>`)."""
