"""zoo: a config-driven video/image classification model zoo with a multi-node DDP launcher."""

__version__ = "0.1.0"

from .models import MODEL_REGISTRY, build_model, create_model, list_models  # noqa: E402

__all__ = ["MODEL_REGISTRY", "__version__", "build_model", "create_model", "list_models"]
