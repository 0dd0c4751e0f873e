"""An example of a model defined outside zoo/, registered with zoo's MODEL_REGISTRY.

zoo imports this file when a config lists it under ``CONFIG.EXTRA_MODULES`` (or when a tool gets
``--extra-modules examples/my_model.py``); the ``@MODEL_REGISTRY.register()`` below then runs and
``CONFIG.MODEL.NAME: 'my_tiny_c3d'`` finds the builder. Nothing in zoo/ is edited.

    python tools/train_ddp.py --config-file configs/custom/my_model_example.yaml

The builder contract (see ``MODEL_REGISTRY.__doc__``): called as ``fn(num_classes=N, **kwargs)``
with the kwargs from ``CONFIG.MODEL.KWARGS``; returns an ``nn.Module`` that maps a float clip
``(B, C, T, H, W)`` to logits ``(B, num_classes)``. An optional ``facts`` dict beside it is shown
by ``tools/list_models.py --extra-modules examples/my_model.py``.
"""

import torch
import torch.nn as nn

from zoo.models import MODEL_REGISTRY


def conv_bn_relu(in_ch: int, out_ch: int, stride: int) -> nn.Sequential:
    """3x3x3 conv (stride in time and space), BatchNorm, ReLU."""
    return nn.Sequential(
        nn.Conv3d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm3d(out_ch),
        nn.ReLU(inplace=True),
    )


class TinyC3D(nn.Module):
    """A small C3D-style network: a few strided 3x3x3 conv stages, global pooling, a linear head.

    Args:
        num_classes: Output classes.
        width: Channels of the first stage; each later stage doubles them.
        stages: Number of conv stages (each halves T, H and W after the first).
        dropout: Dropout before the classifier.
    """

    def __init__(self, num_classes: int, width: int = 16, stages: int = 3,
                 dropout: float = 0.2) -> None:
        super().__init__()
        layers, in_ch = [], 3
        for i in range(stages):
            out_ch = width * 2**i
            layers.append(conv_bn_relu(in_ch, out_ch, stride=1 if i == 0 else 2))
            in_ch = out_ch
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(in_ch, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x)).flatten(1)
        return self.fc(self.dropout(x))


@MODEL_REGISTRY.register()
def my_tiny_c3d(num_classes: int = 400, width: int = 16, stages: int = 3,
                dropout: float = 0.2) -> nn.Module:
    """TinyC3D with typed keyword arguments (never the whole config).

    Args:
        num_classes: Output classes (zoo passes CONFIG.DATA.NUM_CLASSES).
        width: First-stage channels (CONFIG.MODEL.KWARGS ['width', 32] changes it).
        stages: Conv stages.
        dropout: Dropout before the classifier.
    """
    return TinyC3D(num_classes, width=width, stages=stages, dropout=dropout)


# Optional: what tools/list_models.py shows. params at 400 classes with the default kwargs.
my_tiny_c3d.facts = {
    "task": "video", "input_frames": 8, "sampling_stride": 2, "crop_size": 56,
    "mean": [0.45, 0.45, 0.45], "std": [0.225, 0.225, 0.225], "params": 96_640, "gflops": 0.1,
}
