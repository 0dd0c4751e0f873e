"""Walking configs as trees: flatten to dotted keys, diff two configs, look up a dotted key, and
parse a command-line literal.

These work on a yacs ``CfgNode`` and on the plain nested dicts ``yaml.safe_load`` returns (a
``CfgNode`` is a dict), so the launcher's config agreement, the resume check and the config
converters all read configs the same way.
"""

from __future__ import annotations

import ast
import copy
from typing import Any, Dict, Iterable, List, Tuple

# Stands for a key one side of a diff does not have.
MISSING = "<missing>"


def flatten_cfg(node: Any, prefix: str = "") -> Dict[str, Any]:
    """The leaves of a nested mapping as ``{"CONFIG.TRAIN.LR": 0.1, ...}``, in tree order.

    Tuples become lists, so a config compares equal to its YAML round trip. An empty section has
    no leaves and so no entry.
    """
    out: Dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out.update(flatten_cfg(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return out


def diff_cfg(
    old: Any, new: Any, ignore: Iterable[str] = (), missing: Any = MISSING
) -> List[Tuple[str, Any, Any]]:
    """The leaves that differ between two configs, as ``(key, old value, new value)`` by key.

    Args:
        old: A nested mapping, or one already flattened by :func:`flatten_cfg` (flattening a flat
            mapping changes nothing).
        new: Same.
        ignore: Keys, or key prefixes ending in ``.``, left out of the comparison. A prefix
            without the dot matches every key that starts with it (``"CONFIG.DATA.TEST_"``).
        missing: The value reported for a key one side does not have.
    """
    a, b = flatten_cfg(old), flatten_cfg(new)
    skip = tuple(ignore)
    out = []
    for key in sorted(set(a) | set(b)):
        if skip and key.startswith(skip):
            continue
        va, vb = a.get(key, missing), b.get(key, missing)
        if va != vb:
            out.append((key, va, vb))
    return out


def lookup_key(node: Any, key: str, default: Any = KeyError) -> Any:
    """The value at dotted ``key`` (``"CONFIG.DATA.CLIP_LEN"``).

    Returns ``default`` when a part of the path is absent; without a default, raises KeyError.
    """
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            if default is KeyError:
                raise KeyError(key)
            return default
        node = node[part]
    return node


def to_dict(node: Any) -> Any:
    """A plain nested-dict copy of a config (what YAML dumping needs)."""
    if isinstance(node, dict):
        return {k: to_dict(v) for k, v in node.items()}
    return copy.deepcopy(node)


def parse_literal(text: str) -> Any:
    """Read a command-line value the way yacs does: a Python literal, else the plain string.

    ``"8"`` -> 8, ``"False"`` -> False, ``"[0.5, 0.5]"`` -> a list, ``"1e-4"`` -> 0.0001,
    ``"resnet50"`` -> ``"resnet50"``.
    """
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
