"""Temporal Pyramid Networks (Yang et al., CVPR 2020) on a Slow ResNet, as gluoncv builds them.

The backbone is the Slow R50 / R101 of :mod:`zoo.models.resnet3d` (temporal kernels in res4-5
only). The TPN neck takes the res4 and res5 feature maps and:

1. *spatial modulation*: res4 goes through a 1x3x3 conv (stride 2) + BN + ReLU to res5's size and
   width (2048); res5 passes unchanged;
2. *temporal modulation*: each level gets a 3x1x1 grouped conv (32 groups, 2048 -> 1024) and a
   temporal max-pool by that level's scale (``temporal_scales``);
3. *top-down flow*: level 0 += level 1 (nearest upsampling at scale 1, so a shorter level 1
   broadcasts over time), then a *level fusion* (per level: temporal max-pool by ``level_pools``,
   grouped 1x1x1 conv + BN + ReLU, then concat and 1x1x1 conv 2048 -> 2048 + BN + ReLU);
4. *bottom-up flow*: level 1 += downsample(level 0) (3x1x1 conv 1024 -> 1024, temporal max-pool by
   ``level_pools[0]``), on the levels already changed by step 3 (gluoncv updates one list in place),
   then a second level fusion;
5. *pyramid fusion*: concat of both fusions, 1x1x1 conv 4096 -> 2048 + BN + ReLU.

The head pools, drops out and classifies the 2048 channels. gluoncv also builds an auxiliary head
on res4 (1x3x3 conv 1024 -> 2048 + BN + ReLU, linear to the classes) that its forward never calls
(no training target reaches it). It is kept, so parameter counts and checkpoints match gluoncv's,
and frozen (``requires_grad=False``), so DDP does not wait for gradients that never come.
"""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .blocks3d import ConvBN
from .facts import IMAGENET_MEAN, IMAGENET_STD, video_facts
from .registry import register_model
from .resnet3d import ResNet3d
from .weights.load import inflate_from_file

__all__ = ["TPN", "TPNNeck"]

_GROUPS = 32


def _tpool(scale: int) -> nn.Module:
    """Temporal max-pool by ``scale`` (ceil mode, so a short clip still gives one step)."""
    return nn.MaxPool3d((scale, 1, 1), (scale, 1, 1), ceil_mode=True)


class LevelFusion(nn.Module):
    """Per level: temporal pool, grouped 1x1x1 conv + BN + ReLU; then concat and 1x1x1 conv + BN +
    ReLU to ``out_ch``.

    Args:
        level_ch: Channels of each (of two) levels.
        out_ch: Output channels.
        pools: Temporal pool of each level before its conv.
    """

    def __init__(self, level_ch: int, out_ch: int, pools: Sequence[int]) -> None:
        super().__init__()
        self.pools = nn.ModuleList(_tpool(p) for p in pools)
        self.convs = nn.ModuleList(
            nn.Sequential(nn.Conv3d(level_ch, level_ch, 1, groups=_GROUPS, bias=False),
                          nn.BatchNorm3d(level_ch), nn.ReLU(inplace=True))
            for _ in pools)
        self.fuse = ConvBN(level_ch * len(pools), out_ch, (1, 1, 1), relu=True)

    def forward(self, levels: List[torch.Tensor]) -> torch.Tensor:
        out = [conv(pool(x)) for x, pool, conv in zip(levels, self.pools, self.convs)]
        return self.fuse(torch.cat(out, 1))


class TPNNeck(nn.Module):
    """The TPN neck over (res4, res5) features; returns a 2048-channel map (see module docstring).

    Args:
        in_ch: Channels of res4 and res5 (1024, 2048 for the R50 / R101 nets).
        mid_ch: Channels of the pyramid levels (1024).
        temporal_scales: Temporal max-pool of each level after its modulation conv.
        level_pools: Temporal pool of each level inside the level fusions; ``level_pools[0]`` also
            pools the bottom-up downsampling.
        out_ch: Output channels (2048).
    """

    def __init__(self, in_ch: Tuple[int, int] = (1024, 2048), mid_ch: int = 1024,
                 temporal_scales: Sequence[int] = (8, 8), level_pools: Sequence[int] = (1, 1),
                 out_ch: int = 2048) -> None:
        super().__init__()
        top = in_ch[1]
        self.spatial = ConvBN(in_ch[0], top, (1, 3, 3), (1, 2, 2), (0, 1, 1), relu=True)
        self.temporal = nn.ModuleList(
            nn.Sequential(nn.Conv3d(top, mid_ch, (3, 1, 1), padding=(1, 0, 0), groups=_GROUPS,
                                    bias=False), _tpool(s))
            for s in temporal_scales)
        self.downsample = nn.Sequential(
            nn.Conv3d(mid_ch, mid_ch, (3, 1, 1), padding=(1, 0, 0), bias=False),
            _tpool(level_pools[0]))
        self.top_down_fusion = LevelFusion(mid_ch, out_ch, level_pools)
        self.bottom_up_fusion = LevelFusion(mid_ch, out_ch, level_pools)
        self.pyramid_fusion = ConvBN(out_ch * 2, out_ch, (1, 1, 1), relu=True)

    def forward(self, res4: torch.Tensor, res5: torch.Tensor) -> torch.Tensor:
        levels = [op(x) for op, x in zip(self.temporal, (self.spatial(res4), res5))]
        # gluoncv upsamples with scale 1 (a no-op) and lets the sum broadcast over time.
        levels[0] = levels[0] + F.interpolate(levels[1], scale_factor=1.0, mode="nearest")
        top_down = self.top_down_fusion(levels)
        levels[1] = levels[1] + self.downsample(levels[0])
        bottom_up = self.bottom_up_fusion(levels)
        return self.pyramid_fusion(torch.cat([top_down, bottom_up], 1))


class TPN(ResNet3d):
    """A Slow ResNet with a TPN neck between res5 and the head.

    Args:
        num_classes: Output classes.
        temporal_scales: See :class:`TPNNeck`.
        level_pools: See :class:`TPNNeck`.
        **kwargs: :class:`~zoo.models.resnet3d.ResNet3d` arguments (``depth``, ``width``, ...).
            The neck's widths follow ``width`` (1024 / 2048 at the published width 64).
    """

    # The auxiliary classifier has one output per class too: reset_classifier and the pretrained
    # loader's class-count check treat it like the head.
    aux_classifier_names = ("aux_head.1",)

    def __init__(self, num_classes: int = 400, temporal_scales: Sequence[int] = (8, 8),
                 level_pools: Sequence[int] = (1, 1), **kwargs: Any) -> None:
        kwargs.setdefault("stem_kt", 1)
        kwargs.setdefault("stage_kts", ((1,), (1,), (3,), (3,)))
        super().__init__(num_classes=num_classes, **kwargs)
        c5 = self.head.proj.in_features
        self.neck = TPNNeck((c5 // 2, c5), c5 // 2, temporal_scales, level_pools, c5)
        self.aux_head = nn.Sequential(
            ConvBN(c5 // 2, c5, (1, 3, 3), (1, 2, 2), (0, 1, 1), relu=True),
            nn.Linear(c5, num_classes))
        for m in list(self.neck.modules()) + list(self.aux_head.modules()):
            if isinstance(m, nn.BatchNorm3d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.01)
                nn.init.zeros_(m.bias)
        self.aux_head.requires_grad_(False)
        # Register the head last again, so the state dict lists it last (as zoo's TPN checkpoints
        # always have) and a last-layer rule applied to this net still finds head.proj.
        head = self.head
        del self.head
        self.head = head

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The neck's feature map ``(B, 2048, T', H', W')``."""
        x = self.pool1(self.res2(self.stem(x)))
        res4 = self.res4(self.res3(x))
        return self.neck(res4, self.res5(res4))


def _inflate_backbone(model: TPN, path: str, num_classes: int, args: dict) -> None:
    """Inflate the 2D ResNet in ``path`` into the Slow backbone and head of ``model``."""
    plain = ResNet3d(num_classes=num_classes, **{k: v for k, v in args.items()
                                                 if k not in ("temporal_scales", "level_pools")})
    inflate_from_file(plain, path)
    result = model.load_state_dict(plain.state_dict(), strict=False)
    assert not result.unexpected_keys and all(k.startswith(("neck.", "aux_head."))
                                              for k in result.missing_keys), result


def build_tpn(num_classes: int = 400, inflate_from: str = "", **kwargs: Any) -> TPN:
    """A :class:`TPN`; ``inflate_from`` names a 2D ResNet state dict (torchvision keys) to
    inflate into the backbone and head, as gluoncv does before training (the neck keeps its
    fresh init)."""
    model = TPN(num_classes=num_classes, **kwargs)
    if inflate_from:
        _inflate_backbone(model, inflate_from, num_classes, kwargs)
    return model


def _variant(name: str, depth: int, frames: int, stride: int, params: int, gflops: float
             ) -> None:
    # gluoncv: R50 pools both levels by the frame count; R101 pools res4 by half of it and pools
    # level 0 by 2 again inside the fusions and the downsampling.
    scales = (frames, frames) if depth == 50 else (frames // 2, frames)
    pools = (1, 1) if depth == 50 else (2, 1)
    doc = f"""TPN on a Slow R{depth}, {frames} frames at stride {stride} (gluoncv's
    ``{name}``): temporal scales {scales}, level pools {pools}.

    Args:
        num_classes: Output classes.
        inflate_from: Path of a 2D ResNet state dict (torchvision keys) to inflate into the
            backbone and head, as gluoncv does before training; the neck keeps its fresh init.
        **kwargs: Override any :class:`TPN` argument (``width``, ``temporal_scales``, ...).
    """
    facts = video_facts(frames, stride, 224, IMAGENET_MEAN, IMAGENET_STD, params=params,
                        gflops=gflops)
    register_model(name, build_tpn, facts, doc, depth=depth, temporal_scales=scales,
                   level_pools=pools)


# Params at 400 classes equal gluoncv's TPNet (counted from gluoncv's code, aux head included);
# gflops: multiply-adds per view at 224x224 (torch.utils.flop_counter; recounted in tests).
for _depth, _params, _gflops in ((50, 91_498_336, (50.3, 99.6, 198.2)),
                                 (101, 119_403_360, (94.1, 187.1, 373.0))):
    for (_frames, _stride), _g in zip(((8, 8), (16, 4), (32, 2)), _gflops):
        _variant(f"tpn_resnet{_depth}_f{_frames}s{_stride}", _depth, _frames, _stride, _params,
                 _g)
