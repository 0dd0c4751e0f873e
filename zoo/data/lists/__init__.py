"""zoo.data.lists."""
