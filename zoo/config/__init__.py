"""Configuration: commented defaults, loading with validation, and one-line errors.

Besides loading, this is where configs are walked: ``flatten_cfg`` / ``diff_cfg`` /
``lookup_key`` / ``parse_literal`` (zoo.config.tree), ``read_yaml_with_base`` (``_BASE_``
inheritance, zoo.config.yaml_files) and ``upgrade_config`` (older ``VERSION`` key names to
today's, zoo.config.version).
"""

from .config import cfg_to_yaml, get_cfg, load_config, merge_overrides
from .tree import diff_cfg, flatten_cfg, lookup_key, parse_literal
from .validation import ConfigError, validate_config
from .version import upgrade_config
from .yaml_files import read_yaml_with_base

__all__ = [
    "ConfigError", "cfg_to_yaml", "diff_cfg", "flatten_cfg", "get_cfg", "load_config",
    "lookup_key", "merge_overrides", "parse_literal", "read_yaml_with_base", "upgrade_config",
    "validate_config",
]
