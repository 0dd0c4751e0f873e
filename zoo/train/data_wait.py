"""How long the training loop waits for its data: the host time between the end of one step and
the next batch in hand, summed over an epoch, and its share of the epoch's wall time.

A share near 0 means the loader keeps up and the model is the limit; a large share means the
model waits for the loader (more ``DATA.NUM_WORKERS``, a cheaper decode, or shorter keyframe
intervals help; see docs/benchmarks.md). Two clock readings per step, no device sync.

On CUDA this is host time: the step queues its kernels and returns, so while the loop blocks on
the loader the GPU may still be finishing queued work, and the share can exceed the GPU's idle
time for want of data. Where ``CONFIG.TRAIN.NONFINITE`` reads its verdict before the update (see
zoo/train/nonfinite.py) every optimizer step waits for the device once, so at most the update's
kernels overlap the wait and the share is close to that idle time.
"""

from __future__ import annotations

from time import perf_counter  # bound here: a test that fakes time.perf_counter leaves it alone


class DataWait:
    """Sums the waits of one epoch: :meth:`start` at its beginning, :meth:`batch_ready` when a
    batch has arrived (before its step), :meth:`step_done` after its step; ``waited`` over
    :meth:`elapsed` at the end is the share (:meth:`share`)."""

    def __init__(self, clock=perf_counter) -> None:
        self.clock = clock
        self.started = self.ready = clock()
        self.waited = 0.0

    def start(self) -> None:
        """A new epoch: the first wait is counted from here (worker start-up included)."""
        self.started = self.ready = self.clock()
        self.waited = 0.0

    def batch_ready(self) -> None:
        self.waited += self.clock() - self.ready

    def step_done(self) -> None:
        self.ready = self.clock()

    def elapsed(self) -> float:
        """Seconds since :meth:`start`."""
        return self.clock() - self.started

    def share(self) -> float:
        """This process's wait over the seconds since :meth:`start`."""
        return self.waited / max(self.elapsed(), 1e-9)
