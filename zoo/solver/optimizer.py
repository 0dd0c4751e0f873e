"""SGD or AdamW with parameter groups: no weight decay on norm parameters and biases, and an
optional LR multiplier for the backbone (every parameter outside the classifier head)."""

from __future__ import annotations

from typing import Iterable, Optional, Set

import torch
import torch.nn as nn

_NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)


def param_groups(model: nn.Module, weight_decay: float, head_ids: Optional[Set[int]] = None,
                 backbone_lr_mult: float = 1.0) -> list:
    """Split trainable parameters by (decay or not) x (head or backbone).

    Each group carries ``lr_mult`` (1 for the head, ``backbone_lr_mult`` for the rest), which the
    LR schedule multiplies in. Empty groups are dropped.
    """
    head_ids = head_ids or set()
    buckets = {}
    seen = set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            no_decay = isinstance(module, _NORM_TYPES) or name == "bias"
            is_head = id(p) in head_ids
            buckets.setdefault((no_decay, is_head), []).append(p)
    groups = []
    for (no_decay, is_head), params in sorted(buckets.items()):
        groups.append({
            "params": params,
            "weight_decay": 0.0 if no_decay else weight_decay,
            "lr_mult": 1.0 if is_head else backbone_lr_mult,
        })
    return groups


def build_optimizer(cfg, model: nn.Module,
                    head_params: Iterable[nn.Parameter] = ()) -> torch.optim.Optimizer:
    """CONFIG.TRAIN.OPTIMIZER (SGD with MOMENTUM, or AdamW) with LR, W_DECAY, BACKBONE_LR_MULT.

    Args:
        cfg: The config.
        model: The bare model (not DDP-wrapped).
        head_params: The classifier's parameters (they keep LR multiplier 1).
    """
    train = cfg.CONFIG.TRAIN
    groups = param_groups(model, train.W_DECAY, {id(p) for p in head_params},
                          train.BACKBONE_LR_MULT)
    if not groups:
        raise ValueError("the model has no trainable parameters (is everything frozen?)")
    if train.OPTIMIZER == "AdamW":
        return torch.optim.AdamW(groups, lr=train.LR)
    return torch.optim.SGD(groups, lr=train.LR, momentum=train.MOMENTUM)
