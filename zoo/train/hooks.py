"""Trainer hooks: everything around the iteration loop that is not the step itself.

A hook subclasses :class:`HookBase` and overrides any of its methods; the
:class:`~zoo.train.trainer.Trainer` calls them, hook by hook in list order, at::

    before_train
      before_epoch
        before_step   (trainer.batch holds the batch, its clips already on the GPU when training
                       on one; trainer.inner_iter its index in the epoch)
        after_step    (trainer.loss holds its loss; trainer.iteration counts optimizer steps)
      after_epoch
        after_validation(metrics)  (from inside Validation's after_epoch, when it validated)
        after_checkpoint(path)     (from inside Checkpointer's after_epoch, when it saved; also
                                    after the mid-epoch checkpoint of a preemption)
    after_train       (only when training finished; a failed run stops where it failed)

``after_validation`` and ``after_checkpoint`` are how a run reports to whoever started it (e.g.
:mod:`zoo.integrations.ray` reports each checkpoint to Ray Train): they run during the built-in
hooks' ``after_epoch``, so they come before any hook's own ``after_epoch`` that follows those.

Every rank runs every hook: a hook that writes files or logs checks ``comm.is_main_process()``
itself, and a hook that calls a collective must do so on every rank. The built-in hooks, in the
order they run, are :class:`ProgressBar`, :class:`MetricsLogger` (log lines, metrics.jsonl and
TensorBoard), :class:`PreciseBN`, :class:`Validation` (of the EMA weights when EMA is on) and
:class:`Checkpointer`; the classes named in ``CONFIG.TRAIN.HOOKS`` follow them (see
:func:`load_user_hooks` and docs/hooks.md).
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
import torch.nn as nn

from ..config import ConfigError
from ..infer.evaluator import evaluate
from ..infer.metrics import show_progress
from ..utils import comm
from ..utils.env import load_user_module
from .checkpoint import gather_rng_states, is_sharded, save_checkpoint, training_state, unwrap
from .data_wait import DataWait
from .precise_bn import recompute_bn_stats


class HookBase:
    """A hook of the :class:`~zoo.train.trainer.Trainer` (see the module docstring).

    The trainer sets ``self.trainer`` before ``before_train``; a hook reads the run from it
    (``cfg``, ``model``, ``optimizer``, ``scheduler``, ``step``, ``epoch`` (0-based),
    ``iteration``, ``inner_iter``, ``batch``, ``loss``, ``writer``, ``logger``, ``out_dir``...).
    Every method does nothing unless overridden.
    """

    # The zoo.train.trainer.Trainer running this hook (set by the trainer; typed loosely so that
    # this module, which the trainer imports, does not import the trainer).
    trainer: Any

    def before_train(self) -> None:
        pass

    def after_train(self) -> None:
        pass

    def before_epoch(self) -> None:
        pass

    def after_epoch(self) -> None:
        pass

    def before_step(self) -> None:
        pass

    def after_step(self) -> None:
        pass

    def after_validation(self, metrics: Dict[str, Any]) -> None:
        """After each validation, on every rank, with the ``val`` record written to
        metrics.jsonl (``epoch``, ``top1``, ``top5``, ``mean_class_acc``, ``loss``...)."""

    def after_checkpoint(self, path: Optional[str]) -> None:
        """After a checkpoint was saved, on every rank: ``path`` is the file rank 0 wrote
        (``epoch_N.pth``, or ``preempt_epoch{E}_iter{N}.pth`` when a preemption stopped the run),
        None on the other ranks (which do not wait for the write) and when the write failed."""


def broadcast_buffers(module: nn.Module) -> None:
    """Give every rank rank 0's buffers (the BatchNorm running statistics).

    DDP is built without its broadcast before every forward (``broadcast_buffers`` /
    ``forward_sync_buffers`` False): that broadcast is a second
    synchronisation per step (~5% of a small model's step on CPU), and training-mode BatchNorm
    never reads the running statistics. Rank 0's statistics - the ones DDP's broadcast kept and its
    checkpoints save - reach the other ranks here, before anything reads them (validation).
    """
    if comm.get_world_size() > 1:
        for buf in module.buffers():
            dist.broadcast(buf, src=0)


def seconds_since_launch() -> Optional[float]:
    """Age of the launching process (the parent of a spawned worker), from /proc; None elsewhere."""
    import multiprocessing

    pid = os.getppid() if multiprocessing.parent_process() is not None else os.getpid()
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _skipped(t: Any) -> int:
    """Batches of the current epoch trained before a mid-epoch resume (0 otherwise)."""
    return getattr(t, "start_iter", 0) if t.epoch == t.start_epoch else 0


class ProgressBar(HookBase):
    """A tqdm bar per epoch on rank 0's interactive console (``CONFIG.LOG.PROGRESS_BAR``).

    While it is open, ``trainer.progress_bar`` is the bar and :class:`MetricsLogger` shows its
    numbers there instead of logging a line per ``DISPLAY_FREQ`` iterations.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled

    def before_epoch(self) -> None:
        t = self.trainer
        t.progress_bar = None
        if show_progress(self.enabled):
            from tqdm import tqdm

            t.progress_bar = tqdm(total=t.iters_per_epoch, desc=f"epoch {t.epoch + 1}/{t.epochs}",
                                  dynamic_ncols=True, leave=False,
                                  initial=_skipped(t))

    def after_step(self) -> None:
        if self.trainer.progress_bar is not None:
            self.trainer.progress_bar.update(1)

    def after_epoch(self) -> None:
        if self.trainer.progress_bar is not None:
            self.trainer.progress_bar.close()
            self.trainer.progress_bar = None


class MetricsLogger(HookBase):
    """The training log lines and records: a ``train`` record (loss, LR, clips/s; the LR is
    the one the step's update used, read before the schedule moves on) every
    ``DISPLAY_FREQ`` iterations and at the epoch's end, a ``train_epoch`` record (mean loss over
    ranks, time, the share of it the loop waited for data (``data_wait_share``, mean over ranks, see
    zoo/train/data_wait.py), skipped videos and steps) per epoch, into ``trainer.writer``
    (metrics.jsonl and TensorBoard, rank 0) and the log.

    Args:
        display_freq: Iterations between ``train`` records (``CONFIG.LOG.DISPLAY_FREQ``).
    """

    def __init__(self, display_freq: int) -> None:
        self.display_freq = display_freq
        self.data_wait = DataWait()

    def before_train(self) -> None:
        t = self.trainer
        t.writer.start(t.start_epoch, getattr(t, "start_iter", 0), t.iteration)

    def after_train(self) -> None:
        self.trainer.writer.close()

    def before_epoch(self) -> None:
        self.epoch_start = self.tick = time.perf_counter()
        self.loss_sum = torch.zeros((), device=self.trainer.device)
        self.bad, self.seen, self.skipped_before = 0, 0, self.trainer.step.skipped
        self.clips = 0  # clips of this process since the last record
        self.lr = self.trainer.scheduler.get_last_lr()  # the LR of the epoch's first step
        self.data_wait.start()

    def before_step(self) -> None:
        self.data_wait.batch_ready()
        # The step's update uses this LR; after it the schedule holds the next step's.
        self.lr = self.trainer.scheduler.get_last_lr()

    def after_step(self) -> None:
        t = self.trainer
        if t.epoch == t.start_epoch and t.inner_iter == _skipped(t):
            since = seconds_since_launch()
            t.logger.info("first iteration done%s", f", {since:.1f}s after launch" if since else "")
        self.loss_sum += t.loss
        # Counted per batch: a multigrid run's batches differ in size from BATCH_SIZE.
        labels = t.batch[1]
        self.clips += (len(labels) if isinstance(labels, torch.Tensor) and labels.dim()
                       else t.cfg.CONFIG.TRAIN.BATCH_SIZE)
        self.bad += int(t.batch[3].sum())
        self.seen += 1
        i = t.inner_iter
        if (i + 1) % self.display_freq == 0 or i + 1 == t.iters_per_epoch:
            self._display(i)
        self.data_wait.step_done()  # from here until the next before_step: waiting for data

    def _display(self, i: int) -> None:
        # .item() only here: it waits for the device, so not on every step.
        t = self.trainer
        now = time.perf_counter()
        speed = self.clips * comm.get_world_size() / max(now - self.tick, 1e-9)
        self.tick, self.clips = now, 0
        record = {"split": "train", "epoch": t.epoch + 1, "iter": t.iteration, "batch": i + 1,
                  "loss": t.loss.item(), "lr": self.lr, "clips_per_s": speed}
        t.writer.write(record, t.iteration)
        if t.progress_bar is not None:
            t.progress_bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.4g}",
                                       clips_s=f"{speed:.1f}")
        else:
            t.logger.info("epoch %d iter %d/%d loss %.4f lr %.5g %.1f clips/s", t.epoch + 1,
                          i + 1, t.iters_per_epoch, record["loss"], record["lr"], speed)

    def after_epoch(self) -> None:
        t = self.trainer
        world = comm.get_world_size()
        waited, elapsed = self.data_wait.waited, self.data_wait.elapsed()
        comm.all_reduce_sum(self.loss_sum)
        sums = comm.all_reduce_sum(torch.tensor([float(self.bad), waited],
                                                device=t.device)).tolist()
        bad_total = int(round(sums[0]))
        data_wait = round(sums[1] / world / max(elapsed, 1e-9), 4)  # as logged and recorded
        mean_loss = self.loss_sum.item() / max(1, self.seen * world)
        epoch_time = time.perf_counter() - self.epoch_start
        # The same on every rank (the skip decision is all-reduced); a skipped step's NaN loss
        # is in mean_loss, which is then NaN too.
        skipped_steps = t.step.skipped - self.skipped_before
        if self.seen == 0:  # the same on every rank: resumed after the epoch's last batch
            t.logger.info("epoch %d done: its batches were all trained before the resume (no "
                          "train_epoch record: it has no loss to average)", t.epoch + 1)
            return
        t.logger.info("epoch %d done: mean loss %.4f, %.1fs, data wait %.1f%% of it, %d bad "
                      "videos skipped, %d non-finite steps skipped", t.epoch + 1, mean_loss,
                      epoch_time, 100 * data_wait, bad_total, skipped_steps)
        t.writer.write({"split": "train_epoch", "epoch": t.epoch + 1, "loss": mean_loss,
                        "time_s": epoch_time, "data_wait_share": data_wait,
                        "skipped_videos": bad_total, "skipped_steps": skipped_steps},
                       t.iteration)


class PreciseBN(HookBase):
    """Before each validation, recompute the BatchNorm statistics over ``num_iters`` training
    batches (``CONFIG.TRAIN.PRECISE_BN_ITERS``; see zoo/train/precise_bn.py): the model's and,
    with ``CONFIG.TRAIN.EMA_DECAY``, the EMA's, each with its own weights."""

    def __init__(self, num_iters: int) -> None:
        self.num_iters = num_iters

    def after_epoch(self) -> None:
        t = self.trainer
        if self.num_iters > 0 and t.validation_due():
            stream = getattr(t, "train_stream", None)
            if stream is not None:
                # The batches come from this epoch's start, in a pass of their own: the pass
                # serving the next epochs is given up (the next epoch opens a new one).
                stream.stop(t.epoch)
                t.train_stream = None
            # The EMA is what is validated and saved: it gets statistics of its own weights.
            ema = t.step.ema
            models = [unwrap(t.model)] + ([ema.module] if ema is not None else [])
            recompute_bn_stats(models, t.train_loader, self.num_iters, t.device, t.step.prepare)


def improves(metric: str, value: float, best: Optional[float]) -> bool:
    """Whether a validation's ``value`` of ``metric`` (a CONFIG.TRAIN.BEST_METRIC) beats ``best``
    (None: no best yet): lower for ``loss``, higher for the accuracies; never a NaN or infinity."""
    if not math.isfinite(value):
        return False
    if best is None:
        return True
    return value < best if metric == "loss" else value > best


class Validation(HookBase):
    """Evaluate on the validation list every ``CONFIG.VAL.FREQ`` epochs and after the last one:
    the EMA weights when EMA is on, else the model. Logs the result, writes a ``val`` record and
    updates ``trainer.best_top1`` (the best top-1 so far), ``trainer.best_value`` (the best
    ``CONFIG.TRAIN.BEST_METRIC``), ``trainer.is_best`` (whether this validation set it: what
    :class:`Checkpointer` reads for ``best.pth``) and ``trainer.stale_validations``. A validation
    of no videos (every one unreadable) sets no best.

    Early stopping: after ``CONFIG.TRAIN.EARLY_STOP_PATIENCE`` validations in a row without a new
    best, it asks the trainer to stop after this epoch; so may any hook's
    ``after_validation`` (``trainer.request_stop``). The ranks then agree, one asking being
    enough, before :class:`Checkpointer` saves the epoch as the run's last."""

    def after_epoch(self) -> None:
        t = self.trainer
        if not t.validation_due():
            return
        ema = t.step.ema
        evaluated = ema.module if ema is not None else t.model
        broadcast_buffers(unwrap(evaluated))
        m = evaluate(evaluated, t.val_loader, t.device,
                     num_classes=t.cfg.CONFIG.DATA.NUM_CLASSES, model_name=t.cfg.CONFIG.MODEL.NAME)
        metric, scored = t.cfg.CONFIG.TRAIN.BEST_METRIC, m["num_videos"] > 0
        best = getattr(t, "best_value", None)
        t.is_best = scored and improves(metric, m[metric], best)
        if t.is_best:
            best = t.best_value = m[metric]
        if scored:
            t.best_top1 = max(t.best_top1, m["top1"])
        t.stale_validations = 0 if t.is_best else getattr(t, "stale_validations", 0) + 1
        t.logger.info(
            "epoch %d val%s: top1 %.2f top5 %.2f mean-class %.2f loss %.4f (%d videos)",
            t.epoch + 1, " (EMA)" if ema is not None else "", m["top1"], m["top5"],
            m["mean_class_acc"], m["loss"], m["num_videos"],
        )
        record = {"split": "val", "epoch": t.epoch + 1, "top1": m["top1"], "top5": m["top5"],
                  "mean_class_acc": m["mean_class_acc"], "loss": m["loss"],
                  "num_videos": m["num_videos"], "skipped_videos": m["skipped_videos"]}
        t.writer.write(record, t.iteration)
        t.last_val = record
        patience = t.cfg.CONFIG.TRAIN.EARLY_STOP_PATIENCE
        if patience and t.stale_validations >= patience and not t.is_last_epoch():
            shown = "none" if best is None else f"{best:.4f}" if metric == "loss" else f"{best:.2f}"
            t.request_stop(f"no new best val {metric} in {t.stale_validations} validations (best "
                           f"{shown}; CONFIG.TRAIN.EARLY_STOP_PATIENCE {patience})")
        notify = getattr(t, "notify", None)  # tests drive hooks with a bare namespace too
        if notify is not None:
            notify("after_validation", dict(record, iteration=t.iteration))
        if hasattr(t, "agree_on_stop"):  # before Checkpointer reads is_last_epoch()
            t.agree_on_stop()


class Checkpointer(HookBase):
    """Save ``epoch_N.pth`` every ``save_freq`` epochs and after the last one (plus ``best.pth``
    when validation found a new best), rank 0 writing atomically; every rank gives its RNG states.

    With the trainer's ``checkpoint_writes`` (a
    :class:`~zoo.train.checkpoint_writer.BackgroundWriter`) rank 0 copies the state and writes it
    in a thread while training goes on; each step collects it once it is done (raising a failed
    write's error) without waiting for it, and it is waited for before the next save, a
    preemption checkpoint and the end of training. Rank 0 has the snapshots' staging buffer made
    at the first optimizer step, so that no epoch boundary waits for it. Without a writer it
    writes in place.

    Args:
        save_dir: The checkpoint folder.
        save_freq: Epochs between checkpoints (``CONFIG.LOG.SAVE_FREQ``).
        keep_last: Keep only the newest K epoch files (``CONFIG.TRAIN.KEEP_LAST``; 0 = all).
    """

    def __init__(self, save_dir: str, save_freq: int, keep_last: int = 0) -> None:
        self.save_dir = save_dir
        self.save_freq = save_freq
        self.keep_last = keep_last
        self.reserved = False  # whether the snapshots' staging buffer was made

    def after_epoch(self) -> None:
        t = self.trainer
        if not (t.is_last_epoch() or (t.epoch + 1) % self.save_freq == 0):
            return
        rng = gather_rng_states()  # every rank takes part; rank 0 writes
        if comm.is_main_process() or is_sharded(t.model):  # gathering shards: every rank
            state = training_state(t.model, t.optimizer, t.scheduler, t.step.scaler, t.step.ema,
                                   t.epoch + 1, t.iteration, t.cfg_yaml, rng, t.best_top1,
                                   classes=getattr(t, "classes", ()),
                                   stale_validations=getattr(t, "stale_validations", 0),
                                   best_value=getattr(t, "best_value", None))
        path = None
        t.checkpointed_epoch = t.epoch + 1
        writes = getattr(t, "checkpoint_writes", None)
        if comm.is_main_process():
            epoch, is_best, logger = t.epoch + 1, t.is_best, t.logger

            def write(state: dict) -> str:
                path = save_checkpoint(self.save_dir, state, epoch, self.keep_last, is_best)
                logger.info("saved %s%s", path, " (best so far)" if is_best else "")
                return path

            if writes is None:
                path = write(state)
            else:  # after the write before (one snapshot in memory at a time)
                copied = writes.snapshot(state)
                writes.submit(lambda: write(copied.wait()))
        if not reports_checkpoints(t):
            return
        # A hook reports the checkpoint (e.g. to Ray Train): the file must be complete first.
        if writes is not None and writes.pending:
            path = writes.wait()
        t.notify("after_checkpoint", path)

    def after_step(self) -> None:
        t = self.trainer
        writes = getattr(t, "checkpoint_writes", None)
        if writes is None:
            return
        writes.poll()
        if not self.reserved and t.step.micro == 0:  # the optimizer's state exists from here
            self.reserved = True
            if comm.is_main_process() and not is_sharded(t.model):
                # The snapshot's pinned buffer, made now: the first epoch boundary would
                # otherwise wait for it with the device idle (no collective: rank 0 alone).
                writes.reserve(training_state(t.model, t.optimizer, t.scheduler, t.step.scaler,
                                              t.step.ema, 0, 0, "", [], 0.0))


def reports_checkpoints(trainer) -> bool:
    """Whether a hook of ``trainer`` overrides ``after_checkpoint`` (then a checkpoint is written
    before the next step, not in the background, so that the path it is told is complete)."""
    return callable(getattr(trainer, "notify", None)) and any(
        getattr(type(hook), "after_checkpoint", HookBase.after_checkpoint)
        is not HookBase.after_checkpoint
        for hook in getattr(trainer, "hooks", ()))  # a hook passed in need not subclass HookBase


HOOKS_KEY = "CONFIG.TRAIN.HOOKS"


def user_hook_class(entry: str) -> type:
    """The hook class an entry of ``CONFIG.TRAIN.HOOKS`` names (imports its module).

    Args:
        entry: ``path/to/file.py:ClassName`` (a user file, loaded as ``CONFIG.EXTRA_MODULES``
            loads it) or ``package.module:ClassName`` (importable). The class must subclass
            :class:`HookBase`.

    Raises:
        ConfigError: The entry is not ``WHERE:ClassName``, the module has no such class, or the
            class is not a hook.
        FileNotFoundError / ImportError: The file or module cannot be loaded.
    """
    where, sep, name = str(entry).rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise ConfigError(f"{HOOKS_KEY} entry {entry!r} is not 'file.py:ClassName' or "
                          "'module.name:ClassName'")
    module = load_user_module(where, HOOKS_KEY)
    cls = getattr(module, name, None)
    if cls is None:
        found = sorted(n for n, v in vars(module).items()
                       if isinstance(v, type) and issubclass(v, HookBase) and v is not HookBase)
        raise ConfigError(f"{HOOKS_KEY} entry {entry!r}: {where} defines no {name!r} (hook "
                          f"classes there: {', '.join(found) or 'none'})")
    if not (isinstance(cls, type) and issubclass(cls, HookBase)):
        raise ConfigError(f"{HOOKS_KEY} entry {entry!r}: {name} is not a subclass of "
                          "zoo.train.hooks.HookBase")
    return cls


def load_user_hook(entry: str) -> HookBase:
    """Build the hook an entry of ``CONFIG.TRAIN.HOOKS`` names: its class (see
    :func:`user_hook_class`) called with no arguments (a hook reads ``self.trainer``).

    Raises:
        ConfigError: The class's ``__init__`` takes arguments without defaults.
    """
    cls = user_hook_class(entry)
    try:
        return cls()
    except TypeError as e:
        if e.__traceback__ is not None and e.__traceback__.tb_next is not None:
            raise  # raised inside its __init__: the user's code (zoo.utils.errors says where)
        raise ConfigError(f"{HOOKS_KEY} entry {entry!r}: {e}; a hook is built with no arguments: "
                          "give them defaults (a hook reads the run from self.trainer)") from None


def load_user_hooks(entries) -> List[HookBase]:
    """The hooks ``CONFIG.TRAIN.HOOKS`` names, in its order (see :func:`load_user_hook`)."""
    return [load_user_hook(entry) for entry in entries if entry]


def default_hooks(cfg, save_dir: str) -> List[HookBase]:
    """The built-in hooks, in the order they run (see the module docstring)."""
    train, log = cfg.CONFIG.TRAIN, cfg.CONFIG.LOG
    return [ProgressBar(log.PROGRESS_BAR), MetricsLogger(log.DISPLAY_FREQ),
            PreciseBN(train.PRECISE_BN_ITERS), Validation(),
            Checkpointer(save_dir, log.SAVE_FREQ, train.KEEP_LAST)]
