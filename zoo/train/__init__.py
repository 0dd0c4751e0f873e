"""zoo.train."""
