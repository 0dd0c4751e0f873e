"""Model registry and the registered model families.

Importing this package registers every built-in model. Add your own with::

    from zoo.models import MODEL_REGISTRY

    @MODEL_REGISTRY.register()
    def my_net(num_classes=400, **kwargs): ...

and load the file with CONFIG.EXTRA_MODULES (or --extra-modules).
"""

# Importing the family modules registers their models.
from . import (  # noqa: F401
    gluoncv_names,
    r2plus1d,
    resnet,
    resnet3d,
    slowfast,
    torchvision_video,
    tpn,
    tsn,
    vmz,
)
from .build import (
    MODEL_REGISTRY,
    build_model,
    create_model,
    list_models,
    model_facts,
    parse_model_kwargs,
)

__all__ = [
    "MODEL_REGISTRY", "build_model", "create_model", "list_models", "model_facts",
    "parse_model_kwargs",
]
