"""Ray Train: run ``zoo.train`` on ``TorchTrainer``'s workers, report to Ray, resume from Ray.

Ray Train starts the worker processes, forms the process group (gloo on CPU, NCCL on GPUs) and
calls a function on every worker; checkpoints travel through ``ray.train.report`` (Ray copies the
reported folder into its run storage) and come back after a restart through
``ray.train.get_checkpoint()``. With this module the function is one call::

    def train_func(config):
        from zoo.integrations.ray import train
        train(config["config_file"], overrides=config["overrides"])

    TorchTrainer(train_func, train_loop_config={...},
                 scaling_config=ScalingConfig(num_workers=2),
                 run_config=RunConfig(storage_path=..., failure_config=FailureConfig(1))).fit()

(``examples/ray/train.py`` is the whole script.) What happens on every worker:

- :func:`checkpoint_config` gives the run a checkpoint folder of its own on the worker's disk
  (``CONFIG.LOG.CHECKPOINT_DIR``); when Ray hands back a checkpoint (a restart after a failure,
  or ``TorchTrainer(resume_from_checkpoint=...)``), its files are copied there first and
  ``TRAIN.AUTO_RESUME`` is on, so zoo resumes exactly from it, as after any restart. The logs,
  metrics.jsonl and config.yaml stay in ``BASE_PATH/EXP_NAME`` as always.
- :class:`RayReport` (a hook) calls ``ray.train.report`` on every worker (Ray Train requires all
  workers to report the same number of times) after each checkpoint, with the epoch, the
  iteration and the last validation's metrics; rank 0 attaches the checkpoint file it just wrote.
  A validation in an epoch without a checkpoint (``LOG.SAVE_FREQ`` > 1) is reported at the
  epoch's end without one.

Checked with Ray 2.60, whose default is Ray Train v2 (``RAY_TRAIN_V2_ENABLED``, on unless set
to 0): there ``report`` is a barrier across the workers, and checkpoints reported by several
workers are merged into one folder (here only rank 0 attaches one). ray is imported when these
functions run, never by ``import zoo`` or ``import zoo.integrations.ray``; ``pip install
'zoo[ray]'`` installs it.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import tempfile
from typing import Any, Dict, Optional, Sequence, Tuple

from ..train.hooks import HookBase
from ..utils.errors import UserError

logger = logging.getLogger("zoo")

# The files of a zoo checkpoint folder that a Ray checkpoint carries (one each: the newest).
_CHECKPOINT_FILES = ("epoch_*.pth", "preempt_epoch*_iter*.pth")


class RayNotInstalled(UserError, ImportError):
    """ray is not installed; the message says how to install it."""


def _ray_train():
    try:
        import ray.train
    except ImportError as e:
        raise RayNotInstalled(f"zoo.integrations.ray needs Ray Train ({e}); install it with "
                              "pip install 'zoo[ray]' (or pip install 'ray[train]')") from None
    return ray.train


def _numbers(metrics: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float))}


class RayReport(HookBase):
    """Report each checkpoint, with the last validation's metrics, to Ray Train.

    Add it to ``zoo.train(cfg, hooks=[RayReport()])`` on every worker (:func:`train` does).
    Each report's metrics: ``epoch``, ``iteration`` and, when a validation ran since the last
    report, its ``top1``, ``top5``, ``mean_class_acc``, ``loss``, ``num_videos``. Rank 0
    attaches a Ray checkpoint holding the file it wrote (``epoch_N.pth``; ``preempt_...pth`` after
    a preemption signal); the other ranks report the same metrics without one.

    Args:
        resumed_from: The Ray checkpoint this run resumed from (see :func:`checkpoint_config`),
            named in the log at the start.
    """

    def __init__(self, resumed_from: Optional[str] = None) -> None:
        self.resumed_from = resumed_from
        self.pending: Optional[Dict[str, Any]] = None  # validation metrics not reported yet

    def before_train(self) -> None:
        if self.resumed_from:
            self.trainer.logger.info("Ray Train handed back checkpoint %s: resumed from it",
                                     self.resumed_from)

    def after_validation(self, metrics: Dict[str, Any]) -> None:
        self.pending = _numbers(metrics)

    def after_checkpoint(self, path: Optional[str]) -> None:
        self._report(path)

    def after_epoch(self) -> None:
        if self.pending is not None:  # validated, but this epoch saved no checkpoint
            self._report(None)

    def _report(self, path: Optional[str]) -> None:
        train = _ray_train()
        t = self.trainer
        metrics: Dict[str, Any] = {"epoch": t.epoch + 1, "iteration": t.iteration}
        metrics.update(self.pending or {})
        self.pending = None
        if not path:
            train.report(metrics)
            return
        # A folder of its own holding only this file: Ray copies the whole folder to storage.
        folder = tempfile.mkdtemp(prefix="zoo_ray_report_")
        try:
            target = os.path.join(folder, os.path.basename(path))
            try:
                os.link(path, target)  # same disk: no copy (the file is never written again)
            except OSError:
                shutil.copy2(path, target)
            train.report(metrics, checkpoint=train.Checkpoint.from_directory(folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def checkpoint_config(cfg, folder: Optional[str] = None) -> Tuple[Any, Optional[str]]:
    """``cfg`` for one Ray worker: checkpoints in a folder on this worker's disk, resumed from the
    checkpoint Ray hands back when there is one (see the module docstring).

    Args:
        cfg: A frozen zoo config.
        folder: The checkpoint folder to use (created; default a new temporary folder).

    Returns:
        ``(config, resumed_from)``: a frozen copy with ``CONFIG.LOG.CHECKPOINT_DIR`` set and, when
        Ray handed back a checkpoint, ``TRAIN.AUTO_RESUME`` True and ``TRAIN.RESUME_EPOCH`` -1;
        and the handed-back checkpoint's path (with the files copied from it), else None.
    """
    train = _ray_train()
    folder = folder or tempfile.mkdtemp(prefix="zoo_ray_checkpoints_")
    os.makedirs(folder, exist_ok=True)
    if cfg.CONFIG.LOG.CHECKPOINT_DIR:
        logger.info("Ray Train keeps the checkpoints: CONFIG.LOG.CHECKPOINT_DIR %s is replaced by "
                    "%s on this worker", cfg.CONFIG.LOG.CHECKPOINT_DIR, folder)
    new = cfg.clone()
    new.defrost()
    new.CONFIG.LOG.CHECKPOINT_DIR = folder
    given = train.get_checkpoint()
    resumed_from = None
    if given is not None:
        with given.as_directory() as src:
            found = [p for pattern in _CHECKPOINT_FILES
                     for p in glob.glob(os.path.join(src, pattern))]
            for path in found:
                shutil.copy2(path, os.path.join(folder, os.path.basename(path)))
        names = ", ".join(sorted(os.path.basename(p) for p in found)) or "no zoo file in it"
        resumed_from = f"{given.path} ({names})"
        new.CONFIG.TRAIN.AUTO_RESUME = True
        new.CONFIG.TRAIN.RESUME_EPOCH = -1
    new.freeze()
    return new, resumed_from


def train(cfg, overrides: Sequence[str] = (), hooks: Sequence[HookBase] = ()) -> Dict[str, Any]:
    """``zoo.train`` on a Ray Train worker: call it from the function given to ``TorchTrainer``.

    Args:
        cfg: A config or the path of a YAML file; ``overrides`` are ``KEY VALUE`` pairs on top.
        hooks: More hooks, run after :class:`RayReport`.

    Returns:
        What :func:`zoo.train.trainer.train` returns. The worker's checkpoint folder is removed
        at the end (Ray's storage holds the reported checkpoints).
    """
    from ..launch.setup import job_config
    from ..train.trainer import train as zoo_train

    # zoo_train works the config out again, and logs where DATA.MEAN / STD came from.
    cfg, resumed_from = checkpoint_config(job_config(cfg, overrides, announce=False))
    try:
        return zoo_train(cfg, hooks=[RayReport(resumed_from), *hooks])
    finally:  # each report persisted its checkpoint before it returned
        shutil.rmtree(cfg.CONFIG.LOG.CHECKPOINT_DIR, ignore_errors=True)
