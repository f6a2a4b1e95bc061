"""Output safety: checks the answer as it streams, redacts, and stops on a blocked category."""
