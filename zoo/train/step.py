"""One training iteration: autocast forward, loss, backward with accumulation, clip, step, EMA."""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import ConfigError
from ..data.device_crops import CropGeometry, resize_cuts
from ..data.transforms import normalize_batch
from .checkpoint import unwrap
from .ema import ModelEMA
from .mixup import MixupCutmix
from .nonfinite import NonFiniteCheck, full, local
from .precision import autocast, grad_scaler, memory_format, resolve_precision

logger = logging.getLogger(__name__)

# torch's warning for a schedule stepped before the optimizer's first update.
_SWAPPED_CALLS = r"Detected call of `lr_scheduler\.step\(\)` before `optimizer\.step\(\)`"


# DDP's error when a step's gradients left some parameters out (torch/nn/parallel/distributed.py).
_DDP_UNUSED = "Expected to have finished reduction in the prior iteration"


def unused_parameters_error(e: BaseException, model: nn.Module) -> Optional[str]:
    """The one line for DDP's error at the step after one whose loss left parameters of
    ``model`` without a gradient (DDP waits for every parameter's all-reduce), naming them when
    torch does (by name under ``TORCH_DISTRIBUTED_DEBUG``, else by index, mapped here to names);
    None for any other error."""
    text = str(e)
    if _DDP_UNUSED not in text:
        return None
    params = [n for n, p in unwrap(model).named_parameters() if p.requires_grad]
    named = re.search(r"Parameters which did not receive grad for rank (\d+): ([^\n]+)", text)
    indices = re.search(r"Parameter indices which did not receive grad for rank (\d+): "
                        r"([\d ]+)", text)
    which = ""
    if named:
        which = f" ({named.group(2).strip()}, on rank {named.group(1)})"
    elif indices:
        idx = [int(i) for i in indices.group(2).split()]
        names = [params[i] for i in idx if i < len(params)]
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        which = (f" (parameter indices {' '.join(map(str, idx[:8]))}"
                 f"{': ' + shown if len(names) == len(idx) else ''}, on rank {indices.group(1)})")
    if getattr(model, "find_unused_parameters", False):
        return (f"DDP found no gradient for parameters of the model{which} although "
                "CONFIG.TRAIN.FIND_UNUSED_PARAMETERS is True: the model's forward returns its "
                "output in a structure DDP cannot search; return a tensor (or a tuple, list or "
                "dict of tensors) and compute the loss from it")
    return (f"the model has parameters that no loss used{which}, and DDP waits for a gradient of "
            "every parameter: set CONFIG.TRAIN.FIND_UNUSED_PARAMETERS True (slower) or use every "
            "parameter in the loss (or set requires_grad False on those it leaves out)")


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
        nonfinite: "stop" or "skip" (``CONFIG.TRAIN.NONFINITE``, see :mod:`zoo.train.nonfinite`
            and :meth:`settle`), or None for no check (benchmarks that time the bare step).
        normalization: ``(mean, std)`` (0..1 scale) for uint8 batches, which are normalised here
            after the move to ``device`` (``CONFIG.DATA.NORMALIZE_ON "device"``); float batches
            are taken as they are.
        cuda_graphs: The model is compiled with CUDA graphs (``COMPILE_MODE``
            "reduce-overhead"): each call starts a new step of torch's CUDA-graph trees, so the
            graphs' outputs of the step before may be reused.
        model_name: The model's name in the error a batch of logits without ``num_classes``
            columns stops with (``CONFIG.MODEL.NAME``).
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler,
                 device: torch.device, num_classes: int, precision: str = "fp32",
                 channels_last: bool = False, accum_steps: int = 1, clip_grad_norm: float = 0.0,
                 label_smoothing: float = 0.0, mixup_alpha: float = 0.0,
                 cutmix_alpha: float = 0.0, ema_decay: float = 0.0,
                 nonfinite: Optional[str] = None,
                 normalization: Optional[Tuple[Sequence[float], Sequence[float]]] = None,
                 cuda_graphs: bool = False, model_name: str = "") -> None:
        self.model = model
        # Imported here: zoo.models registers every family, which importing this module need
        # not pay for.
        from ..models.classifier import check_logits

        self._check_logits = check_logits
        self.num_classes = num_classes
        self.model_name = model_name or type(unwrap(model)).__name__
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
        self.check = NonFiniteCheck(nonfinite, model, device) if nonfinite is not None else None
        self._on_device_ok: Optional[bool] = None  # see _verdict_on_device
        self._buffers_ready = False
        self.steps = 0  # optimizer steps taken or skipped (the trainer sets it on resume)
        self.skipped = 0  # optimizer steps skipped for a non-finite loss or gradient
        self._loss_acc: Optional[torch.Tensor] = None  # sum of this step's micro-batch losses

    def prepare(self, clips: torch.Tensor,
                geometry: Optional[CropGeometry] = None) -> torch.Tensor:
        """A batch of clips as the model takes it: on the device, resized (cuts with their
        ``geometry``: ``CONFIG.DATA.RESIZE_ON "device"``), normalised, in its layout."""
        clips = clips.to(self.device, non_blocking=True)
        if geometry is not None:
            clips = resize_cuts(clips, geometry)
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

    def __call__(self, clips: torch.Tensor, labels: torch.Tensor,
                 geometry: Optional[CropGeometry] = None) -> torch.Tensor:
        """Forward and backward one batch; steps the optimizer every ``accum_steps`` calls.
        ``geometry``: the clips are cuts to resize first (see :meth:`prepare`).

        Returns the (detached) loss of this batch; no host-device sync happens here.
        """
        clips = self.prepare(clips, geometry)
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
                try:
                    logits = self.model(clips)
                except RuntimeError as e:
                    unused = unused_parameters_error(e, self.model)
                    if unused is None:
                        raise
                    raise ConfigError(unused) from None
            self._check_logits(logits, self.num_classes, self.model_name)
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

    def settle(self) -> None:
        """Act on the verdict of the last optimizer step if it was left on the device (see
        :mod:`zoo.train.nonfinite`): count it in :attr:`skipped`, or raise under "stop". The
        trainer calls it before anything reads :attr:`skipped` or saves the weights (the end of
        an epoch, a preemption checkpoint); the next optimizer step calls it too.

        Raises:
            NonFiniteLoss: "stop" and that step saw a non-finite value.
        """
        if self.check is not None and self.check.collect():
            self.skipped += 1

    def _advance_schedule(self) -> None:
        """One step of the learning-rate schedule, which follows iterations: an update that was
        skipped (a non-finite step, GradScaler's overflow skip) moves it on too. torch warns when
        a schedule moves before the optimizer's first update, taking the calls to be swapped;
        here they are not, so that warning is not passed on to the log. torch warns only at a
        schedule's first step when no update came before it: the filter is set around that step
        alone (entering ``catch_warnings`` resets every "once" warning, which would then repeat
        at every step)."""
        first = getattr(self.scheduler, "_step_count", 1) == 1
        # Recent torch marks an optimizer that stepped with _opt_called; torch 2.3 counts its
        # steps in _step_count.
        updated = (getattr(self.optimizer, "_opt_called", False)
                   or getattr(self.optimizer, "_step_count", 0) >= 1)
        if not first or updated:
            self.scheduler.step()
            return
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_SWAPPED_CALLS)
            self.scheduler.step()

    def _optimizer_step(self) -> None:
        self.settle()
        loss, self._loss_acc = self._loss_acc, None
        if self.check is not None and self._verdict_on_device():
            self._update_unless_nonfinite(loss)
            return
        norm = None
        if self.clip_grad_norm > 0:
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)
            norm = torch.nn.utils.clip_grad_norm_(self._params(), self.clip_grad_norm)
        self.steps += 1
        if self.check is not None and not self.check.decide(
                self.steps, self.check.codes(loss, self._grad_norm(norm)), loss):
            self.skipped += 1
            self.optimizer.zero_grad(set_to_none=True)
            if self.scaler is not None and self.clip_grad_norm > 0:
                # unscale_ ran: update() clears its per-step record (else the next unscale_
                # refuses); without unscale_ there is nothing to clear, and update() would
                # refuse for want of an inf check.
                self.scaler.update()
            self._advance_schedule()
            self.micro = 0
            return
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._advance_schedule()
        if self.ema is not None:
            self.ema.update(unwrap(self.model))
        self.micro = 0

    def _update_unless_nonfinite(self, loss: torch.Tensor) -> None:
        """The optimizer step with its verdict left on the device: the fused kernel skips the
        update where the codes say so, the EMA keeps its average, and the host reads the verdict
        at the next :meth:`settle`. The same update as the checked-at-once step, bit for bit."""
        params = [p for p in self._params() if p.grad is not None]
        norms = torch.stack(torch._foreach_norm([p.grad for p in params])) if params else None
        if self.clip_grad_norm > 0:  # after the norms: they name a bad gradient, unclipped
            torch.nn.utils.clip_grad_norm_(params, self.clip_grad_norm)
        self.steps += 1
        codes = self.check.codes(loss, None if norms is None else norms.sum())
        skip = codes.any()
        self.optimizer.found_inf = skip.float()  # read by fused kernels, as GradScaler sets it
        try:
            self.optimizer.step()
        finally:
            del self.optimizer.found_inf
        self.optimizer.zero_grad(set_to_none=True)
        self._advance_schedule()
        if self.ema is not None:
            self.ema.update(unwrap(self.model), unless=skip)
        self.check.defer(self.steps, codes, loss, params, norms)
        self.micro = 0

    def _verdict_on_device(self) -> bool:
        """Whether this step's update can be skipped on the device: the optimizer is fused
        (torch's fused kernels take a ``found_inf`` tensor), no fp16 GradScaler owns that
        tensor, no parameter is sharded, and, for SGD with momentum, the momentum buffers exist
        (the fused first step fills fresh ones, garbage when the update is skipped): its first
        step is checked at once."""
        if self._on_device_ok is None:
            self._on_device_ok = (
                self.scaler is None
                and getattr(self.optimizer, "_step_supports_amp_scaling", False)
                and not any(hasattr(p, "to_local") for p in self._params()))
        if not self._on_device_ok:
            return False
        if not self._buffers_ready:  # SGD's fused step fills buffers when none exists yet
            opt = self.optimizer
            self._buffers_ready = (
                not isinstance(opt, torch.optim.SGD)
                or all(g["momentum"] == 0 for g in opt.param_groups)
                or any(s.get("momentum_buffer") is not None for s in opt.state.values()))
        return self._buffers_ready

    def _params(self) -> list:
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    def _grad_norm(self, clip_norm: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """A norm of this rank's gradients for the check, or None to check the loss alone.

        It comes from CLIP_GRAD_NORM when it is on (computed anyway), else from one
        ``torch._foreach_norm`` pass; a non-finite gradient makes it non-finite. Under fp16 a
        non-finite gradient is the GradScaler's to handle (it skips the step and lowers the
        scale), so only the loss is checked then.
        """
        if self.scaler is not None:
            return None
        if clip_norm is not None:
            return full(clip_norm)
        # a sharded (FSDP2) gradient: this rank's shard; the codes are all-reduced
        grads = [local(p.grad) for p in self._params() if p.grad is not None]
        return torch.stack(torch._foreach_norm(grads)).sum() if grads else None
