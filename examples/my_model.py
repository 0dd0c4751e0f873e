"""An example of a model defined outside zoo/, registered with zoo's ``register_model``.

zoo imports this file when a config lists it under ``CONFIG.EXTRA_MODULES`` (or when a tool gets
``--extra-modules examples/my_model.py``); the ``register_model`` call below then runs and
``CONFIG.MODEL.NAME: 'my_tiny_c3d'`` finds the builder. Nothing in zoo/ is edited.

    python tools/train_ddp.py --config-file configs/custom/my_model_example.yaml

The builder contract (see ``MODEL_REGISTRY.__doc__``): called as ``fn(num_classes=N, **kwargs)``
with the kwargs from ``CONFIG.MODEL.KWARGS``; returns an ``nn.Module`` that maps a float clip
``(B, C, T, H, W)`` to logits ``(B, num_classes)``. The ``ModelFacts`` beside it are shown by
``tools/list_models.py --extra-modules examples/my_model.py``.

TinyC3D defines no ``get_classifier()``: zoo takes its last ``nn.Linear`` (``fc``) as the
classifier, for fine-tuning and for re-initialising the head of pretrained weights. A model whose
head is not its last ``nn.Linear`` inherits ``zoo.models.ClassifierMixin`` and sets
``classifier_name``.
"""

import torch
import torch.nn as nn

from zoo.models import ModelFacts, register_model


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


# params at 400 classes with the default kwargs; gflops per 8 x 56 x 56 clip.
register_model(
    "my_tiny_c3d", TinyC3D,
    ModelFacts(input_frames=8, sampling_stride=2, crop_size=56, mean=(0.45, 0.45, 0.45),
               std=(0.225, 0.225, 0.225), params=96_640, gflops=0.1),
    """TinyC3D (typed keyword arguments, never the whole config).

    Args:
        num_classes: Output classes (zoo passes CONFIG.DATA.NUM_CLASSES).
        **kwargs: ``width`` (CONFIG.MODEL.KWARGS ['width', 32] changes it), ``stages``,
            ``dropout``.
    """,
    width=16, stages=3, dropout=0.2,
)
