"""zoo: a config-driven video/image classification model zoo with a multi-node DDP launcher.

``import zoo`` is cheap and does not import torch: the model names below load ``zoo.models`` (and
torch) on first use, so a process that only decodes videos (``zoo.data.decode.pyav``) stays small.

``zoo.train(cfg, hooks=(), overrides=())`` and ``zoo.test(cfg, overrides=())`` run one process's
share of a training or test job, inside a process group the caller set up (or none): what
``tools/train_ddp.py`` / ``tools/test_ddp.py`` run in each process, and what Ray Train's workers
or any other engine call (docs/multi_node.md, "Engines"). ``cfg`` is a config or a YAML path.
"""

import importlib as _importlib

from .utils import moved as _moved
from .utils.lazy import lazy_attributes

__version__ = "0.1.0"

# Public name -> the submodule that defines it (imported on first access, PEP 562).
_LAZY = {name: "models" for name in ("MODEL_REGISTRY", "build_model", "create_model",
                                     "list_models")}
_LAZY["test"] = "infer.tester"

__all__ = ["MODEL_REGISTRY", "__version__", "build_model", "create_model", "list_models", "test",
           "train"]

_lazy_getattr, __dir__ = lazy_attributes(__name__, _LAZY | {"train": "train"}, globals())


def __getattr__(name: str) -> object:
    if name == "train":  # the subpackage zoo.train, which is callable (zoo/train/__init__.py)
        return _importlib.import_module(".train", __name__)
    return _lazy_getattr(name)


# zoo.engine.trainer, zoo.data.decoders, ... still import, with a DeprecationWarning, for one
# more release (zoo/utils/moved.py lists where each module went).
_moved.install()
