"""The training batches of a multigrid run (``CONFIG.TRAIN.MULTIGRID``): each epoch's clip shape
comes from the long cycle, each iteration's crop and batch from the short cycle (PySlowFast's
``ShortCycleBatchSampler``); the rules are in :mod:`zoo.solver.multigrid`.

:class:`MultigridBatchSampler` hands the dataset keys ``(epoch, index, frames, crop,
min short side, max frame stride)``; ``ClipDataset`` trains such an item at that shape, its
randomness still drawn from (SEED, epoch, index). Shapes are a function of (epoch, iteration), so
N processes see the shapes of one, and a run resumed mid-epoch continues at the same shapes.
"""

from __future__ import annotations

from typing import Callable, Iterator, List, Optional, Tuple

from torch.utils.data import Sampler

from ..config import ConfigError
from ..solver.multigrid import EpochShape, MultigridPlan


class MultigridBatchSampler(Sampler):
    """Batches of keys for a multigrid epoch.

    Args:
        sampler: The :class:`~zoo.data.build.EpochSampler` of the training set (yields
            ``(epoch, index)``; its ``set_epoch`` is called through this sampler).
        plan: The run's :class:`~zoo.solver.multigrid.MultigridPlan`.
        short_side_range: ``CONFIG.DATA.TRAIN_SHORT_SIDE_RANGE``; its minimum is scaled by
            crop / default crop for every shape (PySlowFast's rule), the maximum kept.
    """

    def __init__(self, sampler, plan: MultigridPlan, short_side_range: List[int]) -> None:
        self.sampler = sampler
        self.plan = plan
        self.short_side_range = [int(v) for v in short_side_range]
        self.epoch = 0
        self.skip = 0
        self.span: Optional[Tuple[int, int, int, Callable[[int], int]]] = None

    def set_epoch(self, epoch: int, skip_batches: int = 0) -> None:
        """Serve ``epoch`` next, leaving out its first ``skip_batches`` batches (their indices
        are drawn, never decoded)."""
        self.epoch, self.skip, self.span = epoch, skip_batches, None
        self.sampler.set_epoch(epoch)

    def set_epochs(self, first: int, end: int, skip_batches: int,
                   take: Callable[[int], int]) -> None:
        """Serve epochs ``first .. end - 1`` back to back in the next pass (one loader iterator
        spans them, see :mod:`zoo.data.epoch_stream`): of each epoch its first ``take(epoch)``
        batches, of ``first`` without its first ``skip_batches``."""
        self.span = (first, end, skip_batches, take)

    def shape(self, epoch: int) -> EpochShape:
        return self.plan.epoch_shape(epoch)

    def batch_sizes(self, epoch: int) -> List[int]:
        """Batch size of each full batch of ``epoch`` (the last partial batch is dropped)."""
        shapes = self.shape(epoch).shapes
        left, sizes = len(self.sampler), []
        while left >= shapes[len(sizes) % len(shapes)][0]:
            size = shapes[len(sizes) % len(shapes)][0]
            sizes.append(size)
            left -= size
        return sizes

    def batches_in_epoch(self, epoch: int) -> int:
        return len(self.batch_sizes(epoch))

    def check(self, epochs: int) -> None:
        """Raise ConfigError when an epoch of the plan has no full batch."""
        for epoch in range(epochs):
            if not self.batch_sizes(epoch):
                largest = self.shape(epoch).shapes[0][0]
                raise ConfigError(
                    f"CONFIG.TRAIN.MULTIGRID: epoch {epoch + 1} trains batches of {largest} clips "
                    f"per process but each process gets {len(self.sampler)} training videos: "
                    "lower CONFIG.TRAIN.BATCH_SIZE or the cycle factors")

    def _key(self, epoch: int, index: int, shape: EpochShape, crop: int) -> Tuple[int, ...]:
        low, high = self.short_side_range
        low = int(round(low * crop / self.plan.default_s))
        return (epoch, index, shape.frames, crop, max(low, crop), shape.frame_rate_max)

    def __iter__(self) -> Iterator[List[Tuple[int, ...]]]:
        # A skip or a span applies to one pass only (precise BN re-reads the epoch from its
        # start). Taken when the first batch is asked for, not by iter(): a DataLoader makes an
        # iterator of its batch sampler twice when it starts and uses the second.
        if self.span is not None:
            span, self.span = self.span, None
            yield from self._spanning(*span)
            return
        epoch, skip, self.skip = self.epoch, self.skip, 0
        yield from self._epoch(epoch, skip, None)

    def _spanning(self, first: int, end: int, skip: int,
                  take: Callable[[int], int]) -> Iterator[List[Tuple[int, ...]]]:
        for epoch in range(first, end):
            self.epoch = epoch
            self.sampler.set_epoch(epoch)  # the epoch's order, drawn by _epoch's iter()
            yield from self._epoch(epoch, skip if epoch == first else 0, take(epoch))

    def _epoch(self, epoch: int, skip: int,
               take: Optional[int]) -> Iterator[List[Tuple[int, ...]]]:
        shape = self.shape(epoch)
        shapes = shape.shapes
        keys = iter(self.sampler)
        sizes = self.batch_sizes(epoch)
        for number, size in enumerate(sizes[:take]):
            crop = shapes[number % len(shapes)][1]
            batch = [next(keys) for _ in range(size)]
            if number >= skip:
                yield [self._key(e, i, shape, crop) for e, i in batch]

    def __len__(self) -> int:
        return self.batches_in_epoch(self.epoch)
