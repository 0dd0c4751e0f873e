"""Sharded training (``DDP_CONFIG.STRATEGY fsdp``): PyTorch's FSDP2 ``fully_shard`` applied to each
of the model's shard units, then to the root, and full-state checkpoints of a sharded model.

A shard unit is a module whose weights are gathered together just before its forward and freed
after it: a transformer block, a residual stage. :func:`shard_units` finds them:

1. ``model.shard_units()`` when the model defines it (a user's model opts in this way);
2. else the children of a ``blocks`` ModuleList (VideoMAE, MViT);
3. else the stages in a ``features`` Sequential (torchvision's Video Swin and S3D);
4. else the residual stages: children named ``res2``.. / ``layer1``.. (also ``slow_res2``,
   ``fast_res2``.., ``fuse_res2``.. in SlowFast);
5. else none: the root alone is one unit (every weight gathered for the whole forward).

Checkpoints stay one full state dict in the DDP layout: the model's tensors by name, the
optimizer's state by parameter index, as ``torch.optim.Optimizer.state_dict`` writes them.
:func:`model_state` / :func:`optimizer_state` gather them (a collective; the tensors land on
rank 0's CPU, other ranks get empty dicts); :func:`load_model_state` / :func:`load_optimizer_state`
give each rank its shard of such a dict.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Dict, List

import torch
import torch.nn as nn

from ..utils.errors import UserError

FSDP_MIN_TORCH = "2.4"
_STAGE = re.compile(r"^(?:\w+_)?(?:res|layer)\d+$")


class ShardingUnavailable(UserError, RuntimeError):
    """This torch has no FSDP2 (``fully_shard``)."""


def _fsdp2():
    """``(fully_shard, CPUOffloadPolicy)`` from wherever this torch keeps them (public since
    torch 2.6, ``torch.distributed._composable.fsdp`` in 2.4 and 2.5)."""
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard
    except ImportError:
        try:
            from torch.distributed._composable.fsdp import CPUOffloadPolicy, fully_shard
        except ImportError:
            raise ShardingUnavailable(
                f"DDP_CONFIG.STRATEGY fsdp needs torch >= {FSDP_MIN_TORCH} (FSDP2's fully_shard); "
                f"this is torch {torch.__version__}: upgrade torch or set DDP_CONFIG.STRATEGY ddp"
            ) from None
    return fully_shard, CPUOffloadPolicy


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model`` is an FSDP2 module (its root was passed to ``fully_shard``)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        try:
            from torch.distributed._composable.fsdp import FSDPModule
        except ImportError:
            return False
    return isinstance(model, FSDPModule)


def shard_units(model: nn.Module) -> List[nn.Module]:
    """The modules :func:`shard_model` shards one by one before the root (see the module
    docstring for the order of the rules); only those holding parameters."""
    if callable(getattr(model, "shard_units", None)):
        units = list(model.shard_units())
    elif isinstance(getattr(model, "blocks", None), (nn.ModuleList, nn.Sequential)):
        units = list(model.blocks)
    elif isinstance(getattr(model, "features", None), nn.Sequential):
        units = list(model.features)
    else:
        units = [m for name, m in model.named_children() if _STAGE.match(name)]
    return [m for m in units if any(True for _ in m.parameters())]


def shard_model(model: nn.Module, device: torch.device, cpu_offload: bool,
                logger: logging.Logger) -> nn.Module:
    """Shard ``model`` (on ``device``, in place) over the default process group: each shard unit,
    then the root, starting from rank 0's weights on every rank (as DDP). With ``cpu_offload``
    the shards, their gradients and the optimizer step live in CPU memory.

    Returns:
        The same module, now an FSDP2 module.
    """
    fully_shard, offload_policy = _fsdp2()
    kwargs: Dict[str, Any] = {}
    if cpu_offload:
        # Pinned memory needs a CUDA driver; without one the copies are plain.
        kwargs["offload_policy"] = offload_policy(pin_memory=torch.cuda.is_available())
    # FSDP2 shards contiguous parameters only: a channels-last conv weight goes back to the
    # standard layout (the clips may still arrive channels-last).
    strided = [p for p in model.parameters() if not p.is_contiguous()]
    with torch.no_grad():
        for p in strided:
            p.data = p.data.contiguous()
    if strided:
        logger.info("FSDP2 shards contiguous weights: %d channels-last weights made contiguous",
                    len(strided))
    _same_start_on_every_rank(model)
    units = shard_units(model)
    for unit in units:
        fully_shard(unit, **kwargs)
    fully_shard(model, **kwargs)
    logger.info("weights sharded with FSDP2 over %d units + the root%s", len(units),
                ", offloaded to CPU memory" if cpu_offload else "")
    return model


def _same_start_on_every_rank(model: nn.Module) -> None:
    """Rank 0's parameters and buffers on every rank, as DDP copies them when it wraps a model:
    each rank seeds its own random streams (SEED + rank), so freshly initialised weights (a model
    from scratch, a fine-tune's new head) differ between ranks, and each rank would keep its
    shard of its own."""
    import torch.distributed as dist

    seen = set()
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if id(tensor) not in seen:  # a tied weight once
                seen.add(id(tensor))
                dist.broadcast(tensor.data, src=0)


def _full_options():
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True)


def model_state(model: nn.Module) -> Dict[str, torch.Tensor]:
    """The full model state dict of a sharded model on rank 0's CPU ({} on other ranks); a
    collective: every rank calls it."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_full_options())


def _param_names(model: nn.Module, optimizer: torch.optim.Optimizer) -> List[str]:
    """The name of each optimizer parameter, in the order ``Optimizer.state_dict`` numbers them."""
    names = {id(p): name for name, p in model.named_parameters()}
    return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]


def optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> Dict[str, Any]:
    """The full optimizer state dict of a sharded model, keyed by parameter index as an unsharded
    ``optimizer.state_dict()`` is, on rank 0's CPU ({} on other ranks); a collective."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    full = get_optimizer_state_dict(model, optimizer, options=_full_options())
    if not full:
        return {}
    state = {i: full["state"][name] for i, name in enumerate(_param_names(model, optimizer))
             if name in full["state"]}
    groups = optimizer.state_dict()["param_groups"]  # hyper-parameters, params by index
    return {"state": state, "param_groups": groups}


def load_model_state(model: nn.Module, state: Dict[str, torch.Tensor]) -> None:
    """Load a full model state dict (every rank passes it) into a sharded model."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))


def load_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer,
                         state: Dict[str, Any]) -> None:
    """Load a full optimizer state dict keyed by parameter index (every rank passes it) into the
    optimizer of a sharded model."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_optimizer_state_dict,
    )

    names = _param_names(model, optimizer)
    by_name = {"state": {names[int(i)]: s for i, s in state["state"].items()},
               "param_groups": [dict(g, params=[names[int(i)] for i in g["params"]])
                                for g in state["param_groups"]]}
    set_optimizer_state_dict(model, optimizer, by_name,
                             options=StateDictOptions(full_state_dict=True))
    # The hyper-parameters as saved (it hands some back as lists where they were tuples).
    for group, saved in zip(optimizer.param_groups, state["param_groups"]):
        group.update({k: v for k, v in saved.items() if k != "params"})
