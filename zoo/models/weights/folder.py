"""The files a weights folder holds beside its tensors, as Hugging Face's ``save_pretrained``
writes them (``config.json``, ``preprocessor_config.json``, a shard index): found and read as
JSON objects, with one-line errors naming the file."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Type


def file_beside(path: str, name: str) -> Optional[str]:
    """The file ``name`` in the folder ``path``, or beside the file ``path``; None if absent."""
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    found = os.path.join(folder, name)
    return found if os.path.isfile(found) else None


def read_json_object(path: str, error: Type[Exception], fix: str = "") -> Dict[str, Any]:
    """The JSON object in ``path``.

    Raises:
        error: the file cannot be read, is not JSON, or holds another JSON value; the message
            names the file and ends with ``fix`` (what the user can do instead) where given.
    """
    then = f"; {fix}" if fix else ""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError) as e:
        raise error(f"{path}: not a readable JSON file ({e}){then}") from None
    if not isinstance(obj, dict):
        raise error(f"{path}: holds {type(obj).__name__}, not a JSON object{then}")
    return obj
