"""zoo/accel: the CPU conv3d routes compute what nn.Conv3d computes (float32 through 2-D
kernels, bf16 as the hardware would), replace the model's layers without copying a parameter, and
take exactly the calls PyTorch would send to its slow kernel."""

import copy
import itertools

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from zoo.accel import apply_cpu_kernels
from zoo.accel.cpu_conv import CpuConv3d, route_cpu_convs, takes_slow_conv3d
from zoo.utils.env import cpu_has_bf16


@pytest.mark.parametrize("kernel,stride,padding,shape", [
    ((1, 3, 3), (1, 1, 1), (0, 1, 1), (1, 4, 6, 10, 10)),   # time folded into the batch
    ((1, 3, 3), (1, 2, 2), (0, 1, 1), (1, 4, 6, 9, 9)),
    ((3, 1, 1), (1, 1, 1), (1, 0, 0), (1, 4, 6, 10, 10)),   # (time, height x width) 2-D conv
    ((5, 1, 1), (2, 1, 1), (2, 0, 0), (1, 4, 8, 10, 10)),
    ((1, 1, 1), (1, 1, 1), (0, 0, 0), (1, 4, 6, 10, 10)),
])
@pytest.mark.parametrize("channels_last", [False, True])
def test_routed_conv_equals_conv3d(kernel, stride, padding, shape, channels_last):
    torch.manual_seed(0)
    plain = nn.Conv3d(shape[1], 6, kernel, stride, padding, bias=True)
    routed = CpuConv3d.from_conv(copy.deepcopy(plain))
    x = torch.randn(shape)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last_3d)
        plain, routed = (m.to(memory_format=torch.channels_last_3d) for m in (plain, routed))
    assert routed._slow_kernel(x)  # these small batch-1 shapes take PyTorch's slow kernel
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = plain(xa), routed(xb)
    assert ya.shape == yb.shape and torch.allclose(ya, yb, atol=1e-5)
    assert yb.is_contiguous(memory_format=torch.channels_last_3d if channels_last else
                            torch.contiguous_format)
    # exactly the strides of a fresh tensor in that layout: a batch of one reshaped keeps the
    # channels' stride in its batch dimension, and batch norm's backward then takes a generic
    # kernel 2.5-4x slower
    fresh = torch.empty(yb.shape, memory_format=torch.channels_last_3d if channels_last else
                        torch.contiguous_format)
    assert yb.stride() == fresh.stride()
    ya.square().sum().backward()
    yb.square().sum().backward()
    assert torch.allclose(xa.grad, xb.grad, atol=1e-4)
    assert torch.allclose(plain.weight.grad, routed.weight.grad, rtol=1e-4, atol=1e-4)
    # the gradient comes back in the weight's own strides, so DDP's bucket view takes it as it
    # is (a mismatch, even in a size-1 dimension, makes DDP copy it every step, with a warning)
    assert routed.weight.grad.stride() == routed.weight.stride()
    assert routed.state_dict().keys() == plain.state_dict().keys()


@pytest.mark.parametrize("kernel,padding", [((1, 3, 3), (0, 1, 1)), ((3, 1, 1), (1, 0, 0)),
                                            ((3, 3, 3), (1, 1, 1))])
def test_routed_conv_under_bf16_autocast_is_bf16_math(kernel, padding):
    """bf16 operands, sums at least as exact as PyTorch's own bf16 kernel, bf16 results: checked
    against float64 convolutions of the bf16-rounded operands."""
    torch.manual_seed(0)
    plain = nn.Conv3d(8, 16, kernel, 1, padding).to(memory_format=torch.channels_last_3d)
    routed = CpuConv3d.from_conv(copy.deepcopy(plain))
    x = torch.randn(1, 8, 6, 12, 12).contiguous(memory_format=torch.channels_last_3d)
    g = torch.randn(1, 16, 6, 12, 12)  # the upstream gradient

    def bf(t):
        return t.detach().to(torch.bfloat16).double()

    xd = bf(x).requires_grad_()
    wd = bf(plain.weight).requires_grad_()
    ref = F.conv3d(xd, wd, bf(plain.bias), 1, padding)
    (ref * bf(g)).sum().backward()
    errors = {}
    for name, m in (("plain", plain), ("routed", routed)):
        xi = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = m(xi)
        assert y.dtype == torch.bfloat16
        (y.float() * g).sum().backward()
        errors[name] = [(a.double() - b).abs().max().item() / b.abs().max().item()
                        for a, b in ((y, ref), (xi.grad, xd.grad), (m.weight.grad, wd.grad))]
    # output, input gradient, weight gradient: within bf16 rounding (2**-8 relative) of the
    # float64 result, and no further from it than PyTorch's kernel
    for routed_err, plain_err in zip(errors["routed"], errors["plain"]):
        assert routed_err <= 2 ** -7
        assert routed_err <= plain_err * 1.5 + 2 ** -10


@pytest.mark.parametrize("kernel,padding,stride,extent", [
    ((3, 1, 1), (1, 0, 0), (1, 1, 1), (2, 4, 4)),   # 2 frames under a 3-frame kernel
    ((7, 1, 1), (3, 0, 0), (2, 1, 1), (4, 4, 4)),
    ((1, 5, 5), (0, 2, 2), (1, 1, 1), (4, 1, 1)),   # a 1x1 map under a 5x5 kernel
    ((1, 3, 3), (0, 1, 1), (1, 2, 2), (4, 2, 2)),
])
def test_bf16_training_is_repeatable_where_the_clip_is_smaller_than_the_kernel(
        kernel, padding, stride, extent):
    """oneDNN's bf16 backward pass gave a different (often non-finite) weight gradient on every
    call for these shapes on an AVX512-BF16 CPU: the routed layer takes the float32 kernel on
    bf16-rounded operands instead, so every call gives the same finite gradients, within bf16
    rounding of float64's."""
    torch.manual_seed(0)
    conv = CpuConv3d.from_conv(nn.Conv3d(64, 64, kernel, stride, padding, bias=False))
    assert conv.smaller_than_kernel(torch.empty(2, 64, *extent))
    x = torch.randn(2, 64, *extent).contiguous(memory_format=torch.channels_last_3d)
    conv = conv.to(memory_format=torch.channels_last_3d)
    grads = []
    for _ in range(12):
        conv.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = conv(x)
        assert y.dtype == torch.bfloat16
        y.float().square().mean().backward()
        grads.append(conv.weight.grad.clone())
    assert all(torch.isfinite(g).all() for g in grads)
    assert all(torch.equal(grads[0], g) for g in grads[1:])
    w = conv.weight.detach().to(torch.bfloat16).double().requires_grad_()
    ref = F.conv3d(x.to(torch.bfloat16).double(), w, None, stride, padding)
    ref.square().mean().backward()
    # (the upstream gradient 2y/N comes from the bf16-rounded output: bf16's error, normwise)
    assert (grads[0].double() - w.grad).abs().max() <= 2 ** -6 * w.grad.abs().max()


def test_route_replaces_the_layers_and_keeps_their_parameters():
    model = nn.Sequential(nn.Conv3d(3, 4, (1, 3, 3)), nn.Sequential(nn.Conv3d(4, 4, (3, 1, 1))),
                          nn.Conv2d(4, 4, 3))
    model.eval()
    params = {name: p for name, p in model.named_parameters()}
    keys = model.state_dict().keys()
    assert route_cpu_convs(model) == 2
    assert isinstance(model[0], CpuConv3d) and isinstance(model[1][0], CpuConv3d)
    assert type(model[2]) is nn.Conv2d
    assert all(p is params[name] for name, p in model.named_parameters())  # the same tensors
    assert model.state_dict().keys() == keys and not model[0].training
    assert apply_cpu_kernels(model) == 0  # already routed: nothing left to replace


def test_route_keeps_the_convs_that_carry_hooks_or_parametrizations():
    # A user's forward hook (here: one that zeroes the output), pruning's mask and weight_norm
    # live on the conv module: a replacement would drop the hook, or fail to take the weight.
    from torch.nn.utils import parametrizations, prune

    plain = nn.Conv3d(3, 4, 1)
    pruned = nn.Conv3d(4, 4, 1)
    prune.l1_unstructured(pruned, "weight", amount=0.5)
    normed = parametrizations.weight_norm(nn.Conv3d(4, 4, 1))
    hooked = nn.Conv3d(4, 4, 1)
    hooked.register_forward_hook(lambda module, args, out: out * 0)
    model = nn.Sequential(plain, pruned, normed, hooked)
    assert route_cpu_convs(model) == 1
    assert isinstance(model[0], CpuConv3d)
    assert not any(isinstance(m, CpuConv3d) for m in model[1:])
    assert model(torch.randn(1, 3, 2, 4, 4)).abs().sum() == 0  # the hook still runs


@pytest.mark.skipif(not hasattr(torch._C, "_select_conv_backend"),
                    reason="this torch does not expose its convolution backend choice")
@pytest.mark.parametrize("threads", [1, 2])
def test_slow_kernel_rule_is_the_one_pytorch_applies(threads):
    """takes_slow_conv3d (shapes only) against PyTorch's own choice, asked through its private
    backend selector, which only this test uses: a release that changes the rule fails here.
    bf16: emulated exactly where PyTorch would take slow_conv3d. A torch without the CPU's bf16
    query (< 2.4) counts the CPU as without bf16 and emulates every bf16 conv3d: the same bf16
    math through oneDNN's float32 kernel (its "auto" precision is fp32 there anyway)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        differ = []
        for n, c, t, h, k, s, g in itertools.product(
                (1, 2, 16), (3, 8, 64), (1, 4, 8), (7, 32, 56),
                [(1, 3, 3), (3, 1, 1), (1, 1, 1), (5, 7, 7), (1, 5, 5), (3, 3, 3)], (1, 2), (1, 3)):
            if k[0] > t or c % g:
                continue
            x, w = torch.empty(n, c, t, h, h), torch.empty(12, c // g, *k)
            chosen = torch._C._select_conv_backend(x, w, None, (1, s, s), (0, 0, 0), (1, 1, 1),
                                                   False, (0, 0, 0), g, None)
            slow = chosen == torch._C._ConvBackend.Slow3d
            if slow != takes_slow_conv3d(x.shape, w.shape, (1, s, s), g):
                differ.append((tuple(x.shape), tuple(w.shape), s, g, str(chosen)))
            if not hasattr(torch.cpu, "_is_avx512_bf16_supported"):
                continue  # torch < 2.4 cannot say whether the CPU has bf16 (see below)
            x, w = x.bfloat16(), w.bfloat16()
            chosen = torch._C._select_conv_backend(x, w, None, (1, s, s), (0, 0, 0), (1, 1, 1),
                                                   False, (0, 0, 0), g, None)
            if (chosen == torch._C._ConvBackend.Slow3d) == cpu_has_bf16():
                differ.append(("bf16", tuple(x.shape), tuple(w.shape), s, g, str(chosen)))
    finally:
        torch.set_num_threads(before)
    assert not differ, differ[:5]
