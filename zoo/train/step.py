"""One training iteration: autocast forward, loss, backward with accumulation, clip, step, EMA."""

from __future__ import annotations

import contextlib
import logging
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..data.transforms import normalize_batch
from ..utils import comm
from ..utils.errors import NonFiniteLoss
from .checkpoint import unwrap
from .ema import ModelEMA
from .mixup import MixupCutmix
from .precision import autocast, grad_scaler, memory_format, resolve_precision

logger = logging.getLogger(__name__)


class TrainStep:
    """Everything that happens to one batch. Holds no data loader and no schedule.

    Args:
        model: The model to train (plain or DDP-wrapped).
        optimizer: Its optimizer.
        scheduler: Per-step LR schedule with ``step()`` (stepped once per optimizer step).
        device: Where the batch goes.
        num_classes: Classifier size (for Mixup/CutMix targets).
        precision: "fp32", "bf16", "fp16" or "auto" (bf16 where ``device`` computes it natively).
        channels_last: Feed channels-last clips (the model is converted once, here).
        accum_steps: Optimizer step every this many calls.
        clip_grad_norm: Max global grad norm (0 = off).
        label_smoothing: Cross-entropy label smoothing.
        mixup_alpha, cutmix_alpha: Mixup/CutMix strengths (0 = off).
        ema_decay: EMA of the weights (0 = off).
        nonfinite: "stop" or "skip" (``CONFIG.TRAIN.NONFINITE``, see :meth:`_finite_step`), or
            None for no check (benchmarks that time the bare step).
        normalization: ``(mean, std)`` (0..1 scale) for uint8 batches, which are normalised here
            after the move to ``device`` (``CONFIG.DATA.NORMALIZE_ON "device"``); float batches
            are taken as they are.
        cuda_graphs: The model is compiled with CUDA graphs (``COMPILE_MODE``
            "reduce-overhead"): each call starts a new step of torch's CUDA-graph trees, so the
            graphs' outputs of the step before may be reused.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler,
                 device: torch.device, num_classes: int, precision: str = "fp32",
                 channels_last: bool = False, accum_steps: int = 1, clip_grad_norm: float = 0.0,
                 label_smoothing: float = 0.0, mixup_alpha: float = 0.0,
                 cutmix_alpha: float = 0.0, ema_decay: float = 0.0,
                 nonfinite: Optional[str] = None,
                 normalization: Optional[Tuple[Sequence[float], Sequence[float]]] = None,
                 cuda_graphs: bool = False) -> None:
        self.model = model
        self.cuda_graphs = cuda_graphs and device.type == "cuda"
        self.normalization = normalization
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.device = device
        self.precision = precision = resolve_precision(precision, device)
        self.channels_last = channels_last
        self.accum_steps = accum_steps
        self.clip_grad_norm = clip_grad_norm
        self.label_smoothing = label_smoothing
        self.scaler = grad_scaler(precision, device)
        self.mix = MixupCutmix(num_classes, mixup_alpha, cutmix_alpha, label_smoothing)
        self.ema: Optional[ModelEMA] = ModelEMA(unwrap(model), ema_decay) if ema_decay > 0 else None
        self.micro = 0  # calls since the last optimizer step
        self.nonfinite = nonfinite
        self.steps = 0  # optimizer steps taken or skipped (the trainer sets it on resume)
        self.skipped = 0  # optimizer steps skipped for a non-finite loss or gradient
        self._loss_acc: Optional[torch.Tensor] = None  # sum of this step's micro-batch losses

    def prepare(self, clips: torch.Tensor) -> torch.Tensor:
        """A batch of clips as the model takes it: on the device, normalised, in its layout."""
        clips = clips.to(self.device, non_blocking=True)
        if clips.dtype == torch.uint8:
            if self.normalization is None:
                raise ValueError("a uint8 batch of clips reached a TrainStep built without "
                                 "normalization=(mean, std)")
            clips = normalize_batch(clips, *self.normalization)
        if self.channels_last and clips.dim() in (4, 5):
            clips = clips.contiguous(memory_format=memory_format(clips.dim()))
        return clips

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, soft: Optional[torch.Tensor]):
        logits = logits.float()
        if soft is not None:
            return torch.sum(-soft * F.log_softmax(logits, dim=1), dim=1).mean()
        return F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing)

    def __call__(self, clips: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Forward and backward one batch; steps the optimizer every ``accum_steps`` calls.

        Returns the (detached) loss of this batch; no host-device sync happens here.
        """
        clips = self.prepare(clips)
        labels = labels.to(self.device, non_blocking=True)
        soft = None
        if self.mix.enabled:
            clips, soft = self.mix(clips, labels)
        self.micro += 1
        last_micro = self.micro == self.accum_steps
        # Between optimizer steps DDP need not all-reduce: gradients only accumulate locally.
        # FSDP2 likewise keeps unsharded gradients until the last micro-batch reduce-scatters.
        no_sync = getattr(self.model, "no_sync", None)
        ctx = no_sync() if (no_sync is not None and not last_micro) else contextlib.nullcontext()
        grad_sync = getattr(self.model, "set_requires_gradient_sync", None)
        if grad_sync is not None and self.accum_steps > 1:
            grad_sync(last_micro)
        if self.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with ctx:
            with autocast(self.precision, self.device):
                logits = self.model(clips)
            loss = self.loss(logits, labels, soft)
            scaled = loss / self.accum_steps
            if self.scaler is not None:
                self.scaler.scale(scaled).backward()
            else:
                scaled.backward()
        if self.nonfinite is not None:
            d = loss.detach()
            self._loss_acc = d if self._loss_acc is None else self._loss_acc + d
        if last_micro:
            self._optimizer_step()
        return loss.detach()

    def _optimizer_step(self) -> None:
        norm = None
        if self.clip_grad_norm > 0:
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)
            params = [p for g in self.optimizer.param_groups for p in g["params"]]
            norm = torch.nn.utils.clip_grad_norm_(params, self.clip_grad_norm)
        self.steps += 1
        if self.nonfinite is not None and not self._finite_step(norm):
            self.skipped += 1
            self.optimizer.zero_grad(set_to_none=True)
            if self.scaler is not None and self.clip_grad_norm > 0:
                # unscale_ ran: update() clears its per-step record (else the next unscale_
                # refuses); without unscale_ there is nothing to clear, and update() would
                # refuse for want of an inf check.
                self.scaler.update()
            self.scheduler.step()  # the schedule follows iterations, skipped or not
            self.micro = 0
            return
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        if self.ema is not None:
            self.ema.update(unwrap(self.model))
        self.micro = 0

    def _finite_step(self, norm: Optional[torch.Tensor]) -> bool:
        """Whether this optimizer step's loss and gradients are finite on every rank.

        Costs one host-device sync per optimizer step (plus, under DDP, one all-reduce of a
        ``world``-long flag vector, so that every rank takes the same decision): the loss is
        already a tensor, and the gradients' global norm comes from CLIP_GRAD_NORM when it is
        on, else from one ``torch._foreach_norm`` pass. A non-finite gradient makes that norm
        non-finite, so this catches every NaN/inf gradient. Under fp16 with a GradScaler a
        non-finite gradient is the scaler's to handle (it skips the step and lowers the scale):
        only the loss is checked then.

        Returns:
            True to step; False to skip (NONFINITE "skip").

        Raises:
            NonFiniteLoss: NONFINITE "stop" and some rank saw a non-finite value; every rank
            raises the same one-line message, naming the iteration, the first bad rank and its
            first non-finite tensor.
        """
        loss, self._loss_acc = self._loss_acc, None
        loss_bad = ~torch.isfinite(loss).all()
        grad_bad = torch.zeros((), dtype=torch.bool, device=loss.device)
        if self.scaler is None:
            if norm is None:
                # a sharded (FSDP2) gradient: this rank's shard; the flags are all-reduced below
                grads = [_local(p.grad) for g in self.optimizer.param_groups
                         for p in g["params"] if p.grad is not None]
                if grads:
                    norm = torch.stack(torch._foreach_norm(grads)).sum()
            if norm is not None:
                grad_bad = ~torch.isfinite(_full(norm))
        # 2: this rank's own loss is non-finite (a root cause: DDP's all-reduce spreads one
        # rank's NaN gradients to every rank); 1: only its gradients are.
        world, rank = comm.get_world_size(), comm.get_rank()
        bad = torch.zeros(world, device=self.device)
        bad[rank] = torch.where(loss_bad, 2.0, torch.where(grad_bad, 1.0, 0.0))
        bad = comm.all_reduce_sum(bad).cpu()  # the one sync
        if not bool(bad.any()):
            return True
        first = int(torch.argmax(bad))  # the lowest rank with the highest code
        what = comm.all_gather_object(self._first_nonfinite(loss) if rank == first else None)[first]
        text = (f"non-finite value at iteration {self.steps} on rank {first}: {what} "
                f"(CONFIG.TRAIN.NONFINITE {self.nonfinite})")
        if self.nonfinite == "stop":
            raise NonFiniteLoss(
                text + "; no checkpoint was saved from this state. Lower CONFIG.TRAIN.LR, set "
                "CONFIG.TRAIN.CLIP_GRAD_NORM, or set CONFIG.TRAIN.NONFINITE skip"
            )
        if comm.is_main_process():
            logger.warning("%s: optimizer step skipped", text)
        return False

    def _first_nonfinite(self, loss: torch.Tensor) -> str:
        """Names the first non-finite tensor: a parameter (it would poison everything after it),
        else the loss, else a gradient. Runs only when a step was found non-finite."""
        named = list(unwrap(self.model).named_parameters())
        for name, p in named:
            if not bool(torch.isfinite(_local(p.detach())).all()):
                return f"parameter {name!r} is non-finite"
        if not bool(torch.isfinite(loss).all()):
            return f"the loss is {float(loss.float().sum()):g}"
        for name, p in named:
            if p.grad is not None and not bool(torch.isfinite(_local(p.grad)).all()):
                return f"the gradient of {name!r} is non-finite"
        return "a gradient is non-finite"


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a sharded (FSDP2 DTensor) tensor; a plain tensor as it is."""
    return t.to_local() if hasattr(t, "to_local") else t


def _full(t: torch.Tensor) -> torch.Tensor:
    """A sharded (DTensor) result as one plain tensor, the same on every rank (a collective when
    it is sharded or partial); a plain tensor as it is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t
