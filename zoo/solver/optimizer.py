"""SGD or AdamW with parameter groups: no weight decay on every parameter of at most one
dimension (biases, norm scales and shifts, layer-scale vectors, VideoMAE's ``q_bias`` /
``v_bias``: the rule of timm's ``param_groups_weight_decay``, VideoMAE and PySlowFast's
``ZERO_WD_1D_PARAM``) and on the parameters a model names in ``no_weight_decay()`` (timm's
convention: e.g. MViT's positions and class token), and an optional LR multiplier for the
backbone (every parameter outside the classifier head).

Layer-wise LR decay (``layer_decay`` > 0, BEiT's and VideoMAE's fine-tuning recipe) scales the LR
of a parameter in layer ``i`` by ``layer_decay ** (num_layers - 1 - i)``: the model names the
layers through ``model.layer_id(name)`` and ``model.num_layers()`` (zoo.models.blockwise), so the
last layer (norm, head) keeps the full LR and layer 0 (stem / patch embedding) gets the smallest.
The scale multiplies the backbone multiplier; the LR schedule multiplies in the product
(``lr_mult``)."""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Optional, Set

import torch
import torch.nn as nn

from ..utils.env import torch_at_least
from ..utils.errors import UserError


class LayerDecayError(UserError, ValueError):
    """Layer-wise LR decay asked of a model that does not name its layers."""


def layer_scales(model: nn.Module, layer_decay: float, model_name: str = "") -> Callable:
    """``name -> LR scale`` of layer-wise decay: ``layer_decay ** (num_layers - 1 - layer)``."""
    if not (callable(getattr(model, "layer_id", None))
            and callable(getattr(model, "num_layers", None))):
        name = model_name or type(model).__name__
        raise LayerDecayError(f"CONFIG.TRAIN.LAYER_DECAY {layer_decay}: model {name} does not "
                              "name its layers (no layer_id()/num_layers()); set LAYER_DECAY 0")
    try:
        top = model.num_layers() - 1
    except NotImplementedError:
        raise LayerDecayError(f"CONFIG.TRAIN.LAYER_DECAY {layer_decay}: model "
                              f"{model_name or type(model).__name__} does not name its layers; "
                              "set LAYER_DECAY 0") from None
    return lambda name: layer_decay ** (top - model.layer_id(name))


def no_decay_names(model: nn.Module) -> Set[str]:
    """The names ``model.no_weight_decay()`` lists (none without the method): each is a full
    dotted parameter name (timm's convention, ``"encoder.pos_embed"``) or a last component
    (``"pos_embed"``: every parameter of that name)."""
    method = getattr(model, "no_weight_decay", None)
    return set(method()) if callable(method) else set()


def skips_weight_decay(name: str, param: torch.Tensor, skip: Set[str]) -> bool:
    """Whether the parameter ``name`` (its full dotted name) trains without weight decay: it has
    at most one dimension, or ``skip`` (:func:`no_decay_names`) names it in full or by its last
    component."""
    return param.ndim <= 1 or name in skip or name.rpartition(".")[2] in skip


def param_groups(model: nn.Module, weight_decay: float, head_ids: Optional[Set[int]] = None,
                 backbone_lr_mult: float = 1.0, layer_decay: float = 0.0,
                 model_name: str = "") -> list:
    """Split trainable parameters by (decay or not) x (head or backbone) x (layer, with
    ``layer_decay`` > 0).

    Each group carries ``lr_mult`` (1 for the head, ``backbone_lr_mult`` for the rest, times the
    layer's scale), which the LR schedule multiplies in. Empty groups are dropped.
    """
    head_ids = head_ids or set()
    scale_of = layer_scales(model, layer_decay, model_name) if layer_decay > 0 else None
    skip = no_decay_names(model)
    buckets = {}
    for name, p in model.named_parameters():  # a parameter shared by two modules comes once
        if not p.requires_grad:
            continue
        no_decay = skips_weight_decay(name, p, skip)
        is_head = id(p) in head_ids
        scale = scale_of(name) if scale_of else 1.0
        buckets.setdefault((no_decay, is_head, scale), []).append(p)
    groups = []
    for (no_decay, is_head, scale), params in sorted(buckets.items()):
        groups.append({
            "params": params,
            "weight_decay": 0.0 if no_decay else weight_decay,
            "lr_mult": (1.0 if is_head else backbone_lr_mult) * scale,
        })
    return groups


def make_optimizer(name: str, groups: list, lr: float, momentum: float = 0.9,
                   weight_decay: float = 0.0, nesterov: bool = False) -> torch.optim.Optimizer:
    """``torch.optim.SGD`` (with ``momentum``, Nesterov's when ``nesterov``) or ``AdamW``, run
    by its fused implementation.

    The fused kernels (CPU and CUDA, torch >= 2.4) make one pass over each parameter instead of
    a few small kernels per tensor: for SlowFast-R50's 34.6M parameters on 2 CPU cores, an SGD
    step takes ~15 ms instead of ~23 ms (PyTorch's per-tensor default on CPU). Where fused is
    not supported, the multi-tensor ("foreach") implementation is used, then the plain one. The
    update rule and the state dict are the same for all three, so checkpoints move freely
    between them.
    """
    if name not in ("SGD", "AdamW"):
        raise ValueError(f"unknown optimizer {name!r}: use 'SGD' or 'AdamW'")
    cls = torch.optim.AdamW if name == "AdamW" else torch.optim.SGD
    kwargs: Dict[str, Any] = {"lr": lr, "weight_decay": weight_decay}
    if name == "SGD":
        kwargs.update(momentum=momentum, nesterov=nesterov)
    fast_kinds = [{"fused": True}, {"foreach": True}]
    if not _fused_runs_on(groups):
        fast_kinds.pop(0)
    optimizer = None
    for fast in fast_kinds:
        try:
            optimizer = cls(groups, **kwargs, **fast)
            break
        except (RuntimeError, TypeError, ValueError):  # not supported for these tensors/devices
            continue
    if optimizer is None:
        optimizer = cls(groups, **kwargs)
    optimizer.register_load_state_dict_post_hook(state_in_param_layout)
    return optimizer


def state_in_param_layout(optimizer: torch.optim.Optimizer) -> int:
    """Give every per-parameter state tensor (momentum, Adam moments) its parameter's strides;
    registered by :func:`make_optimizer` to run after each ``optimizer.load_state_dict``.

    ``load_state_dict`` keeps the strides a state tensor was saved with, while the fused kernels
    (CPU at least) walk a parameter, its gradient and its state as flat memory in the parameter's
    order. State saved by a model in another layout (contiguous weights written by FSDP2 or by a
    run whose ``MEMORY_FORMAT auto`` resolved to contiguous, loaded into channels-last weights,
    or the reverse) would then be read element for wrong element: the values compare equal but
    the next steps differ. Parameters sharded as DTensors are left alone (their local shards and
    state are contiguous).

    Returns:
        The number of state tensors copied into their parameter's layout.
    """
    moved = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state.get(p)
            if not state or hasattr(p, "to_local"):
                continue
            for name, value in state.items():
                if (torch.is_tensor(value) and value.shape == p.shape
                        and value.stride() != p.stride()):
                    state[name] = torch.empty_like(p, dtype=value.dtype,
                                                   device=value.device).copy_(value)
                    moved += 1
    return moved


def _fused_runs_on(groups: list) -> bool:
    """False where a CPU parameter would meet a torch without CPU fused kernels: torch 2.3 builds
    the fused optimizer for CPU parameters and fails only at its first step."""
    if torch_at_least(2, 4):  # CPU fused kernels came in 2.4
        return True
    params = (p for g in groups for p in (g["params"] if isinstance(g, dict) else [g]))
    return all(p.device.type != "cpu" for p in params)


def build_optimizer(cfg, model: nn.Module,
                    head_params: Iterable[nn.Parameter] = ()) -> torch.optim.Optimizer:
    """CONFIG.TRAIN.OPTIMIZER (SGD with MOMENTUM and NESTEROV, or AdamW) with LR, W_DECAY,
    BACKBONE_LR_MULT and LAYER_DECAY.

    Args:
        cfg: The config.
        model: The bare model (not DDP-wrapped).
        head_params: The classifier's parameters (they keep LR multiplier 1).
    """
    train = cfg.CONFIG.TRAIN
    groups = param_groups(model, train.W_DECAY, {id(p) for p in head_params},
                          train.BACKBONE_LR_MULT, train.LAYER_DECAY, cfg.CONFIG.MODEL.NAME)
    if not groups:
        raise ValueError("the model has no trainable parameters (is everything frozen?)")
    # Each group carries its own weight decay; the default passed here is never used.
    return make_optimizer(train.OPTIMIZER, groups, train.LR, train.MOMENTUM,
                          nesterov=bool(train.NESTEROV))
