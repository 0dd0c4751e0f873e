"""Loading a local zoo checkpoint into a model, re-initialising a head whose class count differs."""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from typing import Dict, Tuple

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


def head_keys(model: nn.Module) -> Tuple[str, ...]:
    """State-dict keys of the classifier: those of the last module that holds parameters."""
    last = ""
    for name, module in model.named_modules():
        if any(True for _ in module.parameters(recurse=False)):
            last = name
    prefix = f"{last}." if last else ""
    return tuple(prefix + n for n, _ in model.get_submodule(last).named_parameters(recurse=False))


def load_pretrained(model: nn.Module, path: str) -> None:
    """Load the zoo checkpoint (or bare state dict) at ``path`` into ``model``; see
    :func:`load_state` for what may differ."""
    load_state(model, read_state_dict(path), source=path)


def load_state(model: nn.Module, state: Dict[str, torch.Tensor], source: str = "state") -> None:
    """Load ``state`` into ``model``; classifier tensors (:func:`head_keys`) whose shapes differ
    only in the class count are skipped (the model keeps its fresh head) and reported, one line
    per module.

    Any other missing, unexpected or mismatched key is an error that names the keys.

    Args:
        model: The model, changed in place.
        state: Tensors by key (the model's own key names).
        source: Where ``state`` came from, for messages.
    """
    own = model.state_dict()
    head = set(head_keys(model))
    skipped = defaultdict(list)
    load = {}
    mismatched = []
    for k, v in state.items():
        if k not in own:
            continue
        if own[k].shape == v.shape:
            load[k] = v
        elif k in head and own[k].dim() == v.dim() and own[k].shape[1:] == v.shape[1:]:
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
        raise RuntimeError(f"{source} does not fit {type(model).__name__}: " + "; ".join(parts))
    model.load_state_dict(load, strict=False)
    for group, items in skipped.items():
        logger.warning("%s: re-initialised %s (checkpoint had %s)", source, group, ", ".join(items))
    logger.info("loaded %d tensors from %s", len(load), source)
