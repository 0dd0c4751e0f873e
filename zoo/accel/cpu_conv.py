"""conv3d on CPU through the kernels that compute it fastest, with the same result.

PyTorch sends some float32 ``conv3d`` calls on CPU (batch 1, few channels or small frames) to
``slow_conv3d``, an unfold + GEMM kernel whose backward is several times slower than oneDNN's;
:class:`CpuConv3d` runs those as the same 2-D convolution on a view of the clip, which oneDNN
takes. Same weights, same state dict, same result up to rounding. Which calls PyTorch sends
there is read from the shapes by :func:`takes_slow_conv3d`, the rule ATen's ``use_mkldnn``
applies to float32 CPU convolutions (tests/test_accel.py checks it against PyTorch's own choice
on the pinned release).

Under bf16 autocast on a CPU without bf16 instructions, PyTorch sends every bf16 ``conv3d`` to
``slow_conv3d`` (oneDNN takes bf16 only where the CPU has it); :class:`CpuConv3d` then computes
the layer as the hardware would: inputs, weights and bias rounded to bf16, products summed in
float32 by oneDNN's float32 kernel, the output rounded to bf16 (the gradients are rounded to
bf16 on the way back through the same casts). The math is bf16's; only the kernel changes. A torch
without the CPU's bf16 query (before 2.4) counts every CPU as without bf16 here.
The same path takes a bf16 ``conv3d`` whose clip is shorter or smaller than the kernel along
some dimension (2 frames under a 3-frame kernel, a 2x2 map under a 3x3 one): there oneDNN's
bf16 backward pass (torch 2.14 and 2.15, an AVX512-BF16 EPYC) gave a different weight gradient
on every call, often non-finite, and at times corrupted the heap, while the forward pass and
every larger extent were exact (tests/test_benchmark.py checks such shapes).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.env import cpu_has_bf16
from ..utils.tracing import capturing


def takes_slow_conv3d(x_shape: Sequence[int], w_shape: Sequence[int], stride: Sequence[int],
                      groups: int) -> bool:
    """Whether PyTorch runs a float32 CPU ``conv3d`` (no dilation, zero padding mode) with
    ``slow_conv3d`` rather than oneDNN: ATen's ``use_mkldnn`` rule for float32 CPU tensors.

    oneDNN takes the call when it has more than one image (or groups, or a kernel above 3x3 in
    both spatial sizes, or more than 20480 values in N*C*T*H), and, for a 1x1 spatial kernel,
    only with several threads, a stride or a batch of 16 or more. Otherwise ``slow_conv3d``.
    """
    n, c, t, h = x_shape[:4]
    kh, kw = w_shape[-2], w_shape[-1]
    strided = any(s != 1 for s in stride)
    one_by_one_ok = (strided or n >= 16 or kw != 1 or kh != 1 or torch.get_num_threads() > 1)
    big_enough = groups > 1 or (kw > 3 and kh > 3) or n > 1 or n * c * t * h > 20480
    return not (torch.backends.mkldnn.is_available() and one_by_one_ok and big_enough)


def _cpu_autocast_on() -> bool:
    try:
        return torch.is_autocast_enabled("cpu")
    except TypeError:  # torch < 2.4
        return torch.is_autocast_cpu_enabled()


def _cpu_autocast_dtype() -> torch.dtype:
    if hasattr(torch, "get_autocast_dtype"):  # added in torch 2.4
        return torch.get_autocast_dtype("cpu")
    return torch.get_autocast_cpu_dtype()


def cpu_bf16_autocast() -> bool:
    """True inside CPU autocast to bf16."""
    return _cpu_autocast_on() and _cpu_autocast_dtype() == torch.bfloat16


class CpuConv3d(nn.Conv3d):
    """An ``nn.Conv3d`` that avoids PyTorch's slow CPU kernel (see the module docstring).

    When PyTorch would run this layer with ``slow_conv3d`` (float32 on CPU, no autocast), a
    ``1 x kh x kw`` kernel runs as a 2-D convolution with time folded into the batch, and a
    ``kt x 1 x 1`` kernel as a 2-D convolution over (time, height x width). Both are free views
    of a channels-last clip (a contiguous clip costs one copy each way). Anything else, and any
    call under tracing, export or ``torch.compile``, is the plain ``nn.Conv3d``.
    """

    @classmethod
    def from_conv(cls, conv: nn.Conv3d) -> "CpuConv3d":
        """A CpuConv3d with ``conv``'s settings, parameters and mode (nothing is copied)."""
        new = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride,
                  conv.padding, conv.dilation, conv.groups, conv.bias is not None,
                  conv.padding_mode, device="meta")
        new.weight = conv.weight
        new.bias = conv.bias
        new.train(conv.training)
        return new

    def _plain_call(self, x: torch.Tensor) -> bool:
        """True where this layer must run as the plain nn.Conv3d: not a CPU clip, or traced,
        scripted, compiled or exported, or padding/dilation the 2-D views do not cover."""
        return (x.device.type != "cpu" or x.dim() != 5 or capturing()
                or self.padding_mode != "zeros"
                or isinstance(self.padding, str) or self.dilation != (1, 1, 1))

    def _slow_kernel(self, x: torch.Tensor) -> bool:
        if self._plain_call(x) or x.dtype != torch.float32 or _cpu_autocast_on():
            return False
        return takes_slow_conv3d(x.shape, self.weight.shape, self.stride, self.groups)

    def _emulated_bf16(self, x: torch.Tensor) -> bool:
        """Under CPU bf16 autocast, where PyTorch would run this layer with slow_conv3d or where
        its bf16 kernel is wrong (an extent of the clip below the kernel's)."""
        if (self._plain_call(x) or not cpu_bf16_autocast()
                or x.dtype not in (torch.float32, torch.bfloat16)):
            return False
        return self.smaller_than_kernel(x) or not cpu_has_bf16()

    def smaller_than_kernel(self, x: torch.Tensor) -> bool:
        """Whether ``x`` is shorter, lower or narrower than the kernel (padding makes it valid)."""
        return any(size < k for size, k in zip(x.shape[2:], self.kernel_size))

    def _bf16_as_hardware(self, x: torch.Tensor, weight: torch.Tensor,
                          bias: Optional[torch.Tensor]) -> torch.Tensor:
        """bf16 operands, float32 sums (oneDNN's float32 kernel), a bf16 result."""
        def rounded(t: torch.Tensor) -> torch.Tensor:
            return t.to(torch.bfloat16).float()

        with torch.autocast("cpu", enabled=False):
            y = self._conv_forward(rounded(x), rounded(weight),
                                   None if bias is None else rounded(bias))
        return y.to(torch.bfloat16)

    def _conv_forward(self, x: torch.Tensor, weight: torch.Tensor,
                      bias: Optional[torch.Tensor]) -> torch.Tensor:
        if self._emulated_bf16(x):
            return self._bf16_as_hardware(x, weight, bias)
        (kt, kh, kw), (st, sh, sw), (pt, ph, pw) = self.kernel_size, self.stride, self.padding
        if kh == kw == 1 and sh == sw == 1 and ph == pw == 0:
            plan = "time"
        elif kt == 1 and st == 1 and pt == 0:
            plan = "space"
        else:
            plan = None
        if plan is None or not self._slow_kernel(x):
            return super()._conv_forward(x, weight, bias)
        n, c, t, h, w = x.shape
        if plan == "time":  # (N, C, T, H*W): a view in both layouts
            # flatten, not squeeze: its gradient comes back in the weight's own strides (DDP
            # copies a gradient whose strides differ from its bucket view's, every step)
            y = F.conv2d(x.reshape(n, c, t, h * w), weight.flatten(3), bias, (st, 1), (pt, 0),
                         1, self.groups)
            return _channels_last_strides(y.reshape(n, y.shape[1], y.shape[2], h, w))
        # (N*T, C, H, W): a view of a channels-last clip
        y = F.conv2d(x.transpose(1, 2).reshape(n * t, c, h, w), weight.squeeze(2), bias,
                     (sh, sw), (ph, pw), 1, self.groups)
        y = y.reshape(n, t, *y.shape[1:]).transpose(1, 2)
        return y if x.is_contiguous(memory_format=torch.channels_last_3d) else y.contiguous()


def _channels_last_strides(y: torch.Tensor) -> torch.Tensor:
    """``y`` with the strides ``torch.empty(..., memory_format=channels_last_3d)`` gives it.

    A reshape of a channels-last clip batch of one gives the batch dimension the channels'
    stride (C instead of C*T*H*W). The layout is the same, but PyTorch's batch norm no longer
    calls that tensor channels-last, and its backward pass falls back to a generic kernel 2.5-4x
    slower than the channels-last one. Other tensors are returned as they are.
    """
    n, c, t, h, w = y.shape
    canonical = (c * t * h * w, 1, h * w * c, w * c, c)
    if n != 1 or y.stride() == canonical or not y.is_contiguous(
            memory_format=torch.channels_last_3d):
        return y
    return y.as_strided(y.shape, canonical)


def route_cpu_convs(model: nn.Module) -> int:
    """Replace every plain ``nn.Conv3d`` in ``model`` by a :class:`CpuConv3d` holding the same
    parameters (the same tensors: state-dict keys, optimizers and hooks on them are unaffected).

    A conv that carries module hooks (a user's forward hook, ``weight_norm`` of old, pruning's
    mask) or a parametrization keeps its module: its hooks would be lost with it, and its weight
    is not a plain parameter.

    Call it before an optimizer or DDP sees the model's modules. Returns the number replaced.
    """
    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            # exact type: a user's subclass keeps its own forward
            if type(child) is nn.Conv3d and not _hooked(child):
                setattr(parent, name, CpuConv3d.from_conv(child))
                count += 1
    return count


def _hooked(module: nn.Module) -> bool:
    """Whether ``module`` has hooks of its own or parametrized tensors."""
    from torch.nn.utils import parametrize

    hooks = (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks,
             getattr(module, "_backward_pre_hooks", {}), module._state_dict_hooks,
             module._load_state_dict_pre_hooks)
    return any(hooks) or parametrize.is_parametrized(module)
