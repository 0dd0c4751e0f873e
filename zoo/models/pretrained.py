"""Loading a local zoo checkpoint into a model, re-initialising a head whose class count differs."""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from typing import Dict

import torch
import torch.nn as nn

logger = logging.getLogger(__name__)


def read_state_dict(path: str) -> Dict[str, torch.Tensor]:
    """The model weights in a zoo checkpoint (or a bare state dict), ``module.`` stripped."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"pretrained checkpoint {path!r} does not exist")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # an unpickling error names the forbidden global
        raise RuntimeError(
            f"{path}: refused to load ({str(e).splitlines()[0]}); only plain tensor checkpoints "
            "are accepted (torch.load(weights_only=True))"
        ) from None
    state = obj.get("model", obj) if isinstance(obj, dict) else obj
    if not isinstance(state, dict):
        raise RuntimeError(f"{path}: holds no state dict (found {type(state).__name__})")
    return {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}


def load_pretrained(model: nn.Module, path: str) -> None:
    """Load ``path`` into ``model``; tensors whose shapes differ only in the class count are skipped.

    Any other missing, unexpected or mismatched key is an error that names the keys.
    """
    state = read_state_dict(path)
    own = model.state_dict()
    skipped = defaultdict(list)
    load = {}
    mismatched = []
    for k, v in state.items():
        if k not in own:
            continue
        if own[k].shape == v.shape:
            load[k] = v
        elif own[k].dim() == v.dim() and own[k].shape[1:] == v.shape[1:] and own[k].dim() <= 2:
            # A classifier weight/bias whose first dim (classes) differs: keep the fresh init.
            skipped[k.rsplit(".", 1)[0]].append(f"{k.rsplit('.', 1)[1]} {tuple(v.shape)}")
        else:
            mismatched.append(f"{k} {tuple(v.shape)} vs model {tuple(own[k].shape)}")
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    if mismatched or missing or unexpected:
        parts = []
        if mismatched:
            parts.append("shape mismatch: " + ", ".join(mismatched[:8]))
        if missing:
            parts.append(f"missing from checkpoint ({len(missing)}): " + ", ".join(missing[:8]))
        if unexpected:
            parts.append(f"not in model ({len(unexpected)}): " + ", ".join(unexpected[:8]))
        raise RuntimeError(f"{path} does not fit {type(model).__name__}: " + "; ".join(parts))
    model.load_state_dict(load, strict=False)
    for group, items in skipped.items():
        logger.warning("%s: re-initialised %s (checkpoint had %s)", path, group, ", ".join(items))
    logger.info("loaded %d tensors from %s", len(load), path)
