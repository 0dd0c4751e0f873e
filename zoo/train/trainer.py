"""The training loop run by every worker: :class:`Trainer` builds the run, resumes it, and runs its
iterations, calling hooks (zoo/train/hooks.py) for logging, validation and checkpoints."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

import torch

from ..config import cfg_to_yaml
from ..data import build_loader, normalization
from ..data.device_crops import batch_geometry
from ..data.device_staging import DeviceStaging
from ..data.epoch_stream import EpochStream, set_loader_epoch
from ..data.lists.annotations import named_classes
from ..infer.metrics import MetricsWriter
from ..launch.heartbeat import note_step
from ..launch.job import resume_config
from ..launch.output_lock import training_folder
from ..launch.preemption import Preempted, PreemptionWatch, watching
from ..launch.setup import (
    checkpoint_dir,
    job_config,
    output_dir,
    this_process,
    with_job_layout,
    with_model_normalization,
    worker_setup,
)
from ..solver import build_lr_scheduler, build_optimizer
from ..utils import comm
from ..utils.checkpoint_io import size_in_words
from .checkpoint import (
    CheckpointError,
    ResumedState,
    agree_on_resume,
    continue_schedule,
    find_resume_checkpoint,
    gather_rng_states,
    is_sharded,
    load_training_state,
    remove_partial_writes,
    save_preempt_checkpoint,
    set_aside_earlier_run,
    training_state,
    unwrap,
)
from .checkpoint_writer import BackgroundWriter
from .execution import CompileTimer, Execution
from .finetune import classifier_module, resolve_num_classes
from .hooks import HookBase, default_hooks, load_user_hooks
from .model_setup import (  # noqa: F401 (scripts import the model set-up from here as well)
    apply_execution,
    ddp_options,
    enable_act_checkpoint,
    prepare_model,
    run_execution,
)
from .multigrid import build_multigrid_scheduler, check_model, describe_plan, epoch_steps
from .precision import execution_settings
from .step import TrainStep


def _check_steps(iters_per_epoch: int, accum_steps: int) -> int:
    """Optimizer steps per epoch; an epoch too short for one accumulation is an error."""
    if iters_per_epoch // accum_steps == 0:
        raise RuntimeError(
            f"one epoch has {iters_per_epoch} iterations, fewer than CONFIG.TRAIN.ACCUM_STEPS = "
            f"{accum_steps}: lower ACCUM_STEPS or BATCH_SIZE"
        )
    return iters_per_epoch // accum_steps


class Trainer:
    """Runs the training iterations of one process and calls its hooks around them.

    Construction builds everything from ``cfg`` (model, loaders, optimizer, schedule, the
    :class:`~zoo.train.step.TrainStep`, the metrics writer), with empty ``DATA.MEAN`` / ``STD``
    filled from the model's facts first, as ``zoo.train`` and the tool fill them; :meth:`train`
    resumes when the config asks for it and runs the epochs. The attributes below are what hooks
    read.

    Attributes:
        cfg, logger, device, out_dir: The run (``out_dir`` is BASE_PATH/EXP_NAME).
        save_dir: The checkpoint folder (``CONFIG.LOG.CHECKPOINT_DIR``, else the engine's, else
            ``out_dir/<SAVE_DIR>``; see :func:`zoo.launch.setup.checkpoint_dir`).
        model: The model as trained (with several processes DDP-wrapped, or an FSDP2 module
            with ``DDP_CONFIG.STRATEGY fsdp``); ``unwrap(model)`` is the bare one.
        optimizer, scheduler, step: The optimizer, its per-step LR schedule and the train step
            (``step.ema`` is the EMA or None, ``step.scaler`` the fp16 grad scaler or None).
        train_loader, val_loader: The loaders (``val_loader`` None without a validation list).
        classes: The training data's class names (entry ``i`` names class ``i``; the id itself
            where nothing names it), or [] when it names none: the validation data's ids follow
            them, and checkpoints keep them (``classes``) for testing and prediction.
        train_stream: The :class:`~zoo.data.epoch_stream.EpochStream` the epochs read: one pass
            of ``train_loader`` over the remaining epochs, so its workers make the next epoch's
            first batches while an epoch ends (None before the first epoch, or after a hook
            stopped it: the next epoch opens a new one).
        checkpoint_writes: The :class:`~zoo.train.checkpoint_writer.BackgroundWriter` that writes
            checkpoints while training goes on.
        writer: The :class:`~zoo.infer.metrics.MetricsWriter` (metrics.jsonl + TensorBoard).
        epochs, start_epoch, epoch: ``CONFIG.TRAIN.EPOCH_NUM``, the first epoch this run trains
            and the current one (0-based).
        start_iter: Batches of ``start_epoch`` trained before a mid-epoch resume (else 0); the
            run skips them without decoding them.
        resumed: The :class:`~zoo.train.checkpoint.ResumedState` of the checkpoint resumed, or
            None for a fresh start.
        iters_per_epoch, steps_per_epoch: Loader batches and optimizer steps per epoch.
        iteration: Optimizer steps taken since the run began (across resumes).
        inner_iter, batch, loss: The batch index in this epoch, the batch ``(clips, labels,
            indices, n_bad)`` and its loss (a detached tensor, set after the step).
        best_top1: The best validation top-1 so far (-1 before any validation).
        best_value, is_best: The best validation ``CONFIG.TRAIN.BEST_METRIC`` so far (None before
            any), and whether this epoch set it (``best.pth``).
        stale_validations: Validations in a row since the last new best (what
            CONFIG.TRAIN.EARLY_STOP_PATIENCE counts; kept in checkpoints).
        stop_reason: Why training ends after this epoch although epochs are left (set by
            :meth:`request_stop`), else None.
        last_val: The last validation's ``val`` record, or None.
        progress_bar: The open tqdm bar, or None.
        hooks: The hooks, in call order.
        preemption: The :class:`~zoo.launch.preemption.PreemptionWatch` of this process (None
            until :meth:`train` installs one): a preemption signal stops every rank after the
            same step, with a mid-epoch checkpoint (see zoo/launch/preemption.py).
    """

    start_iter = 0  # class defaults: hooks and tests may build a trainer without __init__
    stale_validations = 0
    best_value: Optional[float] = None
    stop_reason: Optional[str] = None
    checkpointed_epoch = 0  # the last epoch-end checkpoint's epoch (1-based; Checkpointer sets it)
    resumed: Optional[ResumedState] = None
    preemption: Optional[PreemptionWatch] = None
    execution = Execution()  # eager, as a trainer built without __init__ runs
    train_stream: Optional[EpochStream] = None
    checkpoint_writes: Optional[BackgroundWriter] = None
    staging: Optional[DeviceStaging] = None

    def __init__(self, cfg, hooks: Sequence[HookBase] = ()) -> None:
        # Empty DATA.MEAN / STD mean the model's own, as zoo.train and the tool fill them.
        self.cfg = cfg = with_model_normalization(cfg)
        self.logger, self.device, self.out_dir = worker_setup(cfg)
        user_hooks = load_user_hooks(cfg.CONFIG.TRAIN.HOOKS)  # a bad entry fails before building
        # The loaders' workers outlive a preemption signal until the step that stops with a
        # checkpoint (zoo/launch/preemption.py; it may come during validation too).
        grace = float(cfg.CONFIG.TRAIN.PREEMPT_GRACE)
        self.train_loader = build_loader(cfg, "train", signal_grace=grace)
        self.classes = named_classes(getattr(self.train_loader.dataset, "classes", []))
        self.val_loader = (build_loader(cfg, "val", signal_grace=grace, classes=self.classes)
                           if cfg.CONFIG.DATA.VAL_ANNO_PATH else None)
        self.iters_per_epoch = len(self.train_loader)
        train = cfg.CONFIG.TRAIN
        self.execution = run_execution(cfg, self.device, self.iters_per_epoch)
        self._build_model()  # after the loaders: COMPILE auto weighs the epoch's length
        # Multigrid: epochs differ in length (the batch sampler knows each one's batches).
        self.multigrid = getattr(self.train_loader.batch_sampler, "plan", None)
        self.epoch_steps: Optional[List[int]] = None
        if self.multigrid is not None:
            check_model(cfg, unwrap(self.model))
            self.epoch_steps = epoch_steps(self.train_loader.batch_sampler,
                                           self.multigrid.epochs, train.ACCUM_STEPS)
            self.steps_per_epoch = self.epoch_steps[0]
        else:
            self.steps_per_epoch = _check_steps(self.iters_per_epoch, train.ACCUM_STEPS)
        self._build_step()
        # On a GPU each batch's clips are copied one batch ahead, beside the step before.
        self.staging = DeviceStaging(self.device) if self.device.type == "cuda" else None
        log = cfg.CONFIG.LOG
        self.save_dir, source = checkpoint_dir(cfg)
        if source:
            self.logger.info("checkpoints go to and resume from %s (%s)", self.save_dir, source)
        self.writer = MetricsWriter(self.out_dir, os.path.join(self.out_dir, log.LOG_DIR))
        self.cfg_yaml = cfg_to_yaml(with_job_layout(cfg))
        self.epochs = self.multigrid.epochs if self.multigrid is not None else train.EPOCH_NUM
        self.start_epoch = self.epoch = self.iteration = self.inner_iter = self.start_iter = 0
        self.preemption: Optional[PreemptionWatch] = None
        self.best_top1, self.best_value, self.is_best = -1.0, None, False
        self.last_val: Optional[Dict[str, Any]] = None  # the last val record (Validation sets it)
        self.batch: Any = None
        self.loss: Optional[torch.Tensor] = None
        self.progress_bar = None
        self.checkpoint_writes = BackgroundWriter()
        self.hooks: List[HookBase] = []
        self.register_hooks(default_hooks(cfg, self.save_dir))
        if self.execution.compile:
            self.register_hooks([CompileTimer(self.execution.compile_mode)])
        self.register_hooks(hooks)
        self.register_hooks(user_hooks)

    def _build_model(self) -> None:
        cfg = self.cfg
        self.model = prepare_model(cfg, self.device, self.logger, self.execution, self.classes)
        bare = unwrap(self.model)
        self.logger.info("model %s: %.2fM parameters (%.2fM trainable)", cfg.CONFIG.MODEL.NAME,
                         sum(p.numel() for p in bare.parameters()) / 1e6,
                         sum(p.numel() for p in bare.parameters() if p.requires_grad) / 1e6)

    def _build_step(self) -> None:
        cfg, train = self.cfg, self.cfg.CONFIG.TRAIN
        bare = unwrap(self.model)
        self.optimizer = build_optimizer(cfg, bare, classifier_module(bare).parameters())
        if self.multigrid is not None:
            self.scheduler = build_multigrid_scheduler(cfg, self.optimizer, self.multigrid,
                                                       self.epoch_steps, comm.get_world_size())
        else:
            self.scheduler = build_lr_scheduler(cfg, self.optimizer, self.steps_per_epoch,
                                                comm.get_world_size())
        precision, channels_last = execution_settings(train, self.device)
        self.logger.info("execution: %s%s, %s, %s", precision,
                         " (PRECISION auto)" if train.PRECISION == "auto" else "",
                         "channels-last" if channels_last else "contiguous",
                         self.execution.describe())
        self.step = TrainStep(
            self.model, self.optimizer, self.scheduler, self.device, cfg.CONFIG.DATA.NUM_CLASSES,
            precision=precision, channels_last=channels_last,
            accum_steps=train.ACCUM_STEPS, clip_grad_norm=train.CLIP_GRAD_NORM,
            label_smoothing=train.LABEL_SMOOTHING, mixup_alpha=train.MIXUP_ALPHA,
            cutmix_alpha=train.CUTMIX_ALPHA, ema_decay=train.EMA_DECAY,
            nonfinite=train.NONFINITE, normalization=normalization(cfg),
            cuda_graphs=self.execution.cuda_graphs, model_name=cfg.CONFIG.MODEL.NAME,
        )

    def register_hooks(self, hooks: Sequence[HookBase]) -> None:
        """Append ``hooks`` (they run after the ones registered before them)."""
        for hook in hooks:
            hook.trainer = self
            self.hooks.append(hook)

    def _call(self, name: str, *args: Any) -> None:
        for hook in self.hooks:
            method = getattr(hook, name, None)  # a hook passed in need not subclass HookBase
            if method is None:
                continue
            try:
                method(*args)
            except Exception as e:
                # The failure line names a user's hook (zoo.utils.errors.hook_of); the innermost
                # hook wins when one hook's method calls another's.
                if not type(hook).__module__.startswith("zoo.") and not hasattr(e, "zoo_hook"):
                    e.zoo_hook = f"{type(hook).__name__}.{name}"
                raise

    def notify(self, name: str, *args: Any) -> None:
        """Call every hook's ``name(*args)``: the built-in hooks report through it
        (``after_validation(metrics)``, ``after_checkpoint(path)``; see zoo/train/hooks.py)."""
        self._call(name, *args)

    def is_last_epoch(self) -> bool:
        """Whether training ends with this epoch: the last of EPOCH_NUM, or one a stop was
        asked for (its validation and checkpoint still follow)."""
        return self.epoch + 1 == self.epochs or self.stop_reason is not None

    def request_stop(self, reason: str) -> None:
        """End training after this epoch as if it were the last; ``reason`` is logged. One rank
        asking stops them all (:meth:`agree_on_stop`). Asked in a hook's ``after_validation``,
        the epoch's checkpoint is written as the last one; asked later in the epoch (a hook's
        ``after_epoch``), the run ends with the checkpoints ``LOG.SAVE_FREQ`` wrote."""
        if self.stop_reason is None:
            self.stop_reason = reason

    def agree_on_stop(self) -> None:
        """Every rank (a collective): a stop any rank asked for is asked on every rank, with the
        lowest such rank's reason."""
        reasons = [r for r in comm.all_gather_object(self.stop_reason) if r is not None]
        if reasons:
            self.request_stop(reasons[0])

    def validation_due(self) -> bool:
        """Whether this epoch ends with a validation: every ``CONFIG.VAL.FREQ`` epochs and after
        the last one, when there is a validation list."""
        freq = self.cfg.CONFIG.VAL.FREQ
        return self.val_loader is not None and (
            self.is_last_epoch() or (freq > 0 and (self.epoch + 1) % freq == 0))

    def resume(self) -> None:
        """Restore the checkpoint ``CONFIG.TRAIN.RESUME_EPOCH`` / ``AUTO_RESUME`` names, if any,
        after rank 0 removed the partial files of checkpoint writes an earlier run was killed
        in (before this run writes any)."""
        if comm.is_main_process():
            for name, size in remove_partial_writes(self.save_dir):
                self.logger.info("removed %s (%s) from %s: a checkpoint write cut short when an "
                                 "earlier run of this job was killed", name, size_in_words(size),
                                 self.save_dir)
        path = find_resume_checkpoint(self.cfg, self.save_dir, self.logger)
        agree_on_resume(path, self.save_dir)
        if not path:
            if comm.is_main_process():
                set_aside_earlier_run(self.save_dir, self.logger)
            return
        state = self.resumed = load_training_state(
            path, self.cfg, self.model, self.optimizer, self.scheduler, self.step.scaler,
            self.step.ema, self.logger)
        self.start_epoch, self.best_top1 = state.epoch, state.best_top1
        self.best_value = state.best_value
        self.stale_validations = state.stale_validations
        self.start_iter = state.epoch_iter
        where = ""
        if self.start_iter:
            n = self.start_iter
            where = (f", batch {n + 1} of {self.iters_per_epoch} (the {n} batches already trained "
                     "are skipped, not decoded)" if n < self.iters_per_epoch else
                     ", after its last batch (its end-of-epoch validation and checkpoint follow)")
        self.logger.info("resumed from %s: continuing at epoch %d%s", path, self.start_epoch + 1,
                         where)

    def _say_if_the_lr_scale_moved(self, world: int) -> None:
        """One warning when the resumed checkpoint's run had another number of processes and
        CONFIG.TRAIN.REFERENCE_BATCH scales the LRs with the global batch: every LR from here on
        is then another multiple of CONFIG.TRAIN.LR than the checkpoint's run used."""
        train, state = self.cfg.CONFIG.TRAIN, self.resumed
        if (state is None or train.REFERENCE_BATCH <= 0 or not state.processes
                or state.processes == world or self.start_epoch >= self.epochs):
            return
        per_process = train.BATCH_SIZE * train.ACCUM_STEPS
        self.logger.warning(
            "the checkpoint's run had %d processes (global batch %d), this one has %d (global "
            "batch %d): CONFIG.TRAIN.REFERENCE_BATCH %d scales every LR of the schedule by %.4g "
            "times the checkpoint's run's (peak LR %.5g); resume on %d processes to keep its LRs",
            state.processes, per_process * state.processes, world, per_process * world,
            train.REFERENCE_BATCH, world / state.processes, self.scheduler.peak_lr(),
            state.processes)

    def train(self, preemption: Optional[PreemptionWatch] = None) -> None:
        """Resume if asked, then train epochs ``start_epoch + 1 .. EPOCH_NUM``.

        Args:
            preemption: The installed watch that stops the run on a preemption signal (see
                :func:`train_worker`); None = signals keep their usual effect.

        Raises:
            Preempted: A preemption signal stopped the run (after the mid-epoch checkpoint).
        """
        self.preemption = preemption
        if preemption is not None:
            preemption.prepare()
        self.resume()
        train, world = self.cfg.CONFIG.TRAIN, comm.get_world_size()
        patience = train.EARLY_STOP_PATIENCE
        if patience and self.stale_validations >= patience and self.start_epoch < self.epochs:
            self.logger.warning(
                "nothing to train: the checkpoint resumed (epoch %d) comes after %d validations "
                "without a new best %s and CONFIG.TRAIN.EARLY_STOP_PATIENCE is %d; raise it, or "
                "set it to 0, to train on", self.start_epoch, self.stale_validations,
                train.BEST_METRIC, patience)
            self.epochs = self.start_epoch  # what the run trained to
        elif self.start_epoch >= self.epochs:
            self.logger.warning(
                "nothing to train: the checkpoint resumed is at epoch %d and "
                "CONFIG.TRAIN.EPOCH_NUM is %d; raise EPOCH_NUM to train on, or test it with "
                "tools/test_ddp.py", self.start_epoch, self.epochs)
        elif self.multigrid is not None:  # epochs differ in shape and length: the plan's first
            self.logger.info(describe_plan(self.multigrid, self.start_epoch, self.epoch_steps,
                                           world, train.ACCUM_STEPS, self.scheduler.base_lr))
        else:
            trained = self.steps_per_epoch * train.ACCUM_STEPS
            dropped = self.iters_per_epoch - trained
            self.logger.info(
                "training epochs %d..%d, %d batches each in %d optimizer steps%s, global batch %d "
                "(%d per process x %d processes x %d accumulation), peak LR %.5g",
                self.start_epoch + 1, self.epochs, trained, self.steps_per_epoch,
                f" (the loader's last {dropped} of {self.iters_per_epoch}, short of an "
                "accumulation, are dropped)" if dropped else "",
                train.BATCH_SIZE * world * train.ACCUM_STEPS, train.BATCH_SIZE, world,
                train.ACCUM_STEPS, self.scheduler.peak_lr(),
            )
        self._say_if_the_lr_scale_moved(world)
        # The optimizer steps taken go on from the checkpoint's count. The LR schedule goes on
        # from this run's steps up to where the checkpoint was instead: another number of
        # processes has epochs of another number of steps, and the schedule is set in epochs.
        self.iteration = self.step.steps = (self.resumed.iteration if self.resumed is not None
                                            else 0)
        if self.resumed is not None and self.start_epoch < self.epochs:
            done = (sum(self.epoch_steps[:self.start_epoch]) if self.epoch_steps is not None
                    else self.start_epoch * self.steps_per_epoch)
            continue_schedule(self.scheduler, self.resumed,
                              done + self.start_iter // train.ACCUM_STEPS,
                              self.start_epoch + self.start_iter / max(1, self.iters_per_epoch),
                              self.epochs, self.logger)
        self._call("before_train")
        for self.epoch in range(self.start_epoch, self.epochs):
            self.run_epoch()
            if self.stop_reason is not None and self.epoch + 1 < self.epochs:
                if self.checkpointed_epoch != self.epoch + 1:
                    self.logger.warning(
                        "epoch %d is not checkpointed: the stop was asked after its checkpoint "
                        "step; ask in a hook's after_validation to keep it", self.epoch + 1)
                self.logger.info("stopping after epoch %d of %d: %s", self.epoch + 1,
                                 self.epochs, self.stop_reason)
                self.epochs = self.epoch + 1
                if self.train_stream is not None:  # its next epoch is being made ahead
                    self.train_stream.stop()
                break
        self.wait_for_checkpoint()
        self._call("after_train")
        skipped = self.step.skipped
        self.logger.info("training finished; outputs in %s%s", self.out_dir,
                         f"; {skipped} non-finite steps skipped" if skipped else "")

    def run_epoch(self) -> None:
        """One epoch: its steps between ``before_epoch`` and ``after_epoch``, then the ranks agree
        on a stop (:meth:`agree_on_stop`, which is the epoch's barrier too).

        Raises:
            Preempted: After the step at which all ranks agreed to stop for a preemption signal.
        """
        self.model.train()
        skip = self.start_iter if self.epoch == self.start_epoch else 0
        if self.multigrid is not None:  # its shapes follow (epoch, batch number)
            self.iters_per_epoch = self.train_loader.batch_sampler.batches_in_epoch(self.epoch)
            self.steps_per_epoch = self.epoch_steps[self.epoch]
        self.is_best = False
        self._call("before_epoch")
        last = self.steps_per_epoch * self.cfg.CONFIG.TRAIN.ACCUM_STEPS
        batches = self._epoch_batches(skip)
        if self.staging is not None:
            batches = self.staging(batches)
        for self.inner_iter, self.batch in enumerate(batches, start=skip):
            if self.inner_iter >= last:
                break  # a partial accumulation at the epoch's end is dropped
            self._call("before_step")
            self.run_step()
            self._call("after_step")
            note_step(self.epoch + 1, self.inner_iter + 1)  # what a hang report names
            if (self.preemption is not None and self.step.micro == 0
                    and self.preemption.should_stop()):
                self.stop_for_preemption()
        self.step.settle()  # the last step's non-finite verdict, before the epoch is reported
        self._call("after_epoch")
        self.agree_on_stop()  # also the epoch's barrier: every rank ends the same epoch

    def _trained_batches(self, epoch: int) -> int:
        """Batches of ``epoch`` trained: whole accumulations (a partial one at the end is
        dropped, and never decoded)."""
        steps = self.epoch_steps[epoch] if self.epoch_steps is not None else self.steps_per_epoch
        return steps * self.cfg.CONFIG.TRAIN.ACCUM_STEPS

    def _epoch_batches(self, skip: int):
        """The batches of this epoch from batch ``skip`` on: from :attr:`train_stream` (opened
        here at the first epoch, or when a hook stopped it), else, for a loader whose sampler
        cannot span epochs, a pass of ``train_loader`` over this epoch."""
        stream = self.train_stream
        if stream is None or stream.next_epoch != self.epoch:
            if stream is not None:
                stream.stop()
            stream = self.train_stream = EpochStream.open(
                self.train_loader, self.epoch, self.epochs, skip, self._trained_batches)
        if stream is not None:
            return stream.epoch(self.epoch)
        set_loader_epoch(self.train_loader, self.epoch, skip)
        return self.train_loader

    def wait_for_checkpoint(self) -> None:
        """Wait for the checkpoint write in flight, if any (raises its error)."""
        if self.checkpoint_writes is not None:
            self.checkpoint_writes.wait()

    def stop_for_preemption(self) -> None:
        """Every rank, after the agreed step: rank 0 writes the mid-epoch checkpoint, all wait for
        it, then raise :class:`Preempted` (the process exits 75)."""
        self.wait_for_checkpoint()  # an epoch's checkpoint still being written comes first
        self.step.settle()  # "stop" ends here rather than save a step it would have refused
        watch, done = self.preemption, self.inner_iter + 1
        rng = gather_rng_states()  # every rank takes part; rank 0 writes
        written = True
        state = None
        if comm.is_main_process() or is_sharded(self.model):  # gathering shards: every rank
            state = training_state(self.model, self.optimizer, self.scheduler, self.step.scaler,
                                   self.step.ema, self.epoch, self.iteration, self.cfg_yaml, rng,
                                   self.best_top1, epoch_iter=done, classes=self.classes,
                                   stale_validations=self.stale_validations,
                                   best_value=self.best_value)
        if comm.is_main_process():
            try:
                path = save_preempt_checkpoint(self.save_dir, state)
                self.logger.info("preempted by %s: saved %s (epoch %d, batch %d of %d, iteration "
                                 "%d)", watch.received or "a signal on another rank", path,
                                 self.epoch + 1, done, self.iters_per_epoch, self.iteration)
            except CheckpointError as e:  # a full disk: say so, still leave as preempted
                written = False
                path = None
                self.logger.error("error: %s", e)
        else:
            path = None
        watch.checkpoint_written(written)
        self.notify("after_checkpoint", path)
        if self.progress_bar is not None:
            self.progress_bar.close()
        self.writer.close()
        comm.synchronize()  # nobody leaves before the checkpoint is complete
        raise Preempted(f"preempted at iteration {self.iteration}; resume with "
                        "CONFIG.TRAIN.AUTO_RESUME True")

    def stop_data_workers(self) -> None:
        """Shut the loaders' persistent data workers down now, the way their iterator does when
        it is freed. Otherwise they may still run when this process exits, and multiprocessing
        then ends them with SIGTERM, which training data workers outlive (see
        ``zoo.data.workers.seed_worker``): the exit would wait for their deadline."""
        for loader in (self.train_loader, self.val_loader):
            iterator = getattr(loader, "_iterator", None)  # persistent workers live there
            if iterator is not None and hasattr(iterator, "_shutdown_workers"):
                iterator._shutdown_workers()
                loader._iterator = None

    def run_step(self) -> None:
        """Forward and backward one batch (the optimizer steps every ACCUM_STEPS of them)."""
        clips, labels = self.batch[0], self.batch[1]
        geometry = batch_geometry(self.batch)  # cuts to resize on the device (RESIZE_ON device)
        self.loss = (self.step(clips, labels) if geometry is None
                     else self.step(clips, labels, geometry))
        if self.step.micro == 0:
            self.iteration += 1


def train(cfg, hooks: Sequence[HookBase] = (), overrides: Sequence[str] = ()) -> Dict[str, Any]:
    """Train: this process's share of the job (``zoo.train(cfg)``).

    Every way zoo trains ends here: the DDP_CONFIG launcher, torchrun and Slurm call it in each
    process they run (:func:`train_worker`), and so can an engine that starts the processes and
    forms the process group itself (Ray Train's workers; any scheduler): call
    ``torch.distributed.init_process_group`` first, or nothing for one process. Ranks come from
    the process group, the device from ``LOCAL_RANK`` (see :func:`zoo.launch.setup.this_process`).

    SIGTERM / SIGUSR1 stop it at the next step boundary with a checkpoint and raise
    :class:`~zoo.launch.preemption.Preempted` (a ``SystemExit`` with code 75; handled only when
    it runs in the main thread). A restarted job (``comm.get_restart_round()`` > 0) continues
    from the newest checkpoint. Global rank 0 holds the run's folder for the run: a second
    training job on the same folder stops on every rank with
    :class:`~zoo.launch.output_lock.OutputFolderBusy` (see zoo/launch/output_lock.py).

    Args:
        cfg: A config or the path of a YAML file (see :func:`zoo.launch.setup.job_config`).
        hooks: Hooks run after the built-in ones and before those of ``CONFIG.TRAIN.HOOKS``;
            ``after_validation(metrics)`` and ``after_checkpoint(path)`` report the run (see
            zoo/train/hooks.py).
        overrides: ``KEY VALUE`` pairs applied to ``cfg``, as on the command line.

    Returns:
        ``{"out_dir", "checkpoint_dir", "epochs", "iteration", "best_top1", "best_metric",
        "best_value", "val"}``: the run's folder, its checkpoint folder, the epochs trained to
        (fewer than EPOCH_NUM when training stopped early), the optimizer steps, the best
        validation top-1 (-1 without validation), ``CONFIG.TRAIN.BEST_METRIC`` and its best
        value (None without validation; ``best.pth`` holds that epoch) and the last ``val``
        record (or None).
    """
    return _train(job_config(cfg, overrides), hooks)


def train_worker(cfg) -> None:
    """What ``launch`` runs in every process of ``zoo-train``: :func:`train` of ``cfg``, whose
    ``DATA.MEAN`` / ``STD`` source the command line has logged already."""
    _train(job_config(cfg, announce=False), ())


def _train(cfg, hooks: Sequence[HookBase]) -> Dict[str, Any]:
    cfg = resolve_num_classes(cfg)
    # One training job per output folder: rank 0 holds it for the run (zoo/launch/output_lock.py).
    with this_process(cfg), training_folder(output_dir(cfg), *checkpoint_dir(cfg)):
        if comm.get_restart_round():
            cfg = resume_config(cfg)
        with watching(cfg.CONFIG.TRAIN.PREEMPT_GRACE) as watch:
            trainer = Trainer(cfg, hooks)
            try:
                trainer.train(preemption=watch)
            finally:
                trainer.stop_data_workers()
    return {"out_dir": trainer.out_dir, "checkpoint_dir": trainer.save_dir,
            "epochs": trainer.epochs, "iteration": trainer.iteration,
            "best_top1": trainer.best_top1, "best_metric": cfg.CONFIG.TRAIN.BEST_METRIC,
            "best_value": trainer.best_value, "val": trainer.last_val}
