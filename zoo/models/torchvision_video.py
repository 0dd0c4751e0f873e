"""torchvision's video classifiers, registered under their torchvision names so they train through
zoo unchanged: ``r3d_18``, ``mc3_18``, ``r2plus1d_18``, ``s3d``. (The Video Swin Transformers
``swin3d_t/s/b`` and MViT are zoo's own: zoo/models/swin3d.py, zoo/models/mvit.py.)

Each builder calls the torchvision builder with ``weights=None`` (zoo never downloads) and
``num_classes``; load local weights with ``create_model(name, pretrained=PATH)`` (a torchvision
state-dict file works as is: the keys are torchvision's). All take ``(B, C, T, H, W)`` and return
logits. Facts follow torchvision's weight metadata (its recipe's frames, frame rate, crop,
normalisation); gflops are recounted at those sizes with ``torch.utils.flop_counter``.

Each built model is its torchvision class extended with :class:`~zoo.models.classifier.
ClassifierMixin` (``get_classifier`` / ``reset_classifier``; same modules, same state dict), see
``_CLASSIFIERS``.

Size limits come from the models themselves: ``s3d`` needs at least 14 frames of 224x224 (its
final pooling has a fixed 2x7x7 window), the others take any size.
"""

from __future__ import annotations

from typing import Any, Callable, Dict

import torch.nn as nn

from .classifier import ClassifierMixin
from .facts import video_facts
from .registry import register_model

__all__ = ["TORCHVISION_VIDEO_MODELS"]

_RESNET_MEAN = [0.43216, 0.394666, 0.37645]
_RESNET_STD = [0.22803, 0.22145, 0.216989]

# name: (frames, sampling stride at 30 fps, crop, mean, std, params at 400 classes, gflops,
#        Kinetics-400 top-1 of torchvision's weights, from their metadata)
TORCHVISION_VIDEO_MODELS = {
    "r3d_18": (16, 2, 112, _RESNET_MEAN, _RESNET_STD, 33_371_472, 40.7, 63.2),
    "mc3_18": (16, 2, 112, _RESNET_MEAN, _RESNET_STD, 11_695_440, 43.3, 63.96),
    "r2plus1d_18": (16, 2, 112, _RESNET_MEAN, _RESNET_STD, 31_505_325, 40.5, 67.463),
    "s3d": (128, 2, 224, _RESNET_MEAN, _RESNET_STD, 8_320_048, 143.8, 68.368),
}


# torchvision class -> the dotted path of its classifier layer and the std of torchvision's normal
# init of it (reset_classifier repeats it; trunc_normal_(std=0.02) cuts at +-2, i.e. never; None:
# PyTorch's default init, as torchvision leaves S3D's conv).
_CLASSIFIERS = {"VideoResNet": ("fc", 0.01), "S3D": ("classifier.1", None)}
# torchvision class -> its subclass with ClassifierMixin (made once, on first use, so importing
# zoo.models does not import torchvision.models).
_WITH_CLASSIFIER: Dict[type, type] = {}


def _with_classifier(model: nn.Module) -> nn.Module:
    """``model`` as an instance of its class extended with ``ClassifierMixin``: only methods are
    added, so modules, state dict and forward stay torchvision's."""
    cls = type(model)
    if cls not in _WITH_CLASSIFIER:
        path, std = _CLASSIFIERS[cls.__name__]
        attrs = {"classifier_name": path, "head_init_std": std, "__module__": __name__,
                 "__doc__": cls.__doc__}
        _WITH_CLASSIFIER[cls] = type(cls.__name__, (ClassifierMixin, cls), attrs)
    model.__class__ = _WITH_CLASSIFIER[cls]
    return model


def _make(name: str) -> Callable[..., nn.Module]:
    def build(num_classes: int = 400, **kwargs: Any) -> nn.Module:
        import torchvision.models.video as tv_video

        if kwargs.get("weights") is not None:
            raise ValueError(f"{name}: zoo does not download weights; pass a local file as "
                             "pretrained=PATH (create_model) or CONFIG.MODEL.PRETRAINED")
        kwargs.pop("weights", None)
        return _with_classifier(getattr(tv_video, name)(weights=None, num_classes=num_classes,
                                                        **kwargs))

    return build


for _name, (_frames, _stride, _crop, _mean, _std, _params, _gflops, _top1) in (
        TORCHVISION_VIDEO_MODELS.items()):
    register_model(
        _name, _make(_name),
        video_facts(_frames, _stride, _crop, _mean, _std, params=_params, gflops=_gflops,
                    published_top1=_top1, source="torchvision"),
        f"""torchvision's ``{_name}`` (random init), registered for zoo.

    Args:
        num_classes: Output classes.
        **kwargs: Passed to ``torchvision.models.video.{_name}``.
    """)
