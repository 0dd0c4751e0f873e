"""One pass of the training loader over many epochs, so its workers never wait for an epoch to
begin.

A DataLoader's workers make batches only for the iterator the loop holds. Iterated once per
epoch, they start on epoch e + 1 when the loop asks for its first batch, after epoch e's last
step, its validation and its checkpoint: the device then waits for the first batches' decode at
every boundary. :class:`EpochStream` makes the training sampler serve epochs ``first .. end - 1``
back to back (``EpochSampler.set_epochs``, or ``MultigridBatchSampler.set_epochs`` for multigrid)
and reads that one iterator epoch by epoch; the workers keep ``prefetch_factor`` batches each in
flight across the boundary, so the next epoch's first batches are being made while the current
one ends and while validation and the checkpoint run.

Every batch is the one a pass per epoch gives: an epoch's order and each item's randomness are
functions of (SEED, epoch, index), whichever worker makes it. Of each epoch the stream serves the
batches the trainer trains (``batches(epoch)``: a partial accumulation at its end is never
decoded), and of the first one the batches after ``skip`` (a mid-epoch resume; those are drawn,
never decoded).
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator, Optional

from torch.utils.data import DataLoader


def set_loader_epoch(loader: Any, epoch: int, skip_batches: int = 0) -> None:
    """Point ``loader``'s next pass at ``epoch`` alone, without its first ``skip_batches``
    batches (a loader whose sampler has no ``set_epoch`` is left as it is)."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    sampler = getattr(loader, "sampler", None)
    if hasattr(batch_sampler, "set_epoch"):  # multigrid: its batches know the epoch's shapes
        batch_sampler.set_epoch(epoch, skip_batches)
    elif hasattr(sampler, "set_epoch"):
        if skip_batches:
            sampler.set_epoch(epoch, skip_batches * loader.batch_size)
        else:
            sampler.set_epoch(epoch)


class EpochStream:
    """Epochs ``first .. end - 1`` of a training loader in one pass, read one epoch at a time.

    Build it with :meth:`open`. :meth:`epoch` hands out the next epoch's batches (with the
    loader's bad-video checks, ``GuardedLoader.guard``, per epoch); :meth:`stop` gives the pass
    up (precise BN reads the loader on its own; a later epoch opens a new stream).

    Attributes:
        next_epoch: The epoch :meth:`epoch` serves next (``end`` once all are served).
    """

    def __init__(self, loader: DataLoader, first: int, end: int, skip: int,
                 batches: Callable[[int], int]) -> None:
        self.loader, self.end, self.next_epoch = loader, end, first
        self._skip, self._batches = skip, batches
        # DataLoader's own iterator (persistent workers: the loader keeps it), not the guarded
        # one, whose checks would count over the whole pass instead of per epoch.
        self._iterator: Optional[Iterator] = DataLoader.__iter__(loader)

    @classmethod
    def open(cls, loader: Any, first: int, end: int, skip: int,
             batches: Callable[[int], int]) -> Optional["EpochStream"]:
        """Start ``loader``'s pass over epochs ``first .. end - 1``: of epoch e its first
        ``batches(e)`` batches, of ``first`` without the first ``skip``.

        Returns:
            The stream, or None when ``loader``'s sampler cannot span epochs (then iterate it
            per epoch, after :func:`set_loader_epoch`).
        """
        if not isinstance(loader, DataLoader):
            return None
        batch_sampler, sampler = loader.batch_sampler, loader.sampler
        if hasattr(batch_sampler, "set_epochs"):
            batch_sampler.set_epochs(first, end, skip, batches)
        elif hasattr(sampler, "set_epochs") and loader.batch_size:
            n = loader.batch_size  # whole batches per epoch: batches never straddle two epochs
            sampler.set_epochs(first, end, skip * n, lambda e: batches(e) * n)
        else:
            return None
        return cls(loader, first, end, skip, batches)

    def epoch(self, epoch: int) -> Iterator:
        """The batches of ``epoch``, which must be :attr:`next_epoch`."""
        if self._iterator is None or epoch != self.next_epoch:
            raise RuntimeError(f"this stream serves epoch {self.next_epoch + 1} next, not "
                               f"{epoch + 1}" if self._iterator is not None else
                               "this stream was stopped")
        skip, self._skip = self._skip, 0
        self.next_epoch += 1
        count = max(0, self._batches(epoch) - skip)
        batches = itertools.islice(self._iterator, count)
        guard = getattr(self.loader, "guard", None)
        return guard(batches) if guard is not None else batches

    def stop(self, epoch: Optional[int] = None) -> None:
        """Give the pass up. With ``epoch``, point the loader's next pass at that epoch alone, from
        its start (as a loop over that epoch leaves it); batches made ahead are dropped when the
        loader is next iterated."""
        self._iterator = None
        self.next_epoch = self.end
        if epoch is not None:
            set_loader_epoch(self.loader, epoch)
