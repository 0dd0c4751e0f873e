"""Deprecated: the engine's modules moved to zoo.launch, zoo.train, zoo.infer, zoo.cli and
zoo.accel (zoo/utils/moved.py has the table). ``from zoo.engine import Trainer`` and
``import zoo.engine.trainer`` still work for one more release, with a DeprecationWarning.
"""

from __future__ import annotations

from ..utils.moved import moved_attributes

# Name -> the module that defines it now.
__getattr__ = moved_attributes(__name__, {
    "HookBase": "zoo.train.hooks", "Trainer": "zoo.train.trainer",
    "train_worker": "zoo.train.trainer", "LaunchError": "zoo.launch.topology",
    "launch": "zoo.launch.launch", "test_worker": "zoo.infer.tester",
})
