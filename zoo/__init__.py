"""zoo: a config-driven video/image classification model zoo with a multi-node DDP launcher.

``import zoo`` is cheap and does not import torch: the model names below load ``zoo.models`` (and
torch) on first use, so a process that only decodes videos (``zoo.data.decode.pyav``) stays small.
"""

from .utils import moved as _moved
from .utils.lazy import lazy_attributes

__version__ = "0.1.0"

# Public name -> the submodule that defines it (imported on first access, PEP 562).
_LAZY = {name: "models" for name in ("MODEL_REGISTRY", "build_model", "create_model",
                                     "list_models")}

__all__ = ["MODEL_REGISTRY", "__version__", "build_model", "create_model", "list_models"]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())

# zoo.engine.trainer, zoo.data.decoders, ... still import, with a DeprecationWarning, for one
# more release (zoo/utils/moved.py lists where each module went).
_moved.install()
