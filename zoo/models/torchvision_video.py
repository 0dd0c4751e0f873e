"""torchvision's video classifiers, registered under their torchvision names so they train through
zoo unchanged: ``r3d_18``, ``mc3_18``, ``r2plus1d_18``, ``s3d``, ``mvit_v2_s``. (The Video Swin
Transformers ``swin3d_t/s/b`` are zoo's own, with torchvision's keys: zoo/models/swin3d.py.)

Each builder calls the torchvision builder with ``weights=None`` (zoo never downloads) and
``num_classes``; load local weights with ``create_model(name, pretrained=PATH)`` (a torchvision
state-dict file works as is: the keys are torchvision's). All take ``(B, C, T, H, W)`` and return
logits. Facts follow torchvision's weight metadata (its recipe's frames, frame rate, crop,
normalisation); gflops are recounted at those sizes with ``torch.utils.flop_counter``.

Each built model is its torchvision class extended with :class:`~zoo.models.classifier.
ClassifierMixin` (``get_classifier`` / ``reset_classifier``; same modules, same state dict), see
``_CLASSIFIERS``.

Size limits come from the models themselves: ``s3d`` needs at least 14 frames of 224x224 (its
final pooling has a fixed 2x7x7 window), ``mvit_v2_s`` needs exactly ``temporal_size`` frames of
``spatial_size`` (16 x 224 x 224 by default; zoo's builder, unlike torchvision's, accepts both as
kwargs, e.g. for small CPU tests), the others take any size.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

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
    "mvit_v2_s": (16, 4, 224, [0.45] * 3, [0.225] * 3, 34_537_744, 64.2, 80.757),
}


def _mvit_v2_s_blocks() -> List[Any]:
    """MViT-V2-S's 16 block settings: stages of 1, 2, 11, 2 blocks at widths 96..768 with 1..8
    heads; the first block of stages 2-4 doubles the width and halves the queries' H and W, and
    key/value pooling strides shrink 8, 4, 2, 1 so keys stay 7x7 at 224."""
    from torchvision.models.video.mvit import MSBlockConfig

    blocks, in_ch = [], 96
    for stage, depth in enumerate((1, 2, 11, 2)):
        dim, kv = 96 * 2**stage, 8 // 2**stage
        for j in range(depth):
            blocks.append(MSBlockConfig(
                num_heads=2**stage, input_channels=in_ch, output_channels=dim,
                kernel_q=[3, 3, 3], kernel_kv=[3, 3, 3],
                stride_q=[1, 2, 2] if j == 0 and stage > 0 else [1, 1, 1],
                stride_kv=[1, kv, kv]))
            in_ch = dim
    return blocks


def _mvit_v2_s(num_classes: int, spatial_size: Tuple[int, int] = (224, 224),
               temporal_size: int = 16, **kwargs: Any) -> nn.Module:
    """torchvision's MViT-V2-S at any input size (torchvision's builder fixes 16 x 224 x 224).

    At the default size the module tree and state dict equal ``mvit_v2_s()``'s (tested); other
    sizes change only the relative-position tables.
    """
    from torchvision.models.video import MViT

    kwargs.setdefault("stochastic_depth_prob", 0.2)
    return MViT(spatial_size=tuple(spatial_size), temporal_size=temporal_size,
                block_setting=_mvit_v2_s_blocks(), residual_pool=True,
                residual_with_cls_embed=False, rel_pos_embed=True, proj_after_attn=True,
                num_classes=num_classes, **kwargs)


# torchvision class -> the dotted path of its classifier layer and the std of torchvision's normal
# init of it (reset_classifier repeats it; trunc_normal_(std=0.02) cuts at +-2, i.e. never; None:
# PyTorch's default init, as torchvision leaves S3D's conv).
_CLASSIFIERS = {"VideoResNet": ("fc", 0.01), "S3D": ("classifier.1", None),
                "MViT": ("head.1", 0.02)}
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
        if name == "mvit_v2_s" and ("spatial_size" in kwargs or "temporal_size" in kwargs):
            return _with_classifier(_mvit_v2_s(num_classes, **kwargs))
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
