"""The next batch's clips copied to the GPU while the current step computes (the trainer's loop,
and the evaluator's).

A batch copied at the start of its own step (``clips.to(device, non_blocking=True)`` on the
compute stream) is queued behind the previous step's kernels, and the step's kernels behind it:
the GPU's compute units idle for the copy, every step. For SlowFast-R50 8x8 at batch 16 that is
77 MB of uint8 pixels, 1.5-3 ms at PCIe's 25-50 GB/s, against a compiled step of ~45 ms. Here
each batch is copied on a stream of its own one batch ahead, so the copy runs beside the step
before it; the compute stream waits for it on the device (an event), never the host.

Validation batches are float32 (the loader normalises them), four times the bytes: there the
copy is a larger share of a forward than of a training step.

torch has no loader-side device prefetch; timm's ``PrefetchLoader`` does this for its image
batches, with its own normalisation and input layout, so zoo keeps a small one for its batches
(the trainer's step normalises them, as without staging).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Optional, Tuple

import torch

Staged = Tuple[Any, Callable[[], None]]


def one_ahead(batches: Iterable, stage: Callable[[Any], Staged]) -> Iterator:
    """The batches of ``batches``, each passed through ``stage`` when the one before it is handed
    out: ``stage(batch)`` starts the batch's move and returns ``(batch, ready)``; ``ready()`` runs
    just before the batch is handed out. At most one batch is taken from ``batches`` ahead of
    the one handed out (a loop that stops early leaves the rest untaken)."""
    pending: Optional[Staged] = None
    for batch in batches:
        staged = stage(batch)
        if pending is not None:
            pending[1]()
            yield pending[0]
        pending = staged
    if pending is not None:
        pending[1]()
        yield pending[0]


class DeviceStaging:
    """Copies a batch's clips (``batch[0]``, a CPU tensor, pinned by the loader) to ``device`` on
    a copy stream; the rest of the batch stays as it is (labels are a few bytes: the step copies
    them). The step then finds its clips on the device and only normalises them.

    Args:
        device: A CUDA device.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device)

    def __call__(self, batches: Iterable) -> Iterator:
        """``batches`` with each batch's clips on the device, copied one batch ahead."""
        return one_ahead(batches, self.stage)

    def stage(self, batch: Any) -> Staged:
        clips = batch[0] if isinstance(batch, (tuple, list)) and batch else None
        if not (isinstance(clips, torch.Tensor) and clips.device.type == "cpu"):
            return batch, _nothing
        compute = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self.stream):
            on_device = clips.to(self.device, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self.stream)

        def ready() -> None:
            compute.wait_event(copied)
            # Made on the copy stream, used on the compute stream: the allocator must not hand
            # its memory out again before the compute stream is done with it.
            on_device.record_stream(compute)

        return (on_device, *batch[1:]), ready


def _nothing() -> None:
    pass
