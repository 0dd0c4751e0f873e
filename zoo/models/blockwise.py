"""What a training recipe asks of a network's blocks: stochastic depth, activation
checkpointing, and the layer of each parameter (for layer-wise LR decay).

Every family with residual blocks implements the same three methods (:class:`BlockwiseMixin`):

- ``set_grad_checkpointing(enable=True)`` (timm's name): each block's forward runs under
  ``torch.utils.checkpoint.checkpoint(use_reentrant=False)``, so its activations are recomputed in
  the backward pass instead of kept. The non-reentrant checkpoint restores the RNG state before
  recomputing, so dropout and drop path draw the same masks; BatchNorm layers inside a block do not
  update their running statistics a second time while recomputing.
- ``layer_id(param_name) -> int`` and ``num_layers()``: layer 0 is the input (stem, patch
  embedding, positions, class token), the last (``num_layers() - 1``) is what follows the last
  block or stage (final norm, head). ViTs count blocks, CNNs count stages (res2..res5 -> 1..4).
  Layer-wise LR decay (``zoo.solver.optimizer``) scales layer ``i`` by
  ``decay ** (num_layers() - 1 - i)``.

Stochastic depth (``drop_path``, a builder argument of every such family) is linear over depth:
block ``i`` of ``N`` drops its residual branch with probability ``rate * i / (N - 1)``
(:func:`linear_rates`).
"""

from __future__ import annotations

import contextlib
import re
from functools import partial
from typing import Iterable, List, Sequence

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

__all__ = ["BlockwiseMixin", "StageLayersMixin", "drop_path_module", "linear_rates",
           "set_checkpointing", "set_drop_path"]


def linear_rates(rate: float, n: int) -> List[float]:
    """Drop-path probability of each of ``n`` blocks: 0 at the first, ``rate`` at the last."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"drop_path must be in [0, 1], got {rate}")
    return [rate * i / (n - 1) if n > 1 else 0.0 for i in range(n)]


def drop_path_module(p: float) -> nn.Module:
    """Per-sample stochastic depth of probability ``p`` (torchvision's ``StochasticDepth`` in
    "row" mode), or ``nn.Identity`` for 0; neither has state-dict entries.

    torchvision is imported here, not with this module: importing it imports ``torch._dynamo``
    (3-4 s of CPU on a 2-core VM), which the launcher, the tools and processes without DDP
    otherwise never need.
    """
    if p <= 0.0:
        return nn.Identity()
    from torchvision.ops import StochasticDepth

    return StochasticDepth(p, "row")


def set_drop_path(blocks: Sequence[nn.Module], rate: float) -> None:
    """Give each block (in depth order) its ``drop_path`` module at the linear rate."""
    for block, p in zip(blocks, linear_rates(rate, len(blocks))):
        block.drop_path = drop_path_module(p)


@contextlib.contextmanager
def _kept_bn_stats(block: nn.Module):
    """While a block is recomputed, BatchNorm computes what it did in the first forward and
    updates its running statistics again; they are put back afterwards, so a step updates them
    once, as without checkpointing."""
    stats = [b for m in block.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)
             for b in (m.running_mean, m.running_var, m.num_batches_tracked) if b is not None]
    before = [b.clone() for b in stats]
    try:
        yield
    finally:
        with torch.no_grad():
            for b, saved in zip(stats, before):
                b.copy_(saved)


def _contexts(block: nn.Module):
    return contextlib.nullcontext(), _kept_bn_stats(block)


def _checkpointed_forward(block: nn.Module, *args, **kwargs):
    plain = type(block).forward
    if not torch.is_grad_enabled():
        return plain(block, *args, **kwargs)
    return checkpoint(plain, block, *args, use_reentrant=False,
                      context_fn=partial(_contexts, block), **kwargs)


def set_checkpointing(blocks: Iterable[nn.Module], enable: bool = True) -> None:
    """Run each block's forward under non-reentrant activation checkpointing (or stop). The
    block's class and state dict are unchanged: the instance gets its own ``forward``."""
    for block in blocks:
        if enable:
            block.forward = partial(_checkpointed_forward, block)
        else:
            block.__dict__.pop("forward", None)


def is_checkpointed(block: nn.Module) -> bool:
    """Whether :func:`set_checkpointing` is on for ``block``."""
    return "forward" in block.__dict__


class BlockwiseMixin:
    """``set_grad_checkpointing`` over the family's ``checkpoint_blocks()``; a family defines that
    and ``layer_id`` / ``num_layers`` (see the module docstring)."""

    def checkpoint_blocks(self) -> List[nn.Module]:
        """The modules each checkpointed as one unit (the residual blocks)."""
        raise NotImplementedError

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each block's activations in the backward pass (``enable``) or keep them."""
        set_checkpointing(self.checkpoint_blocks(), enable)

    def layer_id(self, name: str) -> int:
        """The layer (0 .. ``num_layers() - 1``) of the parameter named ``name``."""
        raise NotImplementedError

    def num_layers(self) -> int:
        """Layers counted by ``layer_id``: the blocks or stages plus the input and the output."""
        raise NotImplementedError


# Stage children: res2..res5 (SlowFast: slow_res2.., fast_res2..; not its fuse_res* laterals)
# or layer1..layer4.
_STAGE = re.compile(r"^(?:slow_|fast_)?res([2-5])$|^layer([1-4])$")


class StageLayersMixin(BlockwiseMixin):
    """Layers of a CNN by stage: children named ``res2..res5`` (SlowFast: ``slow_res2``,
    ``fast_res2``, ...) or ``layer1..layer4`` are the stages 1..4; a child registered before the
    first stage is layer 0 (stem), one registered between stages belongs to the stage before it
    (SlowFast's laterals ``fuse_res{n}``), one after the last stage is the output layer (head,
    TPN's neck)."""

    def _stage_of_children(self) -> dict:
        found, order = {}, []
        for name, _ in self.named_children():
            match = _STAGE.search(name)
            if match:
                n = int(match.group(1)) - 1 if match.group(1) else int(match.group(2))
                order.append(n)
            found[name] = (match is not None, order[-1] if order else 0)
        last = max(order)
        return {name: (n if is_stage or n < last else last + 1)
                for name, (is_stage, n) in found.items()}

    def stage_modules(self) -> List[nn.Module]:
        """The stage children in registration order."""
        return [m for name, m in self.named_children() if _STAGE.search(name)]

    def residual_chains(self) -> List[List[nn.Module]]:
        """The residual blocks in depth order, one list per pathway (SlowFast has two)."""
        chains = {}
        for name, module in self.named_children():
            if _STAGE.search(name):
                chains.setdefault(name.rpartition("_")[0], []).extend(module.children())
        return list(chains.values())

    def set_drop_path_rate(self, rate: float) -> None:
        """Stochastic depth linear over each pathway's blocks, ``rate`` at the last."""
        for chain in self.residual_chains():
            set_drop_path(chain, rate)

    def checkpoint_blocks(self) -> List[nn.Module]:
        return [b for chain in self.residual_chains() for b in chain]

    def layer_id(self, name: str) -> int:
        return self._stage_of_children()[name.split(".", 1)[0]]

    def num_layers(self) -> int:
        return max(self._stage_of_children().values()) + 1
