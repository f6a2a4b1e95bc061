"""Admin and ops routes: keys, models, requests and replay, health and metrics."""
