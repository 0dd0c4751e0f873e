"""Single-pathway 3D ResNets: Slow and I3D, as PySlowFast and gluoncv.torch build them.

All are ResNet bottleneck nets whose 2D layers gained a temporal kernel on conv a (and the stem);
they differ only in where, and in the stem's temporal stride:

==============  =======  ========  =======  ==========  ==========  ========  ================
net             stem kt  stem t/s  res2 kt  res3 kt     res4 kt     res5 kt   pool after res2
==============  =======  ========  =======  ==========  ==========  ========  ================
Slow            1        1         1        1           3           3         none
I3D             5        1         3        3, 1, ..    3, 1, ..    1, 3, 1   max (2, 1, 1)
I3D v1          5        2         3        3, 1, ..    3, 1, ..    1, 3, 1   max (2, 1, 1)
==============  =======  ========  =======  ==========  ==========  ========  ================

"stem t/s" is the temporal stride of the stem conv and of its max-pool: gluoncv's I3D
(``i3d_resnet*_v1``) takes 32 frames and halves time twice in the stem, PySlowFast's I3D takes 8.
gluoncv's I3D-NL nets (``i3d_nl5_*``, ``i3d_nl10_*``) add a non-local block
(:mod:`zoo.models.nonlocal_block`) after 5 or 10 of the res3 / res4 blocks; gluoncv's
``i3d_slow_*`` nets are the Slow nets.

State-dict keys: the SlowFast scheme without the pathway prefix (``stem.conv``, ``stem.bn``,
``res{n}.{j}.conv_a`` / ``bn_a`` / ``conv_b`` / ``bn_b`` / ``conv_c`` / ``bn_c``,
``res{n}.0.shortcut.{conv,bn}``, ``res{n}.{j}.nonlocal_block.{theta,phi,g,W,bn}``, ``head.proj``);
320 entries for the R50 nets, like a PySlowFast or PyTorchVideo checkpoint.
:func:`zoo.models.weights.load.inflate_from_file` (the builders' ``inflate_from`` argument)
fills them from a 2D ResNet with torchvision keys: each 2D kernel is repeated over the temporal
kernel and divided by its size, so a static clip gives the 2D logits (exactly with
``temporal_pad="replicate"``); non-local blocks keep their identity init.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import torch
import torch.nn as nn

from .blocks3d import STAGE_BLOCKS, Stem, block_kernels, init_3d_weights, make_stage
from .blockwise import StageLayersMixin
from .classifier import ClassifierMixin
from .facts import KINETICS_MEAN, KINETICS_STD, ModelFacts, video_facts
from .nonlocal_block import NonLocal3d, attach_nonlocal
from .registry import register_model
from .weights.load import inflate_from_file

__all__ = ["ResNet3d"]


class Head3d(nn.Module):
    """Global average pool, dropout, linear projection.

    Args:
        in_ch: Feature channels.
        num_classes: Output classes.
        dropout: Dropout probability before the projection.
    """

    def __init__(self, in_ch: int, num_classes: int, dropout: float) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.proj = nn.Linear(in_ch, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.dropout(self.pool(x).flatten(1)))


class ResNet3d(StageLayersMixin, ClassifierMixin, nn.Module):
    """A single-pathway 3D ResNet with bottleneck blocks; its classifier is ``head.proj``.

    Args:
        num_classes: Output classes.
        depth: 18, 50, 101 or 152 (blocks per stage from ``STAGE_BLOCKS``; all bottlenecks).
        stem_kt: Temporal kernel of the stem conv.
        stage_kts: Per stage (res2..res5), the temporal kernels of conv a, repeated over the
            stage's blocks (``(3, 1)`` alternates 3, 1, 3, ...).
        pool1_t: Temporal size and stride of a max-pool after res2 (1 = none; 2 for I3D).
        width: Stem width; stage inner widths are ``width * (1, 2, 4, 8)``, outputs 4x that.
        dropout: Dropout before the head projection.
        in_channels: Input channels (3 for RGB).
        drop_path: Stochastic depth of the last residual block (linear from 0 at the first).
        temporal_pad: ``"zeros"`` (published nets) or ``"replicate"`` (a net inflated from 2D
            then maps a static clip to exactly the 2D logits; see ``blocks3d``).
        zero_init_final_bn: Start each bottleneck's ``bn_c`` gamma at 0.
        head_init_std: Std of the normal init of the head projection.
        stem_stride_t: Temporal stride of the stem conv and of its max-pool (2 in gluoncv's I3D,
            which so sees 32 frames where PySlowFast's I3D sees 8).
        nonlocal_blocks: Per stage (res2..res5), the indices of the blocks followed by a
            :class:`~zoo.models.nonlocal_block.NonLocal3d` block (gluoncv's I3D-NL nets,
            PySlowFast's ``NONLOCAL.LOCATION``).
        num_block_temp_kernel: Per stage, how many leading blocks keep their temporal kernel;
            later blocks use 1 (PySlowFast's ``RESNET.NUM_BLOCK_TEMP_KERNEL``). None = all.
        nonlocal_instantiation: ``"softmax"`` or ``"dot_product"`` (PySlowFast's
            ``NONLOCAL.INSTANTIATION``).
        nonlocal_pool: Per stage, the ``(t, h, w)`` max-pool before a non-local block's ``phi``
            and ``g`` (PySlowFast's ``NONLOCAL.POOL``); None = no pooling (gluoncv).
        nonlocal_group: Per stage, time chunks a non-local block attends within
            (``NONLOCAL.GROUP``); None = 1.
    """

    classifier_name = "head.proj"

    def __init__(
        self,
        num_classes: int = 400,
        depth: int = 50,
        stem_kt: int = 1,
        stage_kts: Sequence[Sequence[int]] = ((1,), (1,), (3,), (3,)),
        pool1_t: int = 1,
        width: int = 64,
        dropout: float = 0.5,
        in_channels: int = 3,
        temporal_pad: str = "zeros",
        zero_init_final_bn: bool = True,
        head_init_std: float = 0.01,
        stem_stride_t: int = 1,
        nonlocal_blocks: Sequence[Sequence[int]] = ((), (), (), ()),
        num_block_temp_kernel: Optional[Sequence[int]] = None,
        nonlocal_instantiation: str = "softmax",
        nonlocal_pool: Optional[Sequence[Sequence[int]]] = None,
        nonlocal_group: Optional[Sequence[int]] = None,
        drop_path: float = 0.0,
    ) -> None:
        super().__init__()
        if depth not in STAGE_BLOCKS:
            raise ValueError(f"depth must be one of {sorted(STAGE_BLOCKS)}, got {depth}")
        if len(stage_kts) != 4 or len(nonlocal_blocks) != 4 or pool1_t < 1 or width < 1:
            raise ValueError(f"need 4 stage_kts, 4 nonlocal_blocks, pool1_t >= 1 and width >= 1, "
                             f"got {list(stage_kts)}, {list(nonlocal_blocks)}, {pool1_t}, {width}")
        self.stem = Stem(in_channels, width, stem_kt, temporal_pad, stem_stride_t, stem_stride_t)
        in_ch = width
        for i, (n, pattern) in enumerate(zip(STAGE_BLOCKS[depth], stage_kts)):
            inner = width * 2**i
            temp = None if num_block_temp_kernel is None else num_block_temp_kernel[i]
            kts = block_kernels(list(pattern), n, temp)
            stage = make_stage(in_ch, inner, inner * 4, kts, 1 if i == 0 else 2, temporal_pad)
            attach_nonlocal(stage, nonlocal_blocks[i], inner * 4, f"res{i + 2}",
                            instantiation=nonlocal_instantiation,
                            pool=tuple(nonlocal_pool[i]) if nonlocal_pool else (1, 1, 1),
                            group=nonlocal_group[i] if nonlocal_group else 1)
            self.add_module(f"res{i + 2}", stage)
            in_ch = inner * 4
        # Parameter-free, so it is not in the state dict; Identity keeps the forward uniform.
        self.pool1 = (nn.MaxPool3d((pool1_t, 1, 1), stride=(pool1_t, 1, 1)) if pool1_t > 1
                      else nn.Identity())
        self.head = Head3d(in_ch, num_classes, dropout)
        self.head_init_std = head_init_std  # what reset_classifier uses too
        init_3d_weights(self, zero_init_final_bn, head_init_std)
        for m in self.modules():
            if isinstance(m, NonLocal3d):
                m.reset_parameters()
        self.set_drop_path_rate(drop_path)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Feature map ``(B, C, T', H', W')`` after res5."""
        x = self.pool1(self.res2(self.stem(x)))
        return self.res5(self.res4(self.res3(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, num_classes)`` of a clip ``(B, C, T, H, W)``."""
        if x.dim() != 5:
            raise ValueError(f"expected a (B, C, T, H, W) clip, got shape {tuple(x.shape)}")
        return self.head(self.forward_features(x))


def _facts(params: int, gflops: float, frames: int, stride: int, **extra: Any) -> ModelFacts:
    return video_facts(frames, stride, 224, KINETICS_MEAN, KINETICS_STD, params=params,
                       gflops=gflops, **extra)


def _inflate(model: ResNet3d, path: str, num_classes: int, args: Dict[str, Any]) -> None:
    """Fill ``model`` from the 2D ResNet in ``path``; non-local blocks (no 2D counterpart) keep
    their fresh identity init, as in gluoncv's inflated I3D-NL nets."""
    if not any(args.get("nonlocal_blocks", ())):
        inflate_from_file(model, path)
        return
    plain = ResNet3d(num_classes=num_classes, **dict(args, nonlocal_blocks=((),) * 4))
    inflate_from_file(plain, path)
    result = model.load_state_dict(plain.state_dict(), strict=False)
    assert not result.unexpected_keys and all(".nonlocal_block." in k
                                              for k in result.missing_keys), result


def build_resnet3d(num_classes: int = 400, inflate_from: str = "", **kwargs: Any) -> ResNet3d:
    """A :class:`ResNet3d`, inflated from a 2D ResNet when ``inflate_from`` names one.

    Args:
        num_classes: Output classes.
        inflate_from: Path of a 2D ResNet state dict (a torchvision file or a zoo checkpoint of
            the matching 2D ResNet) to inflate into the 3D weights; the head is skipped when its
            class count differs. Empty = random init.
        **kwargs: Any :class:`ResNet3d` argument (``width``, ``depth``, ``temporal_pad``, ...).
    """
    model = ResNet3d(num_classes=num_classes, **kwargs)
    if inflate_from:
        _inflate(model, inflate_from, num_classes, kwargs)
    return model


_DOC = """{summary}

    Args:
        num_classes: Output classes.
        inflate_from: Path of a 2D ResNet state dict (a torchvision file or a zoo checkpoint of
            the matching 2D ResNet) to inflate into the 3D weights; the head is skipped when its
            class count differs. Empty = random init.
        **kwargs: Override any :class:`ResNet3d` argument (``width``, ``depth``,
            ``temporal_pad``, ...).
    """


def _variant(name: str, defaults: Dict[str, Any], summary: str, facts: ModelFacts) -> None:
    register_model(name, build_resnet3d, facts, _DOC.format(summary=summary), **defaults)


# Parameter counts at 400 classes equal PySlowFast's / PyTorchVideo's (checked in tests). gflops:
# multiply-adds per view at 224x224 counted by torch.utils.flop_counter (tests recount them).
# published_top1: PyTorchVideo's Kinetics-400 model zoo for these architectures.
_variant(
    "slow_8x8_resnet50",
    dict(depth=50, stem_kt=1, stage_kts=((1,), (1,), (3,), (3,)), pool1_t=1),
    "Slow R50 8x8 (PySlowFast SLOW_8x8_R50): 8 frames at stride 8, temporal kernels in res4-5.",
    _facts(32_454_096, gflops=41.7, frames=8, stride=8, published_top1=74.58),
)
_variant(
    "i3d_resnet50",
    dict(depth=50, stem_kt=5, stage_kts=((3,), (3, 1), (3, 1), (1, 3)), pool1_t=2),
    "I3D R50 8x8 (PySlowFast I3D_8x8_R50): 8 frames at stride 8, 5x7x7 stem, alternating 3x1x1 "
    "convs, a temporal max-pool after res2.",
    _facts(28_043_472, gflops=28.4, frames=8, stride=8, published_top1=73.27),
)
_variant(
    "slow_8x8_resnet101",
    dict(depth=101, stem_kt=1, stage_kts=((1,), (1,), (3,), (3,)), pool1_t=1),
    "Slow R101 8x8 (PySlowFast SLOW_8x8_R101; gluoncv's i3d_slow_resnet101_*): the Slow R50 "
    "layout with (3, 4, 23, 3) blocks.",
    _facts(60_359_120, gflops=85.4, frames=8, stride=8),
)

# gluoncv's I3D (i3d_resnet*_v1): PySlowFast's I3D layout, but the stem conv and its max-pool also
# stride 2 in time, so 32 frames reach res2 as 8. Params equal gluoncv's I3D_ResNetV1 (counted
# from gluoncv's code; see tests/test_gluoncv_models.py). Non-local blocks follow the listed blocks
# of res3 / res4 (gluoncv's nonlocal_freq patterns).
_I3D_V1 = dict(stem_kt=5, stage_kts=((3,), (3, 1), (3, 1), (1, 3)), pool1_t=2, stem_stride_t=2)
_NL5_R50 = ((), (1, 3), (1, 3, 5), ())
_NL10_R50 = ((), (0, 1, 2, 3), (0, 1, 2, 3, 4, 5), ())
_NL5_R101 = ((), (1, 3), (6, 13, 20), ())
_NL10_R101 = ((), (0, 1, 2, 3), (2, 6, 10, 14, 18, 22), ())
for _name, _depth, _nl, _params, _gflops in (
    ("i3d_resnet50_v1", 50, None, 28_043_472, 33.1),
    ("i3d_resnet101_v1", 101, None, 51_754_192, 51.7),
    ("i3d_nl5_resnet50_v1", 50, _NL5_R50, 35_401_936, 53.3),
    ("i3d_nl10_resnet50_v1", 50, _NL10_R50, 42_760_400, 73.5),
    ("i3d_nl5_resnet101_v1", 101, _NL5_R101, 59_112_656, 71.9),
    ("i3d_nl10_resnet101_v1", 101, _NL10_R101, 66_471_120, 92.0),
):
    _nl_text = (f" with non-local blocks after res3 blocks {_nl[1]} and res4 blocks {_nl[2]}"
                if _nl else "")
    _variant(
        _name,
        dict(_I3D_V1, depth=_depth, **({"nonlocal_blocks": _nl} if _nl else {})),
        f"gluoncv's I3D R{_depth}{_nl_text}: 32 frames at stride 2, 5x7x7 stem striding 2 in "
        "time (conv and pool), alternating 3x1x1 convs, a temporal max-pool after res2.",
        _facts(_params, gflops=_gflops, frames=32, stride=2),
    )
