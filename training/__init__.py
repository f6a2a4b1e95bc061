"""Offline tooling that builds what the runtime ships: run from a source checkout, never imported by
``libs`` or ``services``, and not in the wheel or the Docker image."""
