"""SyncBN that also works on CPU (gloo): batch statistics over every rank of the process group.

torch.nn.SyncBatchNorm only runs on GPUs. ``GlobalBatchNorm`` all-reduces each layer's
(sum, sum of squares, count) with an autograd-aware sum (:class:`_SumOverRanks`: the gradient of a
sum over ranks is the sum of the ranks' gradients), so its backward pass is exact too.
(``torch.distributed.nn.functional.all_reduce`` does the same, deprecated from torch 2.14 in
favour of a private module.) ``convert_sync_bn`` picks torch's SyncBatchNorm on CUDA and this one
on CPU; it is applied by the trainer, never inside a model.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn

from ..utils import comm


class _SumOverRanks(torch.autograd.Function):
    """The sum of a tensor over every rank, in the forward pass and, for its gradient, in the
    backward pass."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad


class GlobalBatchNorm(nn.modules.batchnorm._BatchNorm):
    """BatchNorm whose training statistics are computed over all ranks (any input rank >= 2)."""

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(f"expected at least 2-D input, got {x.dim()}-D")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and comm.is_dist() and comm.get_world_size() > 1):
            return super().forward(x)
        c = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        xf = x.float()
        count = torch.full((1,), x.numel() / c, dtype=torch.float32, device=x.device)
        stats = _SumOverRanks.apply(torch.cat([xf.sum(dims), (xf * xf).sum(dims), count]))
        n = stats[-1]
        mean = stats[:c] / n
        var = (stats[c:2 * c] / n - mean * mean).clamp_min(0.0)
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                m = self.momentum if self.momentum is not None else 1.0 / float(
                    self.num_batches_tracked)
                self.running_mean.mul_(1 - m).add_(mean.detach(), alpha=m)
                unbiased = var.detach() * n / max(float(n) - 1.0, 1.0)
                self.running_var.mul_(1 - m).add_(unbiased, alpha=m)
        shape = [1, c] + [1] * (x.dim() - 2)
        y = (xf - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        return y.to(x.dtype)


def convert_sync_bn(model: nn.Module, device: torch.device) -> nn.Module:
    """Replace trainable BatchNorm layers with SyncBN (torch's on CUDA, GlobalBatchNorm on CPU)."""
    if device.type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return _convert(model)


def _convert(module: nn.Module) -> nn.Module:
    if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training and not isinstance(
        module, GlobalBatchNorm
    ):
        new = GlobalBatchNorm(module.num_features, module.eps, module.momentum, module.affine,
                              module.track_running_stats)
        new.load_state_dict(module.state_dict())
        if module.affine:
            new.weight.requires_grad_(module.weight.requires_grad)
            new.bias.requires_grad_(module.bias.requires_grad)
        return new
    for name, child in module.named_children():
        new_child = _convert(child)
        if new_child is not child:
            setattr(module, name, new_child)
    return module
