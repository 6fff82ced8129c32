"""conversion."""
