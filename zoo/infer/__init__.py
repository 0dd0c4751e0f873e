"""zoo.infer: scoring and using trained models.

- ``evaluator.py``: multi-view evaluation through collectives (validation and testing);
  ``metrics.py``: accuracy and the run's metric sinks (metrics.jsonl, TensorBoard).
- ``tester.py``: ``test_worker(cfg)``, testing a checkpoint (test_metrics.json, predictions CSV);
  ``checkpoint_model.py``: the model a checkpoint holds, whatever the config says.
- ``predictor.py`` (zoo-predict), ``features.py`` (zoo-extract-features), ``export.py``
  (TorchScript / ONNX), ``plots.py`` (training curves, confusion matrix).

It reads checkpoints through ``zoo.utils.checkpoint_io`` and never imports ``zoo.train``.
"""
