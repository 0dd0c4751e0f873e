"""zoo.train: the training run every worker executes.

- ``trainer.py``: :class:`~zoo.train.trainer.Trainer` builds the run (model, DDP wrap, loaders,
  optimizer, schedule, hooks), resumes it and runs its epochs; :func:`~zoo.train.trainer.train`
  is one process's share of a job, what ``launch`` starts in each process (``train_worker``) and
  what an engine that forms the process group itself calls.
- ``hooks.py``: everything around the step (progress, metrics, precise BN, validation,
  checkpoints, the user's hooks); ``step.py``: one iteration (autocast, loss, backward, clip,
  optimizer, EMA).
- ``checkpoint.py``: saving and resuming training state; ``precision.py``: precision and memory
  layout; ``ema.py``, ``mixup.py``, ``precise_bn.py``, ``sync_bn.py``, ``finetune.py``.

It stands on ``zoo.infer`` (validation is its evaluator), ``zoo.launch`` (worker setup,
heartbeat, preemption) and ``zoo.accel`` (applied by the trainer only).
"""

import sys
import types


class _TrainPackage(types.ModuleType):
    """``zoo.train`` is this package and also the function ``zoo.train(cfg, hooks=(),
    overrides=())`` (:func:`zoo.train.trainer.train`): calling the package calls it. Importing
    the package stays cheap; the trainer (and torch) load on the first call."""

    def __call__(self, cfg, hooks=(), overrides=()):
        from .trainer import train

        return train(cfg, hooks, overrides)


sys.modules[__name__].__class__ = _TrainPackage
