"""characters."""
