"""The config ``VERSION``: configs written for an older key layout are upgraded, newer refused.

A YAML may say ``VERSION: n`` at its top level; one without it was written before the key existed
and is read as VERSION 1. When a key is renamed or moved, ``CURRENT_VERSION`` goes up by one and
``UPGRADES[old version]`` maps the old full key names to the new ones, so an older file (and the
config saved in an older checkpoint) still loads, with one line naming what was renamed. A file
with a VERSION this zoo does not know yet is refused: it may use keys with a meaning this zoo
would get wrong.

Spellings accepted at every version (gluoncv's ``WOLRD_URLS`` ...) are not versioned; they live in
``zoo.config.config._RENAMED_KEYS``.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List

from .validation import ConfigError

logger = logging.getLogger(__name__)

# The version of the key layout in zoo/config/defaults.py.
CURRENT_VERSION = 1

# VERSION n -> n + 1: {old full key: new full key}, e.g. {1: {"CONFIG.TRAIN.W_DECAY":
# "CONFIG.TRAIN.WEIGHT_DECAY"}}. Nothing has been renamed since VERSION 1.
UPGRADES: Dict[int, Dict[str, str]] = {}

# The version of a file that does not say (written before VERSION existed).
UNVERSIONED = 1


def file_version(data: Any, source: str) -> int:
    """The ``VERSION`` a YAML mapping declares (UNVERSIONED when it has none), checked."""
    if not isinstance(data, dict) or "VERSION" not in data:
        return UNVERSIONED
    version = data["VERSION"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ConfigError(f"{source}: VERSION = {version!r} is not allowed: expected an integer "
                          f">= 1 (this zoo writes VERSION {CURRENT_VERSION})")
    if version > CURRENT_VERSION:
        raise ConfigError(
            f"{source}: VERSION {version} is newer than this zoo understands (VERSION "
            f"{CURRENT_VERSION}); upgrade zoo, or rewrite the file for VERSION {CURRENT_VERSION}"
        )
    return version


def upgrade_config(data: Any, source: str, log: bool = True) -> Any:
    """Rename the keys of a YAML mapping from its VERSION to CURRENT_VERSION, in place.

    ``VERSION`` itself is removed from the mapping (the loaded config carries CURRENT_VERSION).
    One warning line names the renamed keys when there are any, or when the file declared an
    older VERSION explicitly.

    Raises:
        ConfigError: VERSION is newer than CURRENT_VERSION or not an integer, or a file sets a
            key under both its old and its new name.
    """
    version = file_version(data, source)
    if not isinstance(data, dict):
        return data
    declared = data.pop("VERSION", None) is not None
    renamed: List[str] = []
    for v in range(version, CURRENT_VERSION):
        for old, new in UPGRADES.get(v, {}).items():
            if _move(data, old, new, source):
                renamed.append(f"{old} -> {new}")
    if log and (renamed or (declared and version < CURRENT_VERSION)):
        what = "renamed " + ", ".join(renamed) if renamed else "no key needed renaming"
        logger.warning("%s: VERSION %d config upgraded to VERSION %d (%s); set VERSION: %d%s to "
                       "silence this", source, version, CURRENT_VERSION, what, CURRENT_VERSION,
                       " and use the new names" if renamed else "")
    return data


def _move(data: Dict[str, Any], old: str, new: str, source: str) -> bool:
    """Move the value at dotted ``old`` to dotted ``new``; False when ``old`` is absent."""
    *old_path, old_leaf = old.split(".")
    parent = data
    for part in old_path:
        parent = parent.get(part) if isinstance(parent, dict) else None
    if not isinstance(parent, dict) or old_leaf not in parent:
        return False
    value = parent.pop(old_leaf)
    *new_path, new_leaf = new.split(".")
    node = data
    for part in new_path:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{source}: {'.'.join(new_path)} must be a mapping of keys")
    if new_leaf in node:
        raise ConfigError(f"{source} sets both {old} (its VERSION's name) and {new}; keep {new}")
    node[new_leaf] = value
    return True
