"""zoo.accel."""
