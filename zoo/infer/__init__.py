"""zoo.infer."""
