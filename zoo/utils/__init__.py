"""Infrastructure shared by every layer: registry, rank helpers, logging, environment."""
