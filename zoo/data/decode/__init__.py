"""zoo.data.decode."""
