"""``CONFIG.TRAIN.NONFINITE``: is each optimizer step's loss and gradient finite on every rank,
and what happens when it is not ("stop": one line and a non-zero exit; "skip": the update is
dropped and counted).

Each step's verdict is a ``world``-long vector of codes on the device, all-reduced so that every
rank decides alike: 2 where a rank's own loss is non-finite (a root cause: DDP's all-reduce
spreads one rank's NaN gradients to every rank), 1 where only its gradients are. The host reads
it in one of two ways (:class:`~zoo.train.step.TrainStep` picks):

- at once (:meth:`NonFiniteCheck.decide`), before the update: one host-device sync per step;
- one step late (:meth:`NonFiniteCheck.defer`, then :meth:`NonFiniteCheck.collect`): the fused
  optimizer kernel skips the update on the device itself (the ``found_inf`` tensor torch's
  GradScaler hands it), so no step waits for the device; the verdict is copied to the host
  behind the step's kernels and read at the next optimizer step, when the device has long
  finished it, or at the end of the epoch.
"""

from __future__ import annotations

import logging
from typing import List, NamedTuple, Optional

import torch
import torch.nn as nn

from ..utils import comm
from ..utils.errors import NonFiniteLoss
from .checkpoint import unwrap

logger = logging.getLogger(__name__)


class _Deferred(NamedTuple):
    """A verdict on its way to the host: what :meth:`NonFiniteCheck.collect` needs to act on it."""

    iteration: int
    codes: torch.Tensor  # on the host once ``done`` has completed
    done: Optional[torch.cuda.Event]  # None: ``codes`` was copied synchronously (a CPU device)
    loss: torch.Tensor
    params: List[nn.Parameter]  # the parameters that had gradients, in ``norms`` order
    norms: Optional[torch.Tensor]  # their gradients' norms (this rank's shards), before clipping


class NonFiniteCheck:
    """The finiteness verdict of optimizer steps and its consequence.

    Args:
        mode: "stop" or "skip".
        model: The model being trained (plain or wrapped), for the names in the message.
        device: Where the step's loss and gradients live.
    """

    def __init__(self, mode: str, model: nn.Module, device: torch.device) -> None:
        self.mode = mode
        self.model = model
        self.device = device
        self._pending: Optional[_Deferred] = None
        self._pinned: Optional[torch.Tensor] = None  # the host side of a CUDA verdict, reused

    def codes(self, loss: torch.Tensor, grad_norm: Optional[torch.Tensor]) -> torch.Tensor:
        """This step's code vector, on the device and all-reduced (no host-device sync).

        Args:
            loss: The sum of the step's micro-batch losses.
            grad_norm: A norm of this rank's gradients (non-finite iff one of them is), or None
                to check the loss only.
        """
        loss_bad = ~torch.isfinite(loss).all()
        grad_bad = torch.zeros((), dtype=torch.bool, device=loss.device)
        if grad_norm is not None:
            grad_bad = ~torch.isfinite(grad_norm)
        world, rank = comm.get_world_size(), comm.get_rank()
        codes = torch.zeros(world, device=self.device)
        codes[rank] = torch.where(loss_bad, 2.0, torch.where(grad_bad, 1.0, 0.0))
        return comm.all_reduce_sum(codes)

    def decide(self, iteration: int, codes: torch.Tensor, loss: torch.Tensor) -> bool:
        """Read ``codes`` now (the one sync); the live gradients name a bad one.

        Returns:
            True to take the step, False to skip it ("skip").

        Raises:
            NonFiniteLoss: "stop" and some rank saw a non-finite value.
        """
        return self._act(iteration, codes.cpu(), loss, None, None)

    def defer(self, iteration: int, codes: torch.Tensor, loss: torch.Tensor,
              params: List[nn.Parameter], norms: Optional[torch.Tensor]) -> None:
        """Start copying ``codes`` to the host behind the step's kernels; :meth:`collect` acts on
        it. ``params`` and their gradients' ``norms`` name a bad gradient then (the gradients
        themselves are gone by that time)."""
        done = None
        if codes.device.type == "cuda":
            if self._pinned is None or self._pinned.shape != codes.shape:
                self._pinned = torch.empty(codes.shape, dtype=codes.dtype, pin_memory=True)
            host = self._pinned.copy_(codes, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
        else:
            host = codes
        self._pending = _Deferred(iteration, host, done, loss, params, norms)

    def collect(self) -> bool:
        """Act on the deferred verdict, if one is pending (waits for its copy).

        Returns:
            True when that step was skipped ("skip" and a non-finite value).

        Raises:
            NonFiniteLoss: "stop" and that step saw a non-finite value.
        """
        pending, self._pending = self._pending, None
        if pending is None:
            return False
        if pending.done is not None:
            pending.done.synchronize()
        return not self._act(pending.iteration, pending.codes, pending.loss, pending.params,
                             pending.norms)

    def _act(self, iteration: int, codes: torch.Tensor, loss: torch.Tensor,
             params: Optional[List[nn.Parameter]], norms: Optional[torch.Tensor]) -> bool:
        if not bool(codes.any()):
            return True
        first = int(torch.argmax(codes))  # the lowest rank with the highest code
        rank = comm.get_rank()
        what = self._first_nonfinite(loss, params, norms) if rank == first else None
        what = comm.all_gather_object(what)[first]
        text = (f"non-finite value at iteration {iteration} on rank {first}: {what} "
                f"(CONFIG.TRAIN.NONFINITE {self.mode})")
        if self.mode == "stop":
            raise NonFiniteLoss(
                text + "; no checkpoint was saved from this state. Lower CONFIG.TRAIN.LR, set "
                "CONFIG.TRAIN.CLIP_GRAD_NORM, or set CONFIG.TRAIN.NONFINITE skip"
            )
        if comm.is_main_process():
            logger.warning("%s: optimizer step skipped", text)
        return False

    def _first_nonfinite(self, loss: torch.Tensor, params: Optional[List[nn.Parameter]],
                         norms: Optional[torch.Tensor]) -> str:
        """Names the first non-finite tensor: a parameter (it would poison everything after it),
        else the loss, else a gradient: a live one when ``params`` is None, else the first of
        ``params`` whose gradient's norm in ``norms`` is non-finite. Runs only on a bad step."""
        named = list(unwrap(self.model).named_parameters())
        for name, p in named:
            if not bool(torch.isfinite(local(p.detach())).all()):
                return f"parameter {name!r} is non-finite"
        if not bool(torch.isfinite(loss).all()):
            return f"the loss is {float(loss.float().sum()):g}"
        if params is None:
            for name, p in named:
                if p.grad is not None and not bool(torch.isfinite(local(p.grad)).all()):
                    return f"the gradient of {name!r} is non-finite"
        elif norms is not None:
            bad = torch.nonzero(~torch.isfinite(norms)).flatten().tolist()
            if bad:
                names = {id(p): name for name, p in named}
                return f"the gradient of {names.get(id(params[bad[0]]), '?')!r} is non-finite"
        return "a gradient is non-finite"


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a sharded (FSDP2 DTensor) tensor; a plain tensor as it is."""
    return t.to_local() if hasattr(t, "to_local") else t


def full(t: torch.Tensor) -> torch.Tensor:
    """A sharded (DTensor) result as one plain tensor, the same on every rank (a collective when
    it is sharded or partial); a plain tensor as it is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t
