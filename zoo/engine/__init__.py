"""Deprecated: the engine's modules moved to zoo.launch, zoo.train, zoo.infer, zoo.cli and
zoo.accel (zoo/utils/moved.py has the table). ``from zoo.engine import Trainer`` and
``import zoo.engine.trainer`` still work for one more release, with a DeprecationWarning.
"""

from __future__ import annotations

import importlib
import warnings

# Name -> the module that defines it now.
_NAMES = {
    "HookBase": "zoo.train.hooks", "Trainer": "zoo.train.trainer",
    "train_worker": "zoo.train.trainer", "LaunchError": "zoo.launch.topology",
    "launch": "zoo.launch.launch", "test_worker": "zoo.infer.tester",
}


def __getattr__(name: str) -> object:
    if name not in _NAMES:
        raise AttributeError(f"module 'zoo.engine' has no attribute {name!r}")
    warnings.warn(f"zoo.engine.{name} is deprecated: import it from {_NAMES[name]} (zoo.engine "
                  f"goes in the next release)", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(_NAMES[name]), name)
