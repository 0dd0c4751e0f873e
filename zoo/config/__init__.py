"""Configuration: commented defaults, loading with validation, and one-line errors."""

from .config import cfg_to_yaml, get_cfg, load_config, merge_overrides
from .validation import ConfigError, validate_config

__all__ = [
    "ConfigError", "cfg_to_yaml", "get_cfg", "load_config", "merge_overrides", "validate_config",
]
