"""zoo.launch."""
