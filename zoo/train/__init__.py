"""zoo.train: the training run every worker executes.

- ``trainer.py``: :class:`~zoo.train.trainer.Trainer` builds the run (model, DDP wrap, loaders,
  optimizer, schedule, hooks), resumes it and runs its epochs; ``train_worker(cfg)`` is what
  ``launch`` starts in each process.
- ``hooks.py``: everything around the step (progress, metrics, precise BN, validation,
  checkpoints, the user's hooks); ``step.py``: one iteration (autocast, loss, backward, clip,
  optimizer, EMA).
- ``checkpoint.py``: saving and resuming training state; ``precision.py``: precision and memory
  layout; ``ema.py``, ``mixup.py``, ``precise_bn.py``, ``sync_bn.py``, ``finetune.py``.

It stands on ``zoo.infer`` (validation is its evaluator), ``zoo.launch`` (worker setup,
heartbeat, preemption) and ``zoo.accel`` (applied by the trainer only).
"""
