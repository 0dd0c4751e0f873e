"""Bad input never stops or hangs training: the shared bad-video table and the guarded loader.

* :class:`BadVideoTable` is one byte per video in shared memory, so every DataLoader worker of a
  process sees what the others found: a video found bad is skipped at once afterwards (a hanging
  file costs its time limit once, not once per epoch and worker), it is warned about once, and the
  main process can name examples when it stops the job.
* :class:`GuardedLoader` is the DataLoader ``build_loader`` returns. While iterating it counts the
  items whose own video was unreadable (the ``n_bad`` field) and raises :class:`TooManyBadVideos`
  when more than ``max_bad_fraction`` of an epoch's items were: exactly at the end of the epoch,
  and early at a few checkpoints (64, 128, 256, ... items) when the count is far (3 standard
  deviations) above the limit, so that a wrong data root stops a long epoch in seconds without a
  noisy start stopping a healthy run. With workers and a ``timeout`` its iterator bounds every
  wait for a batch (:mod:`zoo.data.loader_timeout`).
"""

from __future__ import annotations

import atexit
import logging
import math
import weakref
from typing import Iterator, List, Sequence

import torch
from torch.utils.data import DataLoader

from ..utils.errors import UserError
from .decode.base import BAD_KINDS, KIND_NAMES
from .loader_timeout import WatchedWorkersIterator

logger = logging.getLogger(__name__)


class TooManyBadVideos(UserError, RuntimeError):
    """More than ``CONFIG.DATA.MAX_BAD_FRACTION`` of the videos read could not be decoded."""


class NoReadableVideo(UserError, RuntimeError):
    """An item found no readable video: its own and every replacement tried
    (``CONFIG.DATA.MAX_TRIES``) could not be decoded. ``failures`` holds one
    ``"<path> (<why>)"`` per video tried."""

    def __init__(self, message: str, failures: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.failures = list(failures)


class BadVideoTable:
    """Which videos of a dataset were found unreadable, shared by all its loader workers.

    Args:
        size: Number of videos.
    """

    def __init__(self, size: int) -> None:
        # A shared tensor: fork and spawn workers both write into the parent's copy.
        self.codes = torch.zeros(max(size, 1), dtype=torch.uint8).share_memory_()

    def is_bad(self, index: int) -> bool:
        return bool(self.codes[index])

    def mark(self, index: int, kind: str) -> bool:
        """Record ``index`` as bad; returns True the first time (the caller then warns)."""
        first = not bool(self.codes[index])
        self.codes[index] = BAD_KINDS.get(kind, BAD_KINDS["other"])
        return first

    def bad_indices(self) -> List[int]:
        return torch.nonzero(self.codes).flatten().tolist()

    def examples(self, paths: Sequence[str], limit: int = 5) -> List[str]:
        """``path (reason)`` for up to ``limit`` bad videos, in list order."""
        out = []
        for index in self.bad_indices()[:limit]:
            out.append(f"{paths[index]} ({KIND_NAMES.get(int(self.codes[index]), 'other')})")
        return out


def _too_many(bad: int, seen: int, fraction: float, exact: bool) -> bool:
    if seen == 0:
        return False
    if exact:
        return bad > fraction * seen
    # Early check: well above the limit, so a healthy list is not stopped by a bad start.
    margin = 3.0 * math.sqrt(seen * fraction * (1.0 - fraction)) + 1.0
    return bad > fraction * seen + margin


class GuardedLoader(DataLoader):
    """A DataLoader that stops the job when too many of an epoch's videos are unreadable.

    Items must be ``(clip, label, index, n_bad)``. Takes the DataLoader arguments plus:

    Args:
        max_bad_fraction: Largest share of an epoch's items allowed to need a stand-in video;
            1.0 = never stop.
        split: Named in the error message.
        clips_per_item: Rows of a batch per item (``CONFIG.DATA.CLIPS_PER_VIDEO`` for training:
            a video's ``n_bad`` is on the first of its rows, see ``collate_clips``).
    """

    def __init__(self, *args, max_bad_fraction: float = 1.0, split: str = "",
                 clips_per_item: int = 1, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.max_bad_fraction = float(max_bad_fraction)
        self.split = split
        self.clips_per_item = int(clips_per_item)

    def _get_iterator(self):
        if self.num_workers > 0 and self.timeout > 0:
            # LOADER_TIMEOUT also for a batch whose unpickling blocks on a stuck worker.
            self.check_worker_number_rationality()
            iterator = WatchedWorkersIterator(self)
        else:
            iterator = super()._get_iterator()
        _ITERATORS.add(iterator)
        return iterator

    def __iter__(self) -> Iterator:
        return self.guard(super().__iter__())

    def guard(self, batches: Iterator) -> Iterator:
        """``batches``, one epoch of this loader's batches, with the bad-video checks applied
        (:func:`zoo.data.epoch_stream.EpochStream` hands each epoch of its pass through here)."""
        if self.max_bad_fraction >= 1.0:
            return batches
        return self._guarded(batches)

    def _guarded(self, batches: Iterator) -> Iterator:
        seen = bad = 0
        next_check = 64
        for batch in batches:
            n_bad = batch[3]
            seen += len(n_bad) // self.clips_per_item
            bad += int(n_bad.sum())
            if seen >= next_check:
                next_check *= 2
                self._check(bad, seen, exact=False)
            yield batch
        self._check(bad, seen, exact=True)

    def _check(self, bad: int, seen: int, exact: bool) -> None:
        if not _too_many(bad, seen, self.max_bad_fraction, exact):
            return
        dataset = self.dataset
        table = getattr(dataset, "bad_videos", None)
        paths = getattr(dataset, "paths", None)
        examples = table.examples(paths) if table is not None and paths is not None else []
        where = f" ({getattr(dataset, 'anno_path', '')})" if hasattr(dataset, "anno_path") else ""
        raise TooManyBadVideos(
            f"{bad} of {seen} {self.split} videos{where} read so far in this epoch could not be "
            f"decoded ({100.0 * bad / seen:.1f}%), more than CONFIG.DATA.MAX_BAD_FRACTION = "
            f"{self.max_bad_fraction:g}. Examples: {'; '.join(examples) or 'see the warnings'}. "
            "Check CONFIG.DATA.*_DATA_PATH and the files, remove broken ones from the list, or "
            "raise MAX_BAD_FRACTION"
        )


# The loader iterators of this process that may still have worker processes.
_ITERATORS: "weakref.WeakSet" = weakref.WeakSet()


@atexit.register
def _stop_workers_at_exit() -> None:
    """Stop the loader workers still running when the process exits, the DataLoader's own way.

    A script that leaves a loop over a loader early and ends keeps the loader's workers alive until
    exit (persistent workers always are). Python's multiprocessing would then send them SIGTERM,
    which a worker built with a ``signal_grace`` outlives by that grace + 5 s
    (``zoo.data.workers.seed_worker``):
    the script would hang for a minute after its last line.
    This runs before multiprocessing's exit handler (registered earlier, run later) and asks each
    worker to stop through its index queue instead.
    """
    for iterator in list(_ITERATORS):
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
