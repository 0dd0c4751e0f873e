"""Reading config YAML files, with ``_BASE_`` inheritance (detectron2's convention).

A file may name another with ``_BASE_: path.yaml`` at its top level (a path relative to the file
that names it, or absolute). The base is read first, itself following its own ``_BASE_``, and then
the file's keys merge over it: sections merge key by key, any other value (lists included)
replaces the base's. A file that ends up including itself is refused with one line naming the
chain.
"""

from __future__ import annotations

import codecs
import os
from typing import Any, Callable, Dict, List, Optional

import yaml

from .validation import ConfigError

BASE_KEY = "_BASE_"


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, first: int, again: int) -> None:
        super().__init__(f"{key!r} twice")
        self.key, self.first, self.again = key, first, again


class DuplicateKeyError(ConfigError):
    """A key set twice in one mapping of ``path``; ``data`` is the file as YAML's loaders read it
    (the last wins), for a caller that tells another project's file by it (PySlowFast's own
    files have such keys, and their refusal names the converter)."""

    def __init__(self, message: str, path: str, data: Any) -> None:
        super().__init__(message)
        self.path, self.data = path, data


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key set twice in one mapping (YAML's loaders keep the last
    silently: a section written twice loses all of the first)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: Dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark.line + 1)
                except TypeError:  # an unhashable key: the constructor below refuses it
                    continue
                if first != key_node.start_mark.line + 1:
                    raise _DuplicateKey(key, first, key_node.start_mark.line + 1)
        return super().construct_mapping(node, deep)


def read_yaml(path: str, unique_keys: bool = True) -> Any:
    """One YAML file as Python data (``{}`` when empty); a missing or broken file, or (with
    ``unique_keys``) a key set twice in one mapping, is one line."""
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} does not exist")
    if path.endswith(".py"):
        raise ConfigError(
            f"{path} is a Python file, not a YAML config: zoo does not read MMAction2 / mmengine "
            "Python configs (write the recipe as a zoo YAML: docs/migrating.md, MMAction2; their "
            "checkpoints convert with tools/convert_checkpoint.py --from mmaction2), and a file "
            "of models goes to --extra-modules")
    with open(path, "rb") as f:  # bytes: YAML's reader takes UTF-8, or UTF-16 by its mark
        try:
            return yaml.load(f, _UniqueKeyLoader if unique_keys else yaml.SafeLoader) or {}
        except _DuplicateKey as e:
            f.seek(0)
            raise DuplicateKeyError(
                f"{path} line {e.again}: {e.key!r} is set twice in one section (first on line "
                f"{e.first}), and YAML would keep only the last: merge them into one",
                path, yaml.safe_load(f)) from None
        except yaml.reader.ReaderError as e:  # not UTF-8 / UTF-16, or a control character
            raise ConfigError(f"{path}: {_reader_problem(path, e)}") from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark else ""
            raise ConfigError(f"{path}{where}: not valid YAML ({e.__class__.__name__})") from None


def _reader_problem(path: str, error: "yaml.reader.ReaderError") -> str:
    """Where and what YAML's reader refused, for a one-line error: a byte that is not UTF-8 /
    UTF-16 text, or a control character YAML does not allow."""
    with open(path, "rb") as f:
        data = f.read()
    if error.encoding != "unicode":  # a byte its encoding cannot decode (position: in bytes)
        line = data[:error.position].count(b"\n") + 1
        return (f"line {line}: not UTF-8 text (byte {error.character:#04x}): save the file as "
                "UTF-8, or convert it, e.g. iconv -f latin1 -t utf-8")
    utf16 = data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    text = data.decode("utf-16" if utf16 else "utf-8-sig", errors="replace")
    line = text[:error.position].count("\n") + 1  # (position: in characters)
    return f"line {line}: the control character {error.character:#04x} is not allowed: remove it"


def read_yaml_with_base(
    path: str, each: Optional[Callable[[Any, str], Any]] = None, _chain: Optional[List[str]] = None,
    unique_keys: bool = True,
) -> Any:
    """The mapping of ``path`` merged over its ``_BASE_`` files (recursively), without _BASE_.

    Args:
        path: The YAML file.
        each: Called as ``each(data, file)`` on every file's own mapping before it is merged
            (the VERSION upgrade: each file's keys are named as of its own VERSION).
        unique_keys: Refuse a key set twice in one mapping (False: the last wins, as other
            projects' loaders read their own files).

    Raises:
        ConfigError: a file is missing or not YAML, ``_BASE_`` is not a path, or the files
            include each other.
    """
    chain = list(_chain or [])
    real = os.path.realpath(path)
    if real in (os.path.realpath(p) for p in chain):
        names = " -> ".join(chain + [path])
        raise ConfigError(f"_BASE_ files include each other ({names}); remove one _BASE_ line")
    data = read_yaml(path, unique_keys)
    base = data.pop(BASE_KEY, None) if isinstance(data, dict) else None
    if each is not None:
        data = each(data, path)
    if base is None:
        return data
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{path}: _BASE_ = {base!r} is not allowed: expected the path of one "
                          "YAML file, relative to this file or absolute")
    base_path = os.path.expanduser(base)
    if not os.path.isabs(base_path):
        base_path = os.path.join(os.path.dirname(path), base_path)
    if not os.path.isfile(base_path):
        raise ConfigError(f"{path}: _BASE_ {base!r} does not exist (looked for {base_path}; "
                          "a relative _BASE_ is relative to the file that names it)")
    merged = read_yaml_with_base(base_path, each, chain + [path], unique_keys)
    if not isinstance(merged, dict):
        raise ConfigError(f"{base_path}: top level must be a mapping of keys (it is the _BASE_ "
                          f"of {path})")
    return merge_over(merged, data)


def merge_over(base: Dict[str, Any], data: Dict[str, Any]) -> Dict[str, Any]:
    """``data`` merged over ``base`` in place of ``base``: mappings key by key, others replace."""
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge_over(base[key], value)
        else:
            base[key] = value
    return base
