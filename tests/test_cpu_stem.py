"""The narrow RGB stem in float32 under CPU bf16 autocast (zoo/accel/cpu_stem.py): same
parameters and keys, bf16 out in the clip's layout, and results within bf16 rounding of a float64
stem (no further from it than autocast's own bf16 stem)."""

import copy

import pytest
import torch

from zoo.accel.cpu_stem import CpuStem, route_cpu_stems
from zoo.models import create_model
from zoo.models.blocks3d import Stem

CL = torch.channels_last_3d


def _stem(out_ch=8, kt=5, **kwargs):
    torch.manual_seed(0)
    stem = Stem(3, out_ch, kt, **kwargs)
    with torch.no_grad():  # a trained net's BN is not the identity
        stem.bn.weight.uniform_(0.5, 1.5)
        stem.bn.bias.uniform_(-0.2, 0.2)
    return stem


def _run(stem, x, g, bf16):
    stem = copy.deepcopy(stem)
    x = x.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        y = stem(x)
    (y.double() * g).sum().backward()
    return y, stem, x.grad


def test_routes_the_stems_only_and_keeps_the_keys():
    model = create_model("slowfast_tiny_resnet18", num_classes=3)
    keys = model.state_dict().keys()
    assert route_cpu_stems(model) == 2
    assert type(model.slow_stem) is CpuStem and type(model.fast_stem) is CpuStem
    assert model.state_dict().keys() == keys
    assert sum(type(m) is CpuStem for m in model.modules()) == 2


@pytest.mark.parametrize("layout", [CL, torch.contiguous_format])
@pytest.mark.parametrize("kwargs", [{}, {"temporal_pad": "replicate"},
                                    {"stride_t": 2, "pool_stride_t": 2}])
def test_bf16_stem_runs_in_float32(layout, kwargs):
    plain = _stem(**kwargs).to(memory_format=CL)
    routed = copy.deepcopy(plain)
    route_cpu_stems(routed)
    x = torch.randn(2, 3, 8, 32, 32).contiguous(memory_format=layout)
    with torch.no_grad():
        shape = copy.deepcopy(plain)(x).shape  # a copy: a forward updates the BN statistics
    # The upstream gradient of a bf16 output is bf16: draw one that bf16 holds exactly.
    g = torch.randn(shape).to(torch.bfloat16).double()

    ref_y, ref_stem, ref_gx = _run(copy.deepcopy(plain).double(), x.double(), g, bf16=False)
    results = {name: _run(m, x, g, bf16=True) for name, m in (("plain", plain),
                                                                ("routed", routed))}
    y, stem, _ = results["routed"]
    assert y.dtype == torch.bfloat16 and y.shape == ref_y.shape
    assert y.is_contiguous(memory_format=layout)

    def rel(a, b):
        return ((a.double() - b).abs().max() / b.abs().max()).item()

    # The float32 block's output is the float64 one rounded once to bf16.
    assert torch.equal(y, ref_y.to(torch.bfloat16)) or rel(y, ref_y) <= 2 ** -8
    for name, (yi, si, gxi) in results.items():
        errors = [rel(yi, ref_y), rel(gxi, ref_gx),
                  rel(si.conv.weight.grad, ref_stem.conv.weight.grad),
                  rel(si.bn.weight.grad, ref_stem.bn.weight.grad),
                  rel(si.bn.running_var, ref_stem.bn.running_var)]
        if name == "routed":
            routed_errors = errors
            # float32 math: the gradients and statistics are float32-exact, not bf16-rounded
            assert max(errors[2:]) < 1e-4, errors
        else:
            plain_errors = errors
    for r, p in zip(routed_errors, plain_errors):
        assert r <= p + 1e-6, (routed_errors, plain_errors)


def test_plain_stem_where_float32_does_not_pay():
    x = torch.randn(1, 3, 4, 32, 32)
    for stem, bf16 in ((_stem(), False),            # no autocast: nothing to change
                       (_stem(out_ch=64, kt=1), True),  # SlowFast's slow stem: bf16 is faster
                       (_stem(out_ch=32), True)):       # wide enough for bf16's kernels
        routed = copy.deepcopy(stem)
        route_cpu_stems(routed)
        assert not routed._fp32_call(x) or not bf16
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16), torch.no_grad():
            assert torch.equal(routed(x), stem(x))


@pytest.mark.parametrize("check", ["torch.jit.is_tracing", "torch.compiler.is_compiling",
                                   "torch.onnx.is_in_onnx_export"])
def test_traced_compiled_or_exported_stem_is_the_plain_stem(monkeypatch, check):
    stem = _stem()
    routed = copy.deepcopy(stem)
    route_cpu_stems(routed)
    x = torch.randn(1, 3, 4, 32, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        assert routed._fp32_call(x)
        monkeypatch.setattr(check, lambda: True)
        assert not routed._fp32_call(x)
        assert torch.equal(routed(x), stem(x))
