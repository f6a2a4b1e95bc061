"""The `/chat` protocol, and resuming or stopping a stream by rid."""
