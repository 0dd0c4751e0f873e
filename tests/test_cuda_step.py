"""One training step of each model family under bf16 autocast on the GPU, against the float32
step on the CPU with the same weights and batch (the ``cuda`` parametrizations; the ``cpu`` ones
run the same body with CPU bf16, so the comparison itself is exercised everywhere)."""

import pytest
import torch
import torch.nn as nn

import zoo
from benchmarks.train import zoo_step

# One small representative per family: (name, builder kwargs, input shape).
VIDEO = (2, 3, 8, 32, 32)
FAMILIES = [
    ("resnet18", dict(base_width=8, layers=(1, 1, 1, 1)), (2, 3, 32, 32)),
    ("i3d_resnet50", dict(width=8, depth=18), VIDEO),
    ("slow_8x8_resnet50", dict(width=8, depth=18), VIDEO),
    ("slowfast_tiny_resnet18", dict(width=8), VIDEO),
    ("r2plus1d_resnet18", dict(width=8), VIDEO),
    ("ircsn_resnet152", dict(width=8, layers=(1, 1, 1, 1)), VIDEO),
    ("tsn_resnet18", dict(base_width=8, layers=(1, 1, 1, 1)), VIDEO),
    ("tpn_resnet50_f8s8", dict(width=8, depth=18), VIDEO),
    ("r3d_18", {}, VIDEO),
]
NUM_CLASSES = 5
# bf16 keeps 8 bits of mantissa (relative rounding 2**-9 per operation); a step's loss over a few
# dozen layers lands within ~1% of float32's. Twice that, plus a floor for losses near 0.
RTOL, ATOL = 2e-2, 2e-2

# Every family on the GPU; on the CPU (emulated bf16 on most CPUs: slow) three of them in the
# fast tier and the rest under `slow`.
CPU_FAST = {"resnet18", "slowfast_tiny_resnet18", "r2plus1d_resnet18"}
CASES = [pytest.param(name, kwargs, shape, "cuda", marks=pytest.mark.cuda, id=f"{name}-cuda")
         for name, kwargs, shape in FAMILIES] + [
    pytest.param(name, kwargs, shape, "cpu", id=f"{name}-cpu",
                 marks=() if name in CPU_FAST else pytest.mark.slow)
    for name, kwargs, shape in FAMILIES]


def _without_randomness(model: nn.Module) -> nn.Module:
    """Dropout and stochastic depth off: the two devices' random streams differ."""
    for m in model.modules():
        if isinstance(m, nn.Dropout) or type(m).__name__ in ("StochasticDepth", "DropPath"):
            m.p = 0.0
    return model


def _step(name, kwargs, state, device, precision, clips, labels):
    """The loss of one train step (forward, backward, SGD update) as zoo's trainer runs it on
    ``device`` in ``precision``; the updated weights stay on ``device`` and finite."""
    model = _without_randomness(zoo.create_model(name, num_classes=NUM_CLASSES, **kwargs))
    model.load_state_dict(state)
    step, resolved, _ = zoo_step(model, torch.device(device), NUM_CLASSES, precision)
    assert resolved == precision
    loss = float(step(clips, labels))
    params = list(model.parameters())
    assert all(p.device.type == torch.device(device).type for p in params)
    assert all(torch.isfinite(p).all() for p in params)
    return loss


@pytest.mark.parametrize("name,kwargs,shape,device", CASES)
def test_bf16_step_matches_cpu_fp32(name, kwargs, shape, device):
    torch.manual_seed(0)
    state = _without_randomness(zoo.create_model(name, num_classes=NUM_CLASSES,
                                                 **kwargs)).state_dict()
    g = torch.Generator().manual_seed(1)
    clips = torch.randn(shape, generator=g)
    labels = torch.randint(0, NUM_CLASSES, (shape[0],), generator=g)

    want = _step(name, kwargs, state, "cpu", "fp32", clips, labels)
    got = _step(name, kwargs, state, device, "bf16", clips, labels)
    assert abs(got - want) <= ATOL + RTOL * abs(want), (
        f"{name}: loss {got:.5f} in bf16 on {device}, {want:.5f} in fp32 on cpu")
