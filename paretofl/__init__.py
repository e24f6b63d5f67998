"""paretofl."""
