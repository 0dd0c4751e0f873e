"""The layers of a reversible MViT (zoo/models/mvit_rev.py builds the network), with PySlowFast's
module names (``slowfast/models/reversible_mvit.py``, ``TwoStreamFusion`` in
``slowfast/models/common.py``).

A :class:`ReversibleBlock` carries two residual streams: ``Y1 = X1 + F(X2)`` with ``F`` the
pooling attention, ``Y2 = X2 + G(Y1)`` with ``G`` the MLP, so ``X2 = Y2 - G(Y1)`` and
``X1 = Y1 - F(X2)``. :class:`RevBackprop` runs a run of such blocks keeping only its outputs and
recomputes every block's input from them in backward, so the activations inside the run are never
stored. Where the token grid or the width changes, a :class:`StageTransitionBlock` fuses the two
streams into one and runs a plain (non-reversible) block.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from ..utils.env import torch_at_least
from .mvit_layers import Mlp, MultiScaleAttention, pool_tokens

__all__ = ["AttentionSubBlock", "MLPSubblock", "RevBackprop", "ReversibleBlock",
           "StageTransitionBlock", "TwoStreamFusion", "fusion_modes"]

Thw = Tuple[int, int, int]


def fusion_modes() -> str:
    """The TwoStreamFusion modes, for messages."""
    return ("add, max, min, avg, concat, concat_linear[_<hidden mult>[_<dropout>]], "
            "ln+concat_linear[...]")


class TwoStreamFusion(nn.Module):
    """Fuses a tensor holding two streams side by side on the last axis (PySlowFast's module of
    this name): ``add`` / ``max`` / ``min`` / ``avg`` of the halves; ``concat`` keeps both;
    ``concat_linear_<mult>_<drop>`` adds an MLP of the concatenation (hidden width ``mult`` x,
    dropout ``drop``) to it, after a LayerNorm with the ``ln+`` prefix.

    Args:
        mode: The fusion, as above.
        dim: Width of the concatenated input (for the MLP modes).
    """

    def __init__(self, mode: str, dim: int) -> None:
        super().__init__()
        self.mode = mode
        if mode in ("add", "max", "min", "avg", "concat"):
            return
        parts = mode.split("_")
        if "concat_linear" not in mode or len(parts) > 4 or mode.split("+")[0] not in (
                "ln", mode):
            raise ValueError(f"fusion {mode!r}: use one of {fusion_modes()}")
        try:
            mult = float(parts[2]) if len(parts) >= 3 else 1.0
            drop = float(parts[3]) if len(parts) == 4 else 0.0
        except ValueError:
            raise ValueError(f"fusion {mode!r}: use one of {fusion_modes()}") from None
        mlp = Mlp(dim, int(dim * mult), dim, drop)
        # PySlowFast's LayerNorm here keeps torch's default eps.
        self.fuse_fn = nn.Sequential(nn.LayerNorm(dim), mlp) if mode.startswith("ln+") else mlp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "concat":
            return x
        if hasattr(self, "fuse_fn"):
            return x + self.fuse_fn(x)
        a, b = x.chunk(2, dim=-1)
        if self.mode == "add":
            return a + b
        if self.mode == "avg":
            return (a + b) / 2
        return torch.maximum(a, b) if self.mode == "max" else torch.minimum(a, b)


class AttentionSubBlock(nn.Module):
    """``F``: ``norm`` then pooling attention ``attn`` over the block's fixed token grid."""

    def __init__(self, dim: int, dim_out: int, input_size: Sequence[int], norm_layer,
                 **attn) -> None:
        super().__init__()
        self.thw: Thw = tuple(input_size)
        self.norm = norm_layer(dim)
        self.attn = MultiScaleAttention(dim, dim_out, input_size, norm_layer=norm_layer, **attn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(self.norm(x), self.thw)[0]


class MLPSubblock(nn.Module):
    """``G``: ``norm`` then the MLP ``mlp`` (no dropout, as in PySlowFast)."""

    def __init__(self, dim: int, mlp_ratio: float, norm_layer) -> None:
        super().__init__()
        self.norm = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.norm(x))


def _drop_mask(x: torch.Tensor, p: float) -> Optional[torch.Tensor]:
    """Per-sample stochastic-depth mask (kept samples scaled by ``1 / (1 - p)``), or None."""
    if p == 0.0:
        return None
    keep = 1.0 - p
    shape = (x.shape[0],) + (1,) * (x.dim() - 1)
    return x.new_empty(shape).bernoulli_(keep) / keep


def _masked(x: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    return x if mask is None else x * mask


class _RngState:
    """The CPU generator's state and that of the tensor's CUDA device, to replay dropout."""

    def __init__(self, device: torch.device) -> None:
        self.devices = [device] if device.type == "cuda" else []
        self.cpu = torch.get_rng_state()
        self.cuda = [torch.cuda.get_rng_state(d) for d in self.devices]

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        for d, state in zip(self.devices, self.cuda):
            torch.cuda.set_rng_state(state, d)


class ReversibleBlock(nn.Module):
    """Two-stream block keeping width and grid: ``Y1 = X1 + F(X2)``, ``Y2 = X2 + G(Y1)``.

    Stochastic depth drops both branches of a sample together (PySlowFast replays one seed for
    both). Dropout inside ``F`` (MVIT.DROPOUT_RATE) is replayed from the saved RNG state when
    :class:`RevBackprop` recomputes the block.

    Args:
        dim: Width of each stream.
        input_size: Token grid ``(T, H, W)``.
        mlp_ratio: MLP hidden width over ``dim``.
        drop_path: Stochastic-depth probability.
        norm_layer: The norm.
        **attn: :class:`MultiScaleAttention` arguments.
    """

    def __init__(self, dim: int, input_size: Sequence[int], mlp_ratio: float, drop_path: float,
                 norm_layer, **attn) -> None:
        super().__init__()
        self.drop_path = drop_path
        self.F = AttentionSubBlock(dim, dim, input_size, norm_layer, **attn)
        self.G = MLPSubblock(dim, mlp_ratio, norm_layer)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Both output streams, through plain autograd (activations stored)."""
        y1, y2, _ = self.step(x1, x2)
        return y1, y2

    def step(self, x1: torch.Tensor, x2: torch.Tensor, record: bool = False):
        """Forward of both streams; with ``record``, also what :meth:`invert` needs to replay the
        randomness: ``(rng before F, rng before G, drop-path mask)``."""
        random = self.training and (self.drop_path > 0.0 or self._dropout())
        rng_f = _RngState(x2.device) if record and random else None
        f = self.F(x2)
        mask = _drop_mask(f, self.drop_path) if self.training else None
        y1 = x1 + _masked(f, mask)
        rng_g = _RngState(y1.device) if record and random else None
        y2 = x2 + _masked(self.G(y1), mask)
        return y1, y2, (rng_f, rng_g, mask)

    def _dropout(self) -> bool:
        return any(isinstance(m, nn.Dropout) and m.p > 0 for m in self.modules())

    def invert(self, y1: torch.Tensor, y2: torch.Tensor, dy1: torch.Tensor, dy2: torch.Tensor,
               replay, params: List[nn.Parameter]):
        """Inputs ``(x1, x2)`` recomputed from the outputs, the gradients of the inputs, and those
        of ``params`` (this block's trainable parameters, in order)."""
        rng_f, rng_g, mask = replay
        devices = rng_f.devices if rng_f is not None else []
        with torch.random.fork_rng(devices=devices, enabled=rng_f is not None):
            with torch.enable_grad():
                y1 = y1.detach().requires_grad_(True)
                if rng_g is not None:
                    rng_g.restore()
                g = _masked(self.G(y1), mask)
                g_params = [p for p in self.G.parameters() if p.requires_grad]
                grads = torch.autograd.grad(g, [y1] + g_params, dy2, allow_unused=True)
            x2 = (y2 - g).detach()
            dy1 = dy1 + grads[0]
            found = dict(zip(map(id, g_params), grads[1:]))
            with torch.enable_grad():
                x2_req = x2.requires_grad_(True)
                if rng_f is not None:
                    rng_f.restore()
                f = _masked(self.F(x2_req), mask)
                f_params = [p for p in self.F.parameters() if p.requires_grad]
                grads = torch.autograd.grad(f, [x2_req] + f_params, dy1, allow_unused=True)
        x1 = (y1 - f).detach()
        found.update(zip(map(id, f_params), grads[1:]))
        return x1, x2.detach(), dy1, dy2 + grads[0], [found.get(id(p)) for p in params]


def _autocast_state(device: str) -> Tuple[str, bool, torch.dtype]:
    """``(device, enabled, dtype)`` of autocast on ``device`` now, for the backward's recompute
    (torch before 2.4 asks per device type: ``is_autocast_cpu_enabled`` and friends)."""
    if torch_at_least(2, 4):
        return device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)
    if device == "cpu":
        return device, torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()
    return device, torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype()


class RevBackprop(torch.autograd.Function):
    """A run of :class:`ReversibleBlock` s that stores only its outputs: backward recomputes each
    block's inputs from its outputs (last block first), replaying its dropout and drop-path
    randomness, and the gradients come from that recomputation.

    Called as ``RevBackprop.apply(x1, x2, blocks, *params)`` with ``params`` the blocks'
    trainable parameters (so their gradients reach autograd like any other parameter's).
    """

    @staticmethod
    def forward(ctx, x1, x2, blocks, *params):
        replays = []
        for block in blocks:
            x1, x2, replay = block.step(x1, x2, record=True)
            replays.append(replay)
        ctx.blocks, ctx.replays = blocks, replays
        ctx.autocast = _autocast_state(x1.device.type)
        ctx.save_for_backward(x1, x2)
        return x1, x2

    @staticmethod
    def backward(ctx, dy1, dy2):
        y1, y2 = ctx.saved_tensors
        device, enabled, dtype = ctx.autocast
        grads = {}
        with torch.autocast(device, dtype=dtype, enabled=enabled):
            for block, replay in zip(reversed(ctx.blocks), reversed(ctx.replays)):
                params = [p for p in block.parameters() if p.requires_grad]
                y1, y2, dy1, dy2, pgrads = block.invert(y1, y2, dy1, dy2, replay, params)
                grads.update(zip(map(id, params), pgrads))
        params = [p for block in ctx.blocks for p in block.parameters() if p.requires_grad]
        return (dy1, dy2, None, *[grads.get(id(p)) for p in params])


class StageTransitionBlock(nn.Module):
    """Where the grid or width changes: fuse the two streams (``pre_q_fuse``), then a plain
    block: ``x = res(x) + F(x)``, ``x = x + G(x)``, stochastic depth on the whole output (as
    PySlowFast). The shortcut ``res`` projects the width (``res_proj``) and pools the grid with
    the attention's own query pooling ``F.attn.pool_q`` / ``norm_q`` (``res_path="conv"``) or a
    max pool (``"max"``).

    Args:
        dim: Width the attention sees (after the fusion).
        dim_out: Output width.
        input_size: Token grid ``(T, H, W)`` before the block.
        num_heads: Attention heads.
        mlp_ratio: MLP hidden width over ``dim_out``.
        drop_path: Stochastic-depth probability.
        norm_layer: The norm.
        pre_q_fusion: :class:`TwoStreamFusion` mode of the incoming streams.
        res_path: ``"conv"`` or ``"max"``.
        **attn: :class:`MultiScaleAttention` arguments.
    """

    def __init__(self, dim: int, dim_out: int, input_size: Sequence[int], num_heads: int,
                 mlp_ratio: float, drop_path: float, norm_layer, pre_q_fusion: str,
                 res_path: str, **attn) -> None:
        super().__init__()
        self.drop_path = drop_path
        self.has_cls, self.pool_first = attn["has_cls"], attn["pool_first"]
        self.fold = 1 if attn["mode"] == "conv_unshared" else num_heads
        self.pre_q_fuse = TwoStreamFusion(pre_q_fusion, dim)
        self.F = AttentionSubBlock(dim, dim_out, input_size, norm_layer, num_heads=num_heads,
                                   **attn)
        self.G = MLPSubblock(dim_out, mlp_ratio, norm_layer)
        self.res_conv = res_path == "conv"
        self.pool_skip = None
        pool_q = self.F.attn.pool_q
        if not self.res_conv and pool_q is not None:
            stride = list(pool_q.stride)
            # PySlowFast pads by half the stride (not the kernel) here.
            self.pool_skip = nn.MaxPool3d([s + 1 if s > 1 else s for s in stride], stride,
                                          [s // 2 for s in stride], ceil_mode=False)
        if dim != dim_out:
            self.res_proj = nn.Linear(dim, dim_out)

    def _shortcut(self, x: torch.Tensor) -> torch.Tensor:
        proj = getattr(self, "res_proj", None)
        if proj is not None and not self.pool_first:
            x = proj(x)
        thw = self.F.thw
        if self.res_conv:
            b, n, c = x.shape
            heads = x.reshape(b, n, self.fold, c // self.fold).permute(0, 2, 1, 3)
            heads, _ = pool_tokens(heads, self.F.attn.pool_q, thw, self.has_cls,
                                   self.F.attn.norm_q)
            x = heads.permute(0, 2, 1, 3).reshape(b, heads.shape[2], c)
        else:
            x, _ = pool_tokens(x, self.pool_skip, thw, self.has_cls)
        if proj is not None and self.pool_first:
            x = proj(x)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pre_q_fuse(x)
        x = self._shortcut(x) + self.F(x)
        x = x + self.G(x)
        return _masked(x, _drop_mask(x, self.drop_path) if self.training else None)
