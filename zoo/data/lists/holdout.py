"""Which videos of a labelled set are held out for validation, so that the choice never moves.

A video's side is decided by a hash of its group key and the seed alone, not by a shuffle of the
whole set: adding, removing or renaming other videos moves nothing else between train and val,
so a model trained on one version of the lists is never validated on its own training videos
after the folder has grown. Videos of one group (clips cut from the same recording, named by a
regular expression) stay on one side, so that near-copies of a training clip are not validated
on. Like the rest of zoo/data/lists, this imports neither torch nor numpy.
"""

from __future__ import annotations

import hashlib
import re
from typing import Dict, List, Optional, Sequence, Tuple

from .records import VideoRecord


class GroupPatternError(ValueError):
    """A group pattern that does not compile or matches no path."""


def _draw(seed: int, key: str) -> float:
    """A number in [0, 1) fixed by ``seed`` and ``key`` (the same on every machine and Python)."""
    digest = hashlib.sha256(f"{seed}\0{key}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def group_keys(paths: Sequence[str], pattern: Optional[str]) -> Tuple[List[str], int]:
    """The group key of each path: the part ``pattern`` matches (``re.search``; its first
    capture group when it has one), or the path itself where there is no pattern or no match.

    Returns:
        ``(keys, matched)``: ``matched`` counts the paths the pattern matched.

    Raises:
        GroupPatternError: ``pattern`` does not compile, or it matches none of ``paths``.
    """
    if not pattern:
        return list(paths), 0
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise GroupPatternError(f"--group {pattern!r} is not a regular expression: {e}") from e
    keys, matched = [], 0
    for path in paths:
        found = compiled.search(path)
        if found is None:
            keys.append(path)
            continue
        matched += 1
        keys.append("\0group\0" + (found.group(1) if compiled.groups else found.group(0)))
    if paths and not matched:
        raise GroupPatternError(
            f"--group {pattern!r} matches none of the {len(paths)} video paths (e.g. "
            f"{paths[0]!r}); it is searched in the path relative to --root")
    return keys, matched


def hold_out(records: Sequence[VideoRecord], fraction: float, seed: int,
             keys: Optional[Sequence[str]] = None
             ) -> Tuple[List[VideoRecord], List[VideoRecord]]:
    """Split ``records`` into ``(train, val)`` with about ``fraction`` of each class in val.

    A group is in val when its draw is below ``fraction``. A class with videos of two or more
    groups always gets a val and a train group: where the draws gave it none, its group with the
    lowest draw goes to val (or its highest to train). Only a change inside such a small class
    can move one of its groups.

    Args:
        records: Labelled videos.
        fraction: Share held out, in [0, 1).
        seed: Picks which groups are held out.
        keys: Each record's group (:func:`group_keys`); None = every video is its own group.
    """
    keys = [r.path for r in records] if keys is None else list(keys)
    draws = {key: _draw(seed, key) for key in keys}
    held: Dict[str, bool] = {key: draw < fraction for key, draw in draws.items()}
    if fraction > 0:
        by_class: Dict[int, List[str]] = {}
        for record, key in zip(records, keys):
            by_class.setdefault(record.label, []).append(key)
        for label in sorted(by_class):
            own = sorted(set(by_class[label]), key=lambda k: (draws[k], k))
            if len(own) < 2:
                continue
            if not any(held[k] for k in own):
                held[own[0]] = True
            elif all(held[k] for k in own):
                held[own[-1]] = False
    train = [r for r, k in zip(records, keys) if not held[k]]
    val = [r for r, k in zip(records, keys) if held[k]]
    return train, val
