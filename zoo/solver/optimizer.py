"""SGD or AdamW with two parameter groups: weight decay on weights, none on norm parameters and biases."""

from __future__ import annotations

import torch
import torch.nn as nn

_NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)


def param_groups(model: nn.Module, weight_decay: float) -> list:
    """Split trainable parameters into decayed (conv/linear weights) and undecayed (norm, bias)."""
    decay, no_decay = [], []
    seen = set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            if isinstance(module, _NORM_TYPES) or name == "bias":
                no_decay.append(p)
            else:
                decay.append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def build_optimizer(cfg, model: nn.Module) -> torch.optim.Optimizer:
    """CONFIG.TRAIN.OPTIMIZER (SGD with MOMENTUM, or AdamW) with LR and W_DECAY."""
    train = cfg.CONFIG.TRAIN
    groups = param_groups(model, train.W_DECAY)
    if train.OPTIMIZER == "AdamW":
        return torch.optim.AdamW(groups, lr=train.LR)
    return torch.optim.SGD(groups, lr=train.LR, momentum=train.MOMENTUM)
