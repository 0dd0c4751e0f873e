"""zoo.integrations: zoo inside engines that run the training function themselves.

- ``ray.py``: Ray Train (``TorchTrainer``): a hook that reports each validation and each
  checkpoint to Ray, and :func:`zoo.integrations.ray.train`, which resumes from the checkpoint
  Ray hands back after a restart.

Each module imports its engine only when used (``import zoo.integrations.ray`` does not import
ray), and stands on :mod:`zoo.train` (``zoo.train(cfg, hooks)``), the layer below it.
"""
