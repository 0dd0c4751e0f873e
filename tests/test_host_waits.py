"""A training step never makes the host wait for the device.

On a GPU, a copy from pageable host memory (``torch.tensor(values, device="cuda")``,
``cpu_tensor.to("cuda")`` without ``non_blocking``) starts only after all the work queued before
it: the host waits for the GPU, and the GPU then idles while the host launches the next kernels.
Done in every step (the batch's normalisation constants, SlowFast's slow-frame indices, MViTv2's
relative-position indices in every attention layer), it keeps the host from running ahead.

Without a GPU, the step runs on the ``meta`` device (shapes only), and every such call is
recorded: a blocking copy from the CPU to another device, and a tensor made from host values
directly on another device. Reading a value back (``.item()``, ``.cpu()``) fails there by itself.
On a GPU, torch's sync debug mode checks the same step for any wait (``cuda`` tests).
"""

from __future__ import annotations

from typing import List

import pytest
import torch
from helpers import fast_sample
from test_models import ARCHS, IMAGE_INPUT, SMALL_INPUT, VIDEO_INPUT, _small_kwargs
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import zoo
from zoo.accel import pad_stems
from zoo.data.transforms import normalize_batch
from zoo.models import model_facts
from zoo.solver.lr_scheduler import WarmupScheduler
from zoo.train.step import TrainStep
from zoo.utils.device_constants import _filled, device_constant

META = torch.device("meta")
MEAN, STD = (0.45, 0.45, 0.45), (0.225, 0.225, 0.225)
# The two families whose forward made such copies, small.
STEP_MODELS = {"slowfast_tiny_resnet18": dict(width=8),
               "mvit_v2_s": dict(frames=8, crop_size=32, embed_dim=16)}


def _off_cpu(device) -> bool:
    return device is not None and torch.device(device).type != "cpu"


class _Factories(TorchFunctionMode):
    """Records tensors made from host values on another device (``torch.tensor(..., device=)``
    copies below the dispatcher, so only its Python call shows it)."""

    def __init__(self, seen: List[str]) -> None:
        super().__init__()
        self.seen = seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        factory = func in (torch.tensor, torch.as_tensor, torch.asarray)
        if factory and _off_cpu(kwargs.get("device")):
            self.seen.append(f"torch.{func.__name__}(..., device={kwargs['device']})")
        return func(*args, **kwargs)


class _Copies(TorchDispatchMode):
    """Records blocking copies from the CPU to another device."""

    def __init__(self, seen: List[str]) -> None:
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default:
            src, blocking = args[0], not kwargs.get("non_blocking", False)
            if src.device.type == "cpu" and _off_cpu(kwargs.get("device")) and blocking:
                self.seen.append(f"a blocking copy of a CPU tensor {tuple(src.shape)}")
        elif func is torch.ops.aten.copy_.default:
            dst, src = args[0], args[1]
            blocking = not kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
            # a 0-dim CPU source is a scalar argument, passed by value
            if src.device.type == "cpu" and dst.device.type != "cpu" and blocking and src.dim():
                self.seen.append(f"a blocking copy_ from a CPU tensor {tuple(src.shape)}")
        return func(*args, **kwargs)


class HostWaits:
    """``with HostWaits() as waits:`` records in ``waits.seen`` what would make the host wait."""

    def __enter__(self) -> "HostWaits":
        self.seen: List[str] = []
        self._modes = [_Factories(self.seen), _Copies(self.seen)]
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)


def test_the_detector_sees_the_copies_that_wait():
    """The check can fail: each kind of waiting call is recorded, the batch's own copy is not."""
    with HostWaits() as waits:
        torch.tensor([1.0, 2.0], device=META)
        torch.arange(3).to(META)
        torch.empty(3, device=META).copy_(torch.ones(3))
        torch.zeros(2, 3, dtype=torch.uint8).to(META, non_blocking=True)  # as prepare() copies
    assert len(waits.seen) == 3, waits.seen


@pytest.mark.parametrize("values,dtype", [
    ([1.0 / (255.0 * s) for s in (0.225, 0.224, 0.229)], torch.float32),
    ([0.45 / 0.225, 0.406 / 0.224, 0.485 / 0.229], torch.float32),
    ([0.1, 1e-8, 3.0e5], torch.bfloat16),
    ([0, 4, 8, 13, 17, 22, 26, 31], torch.long),
])
def test_filled_values_equal_torch_tensor(values, dtype):
    """The fill path gives the values, dtype and rounding ``torch.tensor`` gives."""
    filled = _filled(values, torch.device("cpu"), dtype)
    assert filled.dtype == dtype and torch.equal(filled, torch.tensor(values, dtype=dtype))


def test_device_constant_waits_for_nothing():
    with HostWaits() as waits:
        out = device_constant([0, 4, 8], META, torch.long)
        batch = torch.zeros(2, 3, 4, 8, 8, dtype=torch.uint8).to(META, non_blocking=True)
        x = normalize_batch(batch, MEAN, STD)
    assert waits.seen == []
    assert out.shape == (3,) and out.dtype == torch.long and x.dtype == torch.float32
    # On the CPU it is torch.tensor itself.
    assert torch.equal(device_constant([0, 4, 8], torch.device("cpu"), torch.long),
                       torch.tensor([0, 4, 8]))


@pytest.mark.parametrize("name", list(STEP_MODELS))
def test_a_training_step_on_a_device_waits_for_nothing(name):
    """The trainer's step as it runs on a GPU: a uint8 batch copied and normalised on the
    device, channels-last, Mixup/CutMix, label smoothing, gradient clipping, EMA, the optimizer
    and the LR schedule, the RGB stems folded and padded; three steps."""
    with META:
        model = zoo.create_model(name, num_classes=5, **STEP_MODELS[name])
    assert pad_stems(model) >= 1  # as the trainer does on a GPU (STEM_PAD_CHANNELS auto)
    # The fused kernels have no meta implementation (nor, on torch 2.3, AdamW's multi-tensor
    # ones); on a GPU the fused step is checked by the cuda test below and test_nonfinite.py.
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4,
                          foreach=True)
    sched = WarmupScheduler(opt, base_lr=0.1, total_iters=10, policy="Cosine", milestones=[],
                            gamma=0.1, factors=[], warmup_iters=2, warmup_start_lr=0.01,
                            warmup_end_lr=0.1)
    step = TrainStep(model, opt, sched, META, 5, channels_last=True, clip_grad_norm=1.0,
                     label_smoothing=0.1, mixup_alpha=0.8, cutmix_alpha=1.0, ema_decay=0.99,
                     normalization=(MEAN, STD))
    clips = torch.zeros(2, 3, 8, 32, 32, dtype=torch.uint8)
    labels = torch.tensor([0, 3])
    with HostWaits() as waits:
        for _ in range(3):
            loss = step(clips, labels)
    assert waits.seen == [], f"{name}: {len(waits.seen)} waits: {sorted(set(waits.seen))[:4]}"
    assert loss.device == META and step.steps == 3


# MViTv2's reversible variant asks autocast about its input's device, which has no meta
# autocast; its attention is mvit_layers', checked through mvit_v2_*.
NO_META = ("mvit_rev_",)


@pytest.mark.parametrize("name", fast_sample([a for a in ARCHS if not a.startswith(NO_META)]))
def test_forward_backward_on_a_device_waits_for_nothing(name):
    with META:
        model = zoo.create_model(name, num_classes=5, **_small_kwargs(name)).train()
    task = model_facts(name).get("task", "video")
    x = torch.randn(SMALL_INPUT.get(name, IMAGE_INPUT if task == "image" else VIDEO_INPUT),
                    device=META)
    with HostWaits() as waits:
        model(x).logsumexp(dim=1).sum().backward()
    assert waits.seen == [], f"{name}: {len(waits.seen)} waits: {sorted(set(waits.seen))[:4]}"


@pytest.mark.cuda
@pytest.mark.parametrize("name", list(STEP_MODELS))
def test_a_cuda_training_step_waits_for_nothing(name):
    """The same step on a GPU as the trainer builds it there (the fused optimizer, the
    non-finite check left on the device, bf16), fed a pinned uint8 batch: under torch's sync
    debug mode any call that waits for the device raises."""
    from zoo.solver.optimizer import make_optimizer

    device = torch.device("cuda")
    torch.manual_seed(0)
    model = zoo.create_model(name, num_classes=5, **STEP_MODELS[name]).to(device)
    opt = make_optimizer("AdamW", [{"params": list(model.parameters())}], 0.1,
                         weight_decay=0.05)
    sched = WarmupScheduler(opt, base_lr=0.1, total_iters=20, policy="Cosine", milestones=[],
                            gamma=0.1, factors=[], warmup_iters=2, warmup_start_lr=0.01,
                            warmup_end_lr=0.1)
    step = TrainStep(model, opt, sched, device, 5, precision="bf16", channels_last=True,
                     clip_grad_norm=1.0, label_smoothing=0.1, ema_decay=0.99,
                     nonfinite="skip", normalization=(MEAN, STD))
    clips = torch.randint(0, 256, (2, 3, 8, 32, 32), dtype=torch.uint8).pin_memory()
    labels = torch.tensor([0, 3]).pin_memory()
    for _ in range(3):  # the first update is checked at once; cuDNN picks its kernels
        step(clips, labels)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            loss = step(clips, labels)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    step.settle()
    assert torch.isfinite(loss) and step.steps == 6 and step.skipped == 0


def test_crops_resized_on_a_device_wait_for_nothing():
    """A batch of cuts (``CONFIG.DATA.RESIZE_ON "device"``) resized, flipped and normalised on
    the device: the geometry is read on the host, nothing is copied from it."""
    from zoo.data.device_crops import CropGeometry, resize_cuts

    cuts = torch.zeros(3, 3, 8, 40, 40, dtype=torch.uint8).to(META, non_blocking=True)
    geometry = CropGeometry(torch.tensor([[36, 1, 32], [32, 0, 32], [28, 1, 32]]))
    with HostWaits() as waits:
        clips = normalize_batch(resize_cuts(cuts, geometry), MEAN, STD)
    assert waits.seen == []
    assert clips.shape == (3, 3, 8, 32, 32) and clips.device == META
