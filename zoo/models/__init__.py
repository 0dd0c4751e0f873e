"""Model registry and the registered model families.

Importing this package registers every built-in model. Add your own with::

    from zoo.models import ModelFacts, register_model

    register_model("my_net", MyNet, ModelFacts(input_frames=8, sampling_stride=2, crop_size=112,
                                               mean=(0.45,) * 3, std=(0.225,) * 3), width=32)

(or a plain ``@MODEL_REGISTRY.register()`` on a builder function) and load the file with
CONFIG.EXTRA_MODULES (or --extra-modules). Every built-in model has ``get_classifier()`` /
``reset_classifier(num_classes)`` (:class:`ClassifierMixin`, zoo/models/classifier.py).

Layout: registry.py (MODEL_REGISTRY, register_model, model_facts, list_models) imports nothing
else of zoo.models but facts.py; the family files and weights/ (the published-weights table,
download, loading, converters) stand on it; build.py (create_model, build_model) stands on both.
"""

# Importing the family modules registers their models.
from . import (  # noqa: F401
    gluoncv_names,
    mvit,
    mvit_rev,
    r2plus1d,
    r2plus1d_ptv,
    resnet,
    resnet3d,
    slowfast,
    swin3d,
    torchvision_video,
    tpn,
    tsn,
    videomae,
    vmz,
    x3d,
)
from .build import build_model, create_model, input_normalization, parse_model_kwargs
from .classifier import ClassifierMixin
from .facts import ModelFacts
from .registry import MODEL_REGISTRY, list_models, model_facts, register_model

__all__ = [
    "MODEL_REGISTRY", "ClassifierMixin", "ModelFacts", "build_model", "create_model",
    "input_normalization", "list_models", "model_facts", "parse_model_kwargs", "register_model",
]
