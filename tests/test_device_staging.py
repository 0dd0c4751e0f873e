"""The next batch's clips go to the GPU one batch ahead (zoo/data/device_staging.py), in training
and in evaluation: the order and the look-ahead on any device, the copy itself on a GPU
(``cuda``)."""

from __future__ import annotations

from typing import List

import pytest
import torch

from zoo.data.device_staging import DeviceStaging, one_ahead


def _run(n: int, stop_after: int = -1) -> List[str]:
    """The events of handing out ``n`` batches through :func:`one_ahead`: ``take i`` (taken from
    the source), ``stage i``, ``ready i``, ``use i`` (handed to the loop)."""
    events: List[str] = []

    def source():
        for i in range(n):
            events.append(f"take {i}")
            yield i

    def stage(i):
        events.append(f"stage {i}")
        return i, lambda: events.append(f"ready {i}")

    for i in one_ahead(source(), stage):
        events.append(f"use {i}")
        if i == stop_after:
            break
    return events


def test_each_batch_is_staged_while_the_one_before_is_handed_out():
    assert _run(3) == ["take 0", "stage 0", "take 1", "stage 1", "ready 0", "use 0",
                       "take 2", "stage 2", "ready 1", "use 1", "ready 2", "use 2"]


@pytest.mark.parametrize("n", [0, 1])
def test_short_sources(n):
    assert _run(n) == ["take 0", "stage 0", "ready 0", "use 0"][:4 * n]


def test_a_loop_that_stops_takes_only_one_batch_ahead():
    """A loop that breaks (the end of an accumulation, a preemption) has taken one batch
    beyond the last it used, no more: the resume point counts used batches only."""
    events = _run(10, stop_after=2)
    assert [e for e in events if e.startswith("take")] == [f"take {i}" for i in range(4)]
    assert events[-1] == "use 2"


@pytest.mark.cuda
def test_staged_clips_are_on_the_device_and_equal():
    device = torch.device("cuda")
    staging = DeviceStaging(device)
    batches = [(torch.randint(0, 256, (2, 3, 4, 8, 8), dtype=torch.uint8).pin_memory(),
                torch.tensor([i, 1]), torch.tensor([i, i + 1]), torch.tensor(0))
               for i in range(4)]
    out = list(staging(batches))
    assert len(out) == 4
    for (clips, *rest), (staged, *staged_rest) in zip(batches, out):
        assert staged.device.type == "cuda" and torch.equal(staged.cpu(), clips)
        assert all(a is b for a, b in zip(rest, staged_rest))  # the rest stays on the host
    # What is not a CPU tensor passes as it is.
    on_device = (torch.zeros(2, device=device), torch.tensor([0]))
    assert next(iter(staging([on_device]))) is on_device


@pytest.mark.cuda
def test_a_step_fed_staged_batches_trains_as_one_fed_the_loader():
    """The same losses, bit for bit, for a step fed staged batches as for one that copies them
    itself."""
    import zoo
    from zoo.train.step import TrainStep

    device = torch.device("cuda")
    batches = [(torch.randint(0, 256, (2, 3, 8, 32, 32), dtype=torch.uint8,
                              generator=torch.Generator().manual_seed(i)).pin_memory(),
                torch.tensor([i % 5, (i + 2) % 5]).pin_memory()) for i in range(4)]

    def losses(stage: bool) -> List[float]:
        torch.manual_seed(0)
        model = zoo.create_model("slowfast_tiny_resnet18", num_classes=5, width=8).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        step = TrainStep(model, opt, sched, device, 5,
                         normalization=((0.45,) * 3, (0.225,) * 3))
        feed = DeviceStaging(device)(batches) if stage else batches
        return [float(step(clips, labels)) for clips, labels in feed]

    torch.backends.cudnn.deterministic = True
    try:
        assert losses(True) == losses(False)
    finally:
        torch.backends.cudnn.deterministic = False


@pytest.mark.cuda
def test_evaluation_fed_staged_batches_scores_as_the_model_does():
    """run_inference stages its batches on a GPU: the scores are the model's own on each batch."""
    import zoo
    from zoo.infer.evaluator import run_inference

    device = torch.device("cuda")
    torch.manual_seed(0)
    model = zoo.create_model("slowfast_tiny_resnet18", num_classes=5, width=8).to(device).eval()
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(2, 3, 8, 32, 32, generator=g).pin_memory(), torch.tensor([i, 4]),
                torch.tensor([2 * i, 2 * i + 1]), torch.tensor(0)) for i in range(3)]
    torch.backends.cudnn.deterministic = True
    try:
        out = run_inference(model, batches, device)
        with torch.no_grad():
            expected = torch.cat([torch.softmax(model(c.to(device)).float(), dim=1).cpu()
                                  for c, *_ in batches])
    finally:
        torch.backends.cudnn.deterministic = False
    assert torch.equal(out["index"], torch.arange(6))
    assert torch.equal(out["probs"], expected)
