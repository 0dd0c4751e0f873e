"""How the training math is executed: precision, memory layout and CPU convolution kernels.

* ``CONFIG.TRAIN.PRECISION``: the autocast context and the gradient scaler; ``"auto"`` is bf16
  where the device computes bf16 natively (CUDA GPUs of compute capability 8.0+, CPUs with
  AVX512-BF16 or AMX), else fp32.
* ``CONFIG.TRAIN.MEMORY_FORMAT``: ``"auto"`` is channels-last on CPUs (oneDNN's convolutions
  are fastest in that layout) and on GPUs with bf16/fp16, else contiguous.
* :func:`route_cpu_convs`: PyTorch sends some float32 ``conv3d`` calls on CPU (batch 1, few
  channels or small frames) to ``slow_conv3d``, an unfold + GEMM kernel whose backward is several
  times slower than oneDNN's; :class:`CpuConv3d` runs those as the same 2-D convolution on a view
  of the clip, which oneDNN takes. Same weights, same state dict, same result up to rounding.
  Under bf16 autocast on a CPU without bf16 instructions, PyTorch sends every bf16 ``conv3d`` to
  ``slow_conv3d`` (oneDNN takes bf16 only where the CPU has it); :class:`CpuConv3d` then computes
  the layer as the hardware would: inputs, weights and bias rounded to bf16, products summed in
  float32 by oneDNN's float32 kernel, the output rounded to bf16 (the gradients are rounded to
  bf16 on the way back through the same casts). The math is bf16's; only the kernel changes.
  The same path takes a bf16 ``conv3d`` whose clip is shorter or smaller than the kernel along
  some dimension (2 frames under a 3-frame kernel, a 2x2 map under a 3x3 one): there oneDNN's
  bf16 backward pass (torch 2.14 and 2.15, an AVX512-BF16 EPYC) gave a different weight
  gradient on every call, often non-finite, and at times corrupted the heap, while the forward
  pass and every larger extent were exact (tests/test_benchmark.py checks such shapes).
"""

from __future__ import annotations

import contextlib
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def native_bf16(device: torch.device) -> bool:
    """True when ``device`` computes bf16 in hardware (so bf16 autocast is faster than fp32)."""
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.get_device_capability(device)[0] >= 8
    if device.type == "cpu":
        cpu = getattr(torch, "cpu", None)
        checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        # Without these instructions oneDNN emulates bf16, which is slower than fp32.
        return any(getattr(cpu, name, lambda: False)() for name in checks)
    return False


def resolve_precision(precision: str, device: torch.device) -> str:
    """``"auto"`` -> ``"bf16"`` where :func:`native_bf16`, else ``"fp32"``; others unchanged."""
    if precision != "auto":
        return precision
    return "bf16" if native_bf16(device) else "fp32"


def resolve_channels_last(memory_fmt: str, precision: str, device: torch.device,
                          channels_last: bool = False) -> bool:
    """Whether to run channels-last.

    Args:
        memory_fmt: ``CONFIG.TRAIN.MEMORY_FORMAT``: "auto", "channels_last" or "contiguous".
        precision: The resolved precision ("fp32", "bf16" or "fp16").
        device: The training device.
        channels_last: ``CONFIG.TRAIN.CHANNELS_LAST`` (older switch; True forces channels-last).
    """
    if channels_last or memory_fmt == "channels_last":
        return True
    if memory_fmt == "contiguous":
        return False
    return device.type == "cpu" or precision in _DTYPES


def execution_settings(train_cfg, device: torch.device) -> Tuple[str, bool]:
    """``(precision, channels_last)`` that ``CONFIG.TRAIN`` asks for on ``device``."""
    precision = resolve_precision(train_cfg.PRECISION, device)
    return precision, resolve_channels_last(train_cfg.MEMORY_FORMAT, precision, device,
                                            train_cfg.CHANNELS_LAST)


def autocast(precision: str, device: torch.device):
    """A context that runs the forward pass in ``precision`` ("fp32" = no autocast)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision == "fp16" and device.type != "cuda":
        raise ValueError(
            "CONFIG.TRAIN.PRECISION fp16 needs a CUDA GPU; on CPU use bf16 (or fp32)"
        )
    return torch.autocast(device_type=device.type, dtype=_DTYPES[precision])


def grad_scaler(precision: str, device: torch.device) -> Optional[torch.amp.GradScaler]:
    """A GradScaler for fp16 (its small range needs loss scaling); None otherwise."""
    if precision == "fp16" and device.type == "cuda":
        return torch.amp.GradScaler("cuda")
    return None


def memory_format(model_or_clip_dim: int) -> torch.memory_format:
    """channels_last for 4-D image tensors, channels_last_3d for 5-D clips."""
    return torch.channels_last_3d if model_or_clip_dim == 5 else torch.channels_last


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


def capturing() -> bool:
    """True while the call is traced, scripted, compiled or exported: a layer that picks its
    kernel at run time must then run as its plain self."""
    return (torch.jit.is_tracing() or torch.jit.is_scripting() or torch.compiler.is_compiling()
            or torch.onnx.is_in_onnx_export())


class CpuConv3d(nn.Conv3d):
    """An ``nn.Conv3d`` that avoids PyTorch's slow CPU kernel (see the module docstring).

    When PyTorch would run this layer with ``slow_conv3d`` (float32 on CPU, no autocast), a
    ``1 x kh x kw`` kernel runs as a 2-D convolution with time folded into the batch, and a
    ``kt x 1 x 1`` kernel as a 2-D convolution over (time, height x width). Both are free views
    of a channels-last clip (a contiguous clip costs one copy each way). Anything else, and any
    call under tracing, export or ``torch.compile``, is the plain ``nn.Conv3d``.
    """

    def _plain_call(self, x: torch.Tensor) -> bool:
        """True where this layer must run as the plain nn.Conv3d: not a CPU clip, or traced,
        scripted, compiled or exported, or padding/dilation the 2-D views do not cover."""
        return (x.device.type != "cpu" or x.dim() != 5 or capturing()
                or self.padding_mode != "zeros"
                or isinstance(self.padding, str) or self.dilation != (1, 1, 1))

    def _picks_slow3d(self, x: torch.Tensor, dtype: torch.dtype) -> bool:
        def like(t: torch.Tensor) -> torch.Tensor:  # same shape and strides, nothing copied
            return t if t.dtype == dtype else torch.empty_like(t, dtype=dtype)

        try:  # ask PyTorch which kernel it would pick (2 us); a private API, so be careful
            backend = torch._C._select_conv_backend(
                like(x), like(self.weight), None if self.bias is None else like(self.bias),
                self.stride, self.padding,
                self.dilation, False, (0, 0, 0), self.groups, None)
        except (AttributeError, RuntimeError, TypeError):
            return False
        return backend == torch._C._ConvBackend.Slow3d

    def _slow_kernel(self, x: torch.Tensor) -> bool:
        if self._plain_call(x) or x.dtype != torch.float32 or _cpu_autocast_on():
            return False
        return self._picks_slow3d(x, torch.float32)

    def _emulated_bf16(self, x: torch.Tensor) -> bool:
        """Under CPU bf16 autocast, where PyTorch would run this layer with slow_conv3d or where
        its bf16 kernel is wrong (an extent of the clip below the kernel's)."""
        if (self._plain_call(x) or not cpu_bf16_autocast()
                or x.dtype not in (torch.float32, torch.bfloat16)):
            return False
        return self.smaller_than_kernel(x) or self._picks_slow3d(x, torch.bfloat16)

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
    """Turn every plain ``nn.Conv3d`` of ``model`` into a :class:`CpuConv3d`, in place.

    Parameters, buffers and state-dict keys stay as they are; only the kernel choice changes.
    Returns the number of layers changed.
    """
    count = 0
    for m in model.modules():
        if type(m) is nn.Conv3d:  # exact type: a user's subclass keeps its own forward
            m.__class__ = CpuConv3d
            count += 1
    return count
