"""Layer-wise LR decay (CONFIG.TRAIN.LAYER_DECAY): each family's layer ids, the optimizer groups'
LR multipliers against VideoMAE's rule, and the way it combines with BACKBONE_LR_MULT and the
LR schedule."""

import pytest
import torch

from zoo.config import get_cfg
from zoo.models import create_model
from zoo.models.mvit import MViT
from zoo.models.swin3d import SwinTransformer3d
from zoo.solver import build_lr_scheduler, build_optimizer
from zoo.solver.optimizer import LayerDecayError, param_groups


def _meta(name, **kwargs):
    with torch.device("meta"):
        return create_model(name, **kwargs)


def _lr_mult_by_name(model, groups):
    by_id = {id(p): (g["lr_mult"], g["weight_decay"]) for g in groups for p in g["params"]}
    return {n: by_id[id(p)] for n, p in model.named_parameters()}


def _videomae_layer(name: str, num_layers: int) -> int:
    """VideoMAE's fine-tuning rule (optim_factory.py, get_num_layer_for_vit): class token, mask
    token, positions and patch embedding are layer 0, ``blocks.i`` is i + 1, anything else
    (fc_norm, head) the last layer, num_layers - 1."""
    if name in ("cls_token", "mask_token", "pos_embed") or name.startswith("patch_embed"):
        return 0
    if name.startswith("blocks"):
        return int(name.split(".")[1]) + 1
    return num_layers - 1


def test_vit_b_scales_equal_videomae_layer_decay_value_assigner():
    # run_class_finetuning.py: num_layers = depth + 2, LayerDecayValueAssigner(
    # [layer_decay ** (num_layers - 1 - i) for i in range(num_layers)]); no weight decay on
    # 1-D parameters, names ending ".bias" and the model's no_weight_decay() names.
    model = _meta("videomae_vit_b")
    num_layers = 12 + 2
    values = [0.75 ** (num_layers - 1 - i) for i in range(num_layers)]
    groups = param_groups(model, 0.05, {id(p) for p in model.head.parameters()},
                          layer_decay=0.75)
    got = _lr_mult_by_name(model, groups)
    assert model.num_layers() == num_layers
    for name, p in model.named_parameters():
        lr_mult, wd = got[name]
        assert lr_mult == pytest.approx(values[_videomae_layer(name, num_layers)], rel=1e-12), name
        no_decay = p.ndim == 1 or name.endswith(".bias")
        assert wd == (0.0 if no_decay else 0.05), name
    assert got["patch_embed.proj.weight"][0] == pytest.approx(0.75 ** 13)
    assert got["blocks.11.mlp.fc2.weight"][0] == pytest.approx(0.75)
    assert got["head.weight"][0] == 1.0
    # Groups: decay / no decay in layer 0 and in each block (2 + 24); in the last layer the
    # head's weight and bias, and fc_norm's (no decay, not head): 3.
    assert len(groups) == 29


def test_mvit_layer_ids_follow_pyslowfast():
    model = _meta("mvit_v2_s")
    depth = len(model.blocks)
    assert model.num_layers() == depth + 2
    assert model.layer_id("cls_token") == 0
    assert model.layer_id("patch_embed.proj.weight") == 0
    assert model.layer_id("blocks.0.attn.rel_pos_h") == 1
    assert model.layer_id(f"blocks.{depth - 1}.mlp.fc1.weight") == depth
    assert model.layer_id("norm.weight") == depth + 1
    assert model.layer_id("head.projection.weight") == depth + 1
    with torch.device("meta"):
        v1 = MViT(depth=2, sep_pos_embed=True, norm_stem=True)
    assert [v1.layer_id(n) for n in ("pos_embed_spatial", "pos_embed_temporal",
                                     "pos_embed_class", "norm_stem.weight")] == [0, 0, 0, 3]


def test_swin_layer_ids_count_blocks_over_stages():
    with torch.device("meta"):
        model = SwinTransformer3d(depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24))
    assert model.num_layers() == 14
    assert model.layer_id("patch_embed.proj.weight") == 0
    assert model.layer_id("features.0.0.norm1.weight") == 1
    assert model.layer_id("features.0.1.attn.qkv.weight") == 2
    assert model.layer_id("features.1.reduction.weight") == 2  # merging after stage 0
    assert model.layer_id("features.2.0.mlp.0.weight") == 3
    assert model.layer_id("features.4.5.norm2.bias") == 10
    assert model.layer_id("features.5.norm.weight") == 10
    assert model.layer_id("features.6.1.norm1.weight") == 12
    assert model.layer_id("norm.weight") == 13
    assert model.layer_id("head.weight") == 13


@pytest.mark.parametrize("name, expected", [
    ("slowfast_4x16_resnet50", {"slow_stem.conv.weight": 0, "fast_stem.bn.weight": 0,
                                "fuse_stem.conv.weight": 0, "slow_res2.0.conv_a.weight": 1,
                                "fast_res3.1.bn_b.bias": 2, "fuse_res3.conv.weight": 2,
                                "fuse_res4.bn.weight": 3, "slow_res5.2.conv_c.weight": 4,
                                "head.proj.weight": 5}),
    ("i3d_nl5_resnet50_v1", {"stem.conv.weight": 0, "res3.1.nonlocal_block.g.weight": 2,
                             "res4.0.shortcut.conv.weight": 3, "head.proj.bias": 5}),
    ("x3d_xs", {"stem.conv_xy.weight": 0, "res5.0.se.fc1.weight": 4, "head.lin_5.weight": 5}),
    ("tpn_resnet50_f8s8", {"res5.0.conv_a.weight": 4, "neck.pyramid_fusion.conv.weight": 5,
                           "aux_head.1.weight": 5}),
    ("ircsn_resnet152", {"conv1.weight": 0, "bn1.weight": 0, "layer1.0.conv1.weight": 1,
                         "layer4.2.bn4.weight": 4, "out_fc.weight": 5}),
    ("r2plus1d_v2_resnet152", {"conv1_middle.weight": 0, "layer2.0.down_sample.0.weight": 2}),
    ("r2plus1d_resnet34", {"stem.0.weight": 0, "layer3.1.conv1.0.0.weight": 3, "fc.bias": 5}),
    ("r2plus1d_16x4_resnet50", {"stem.conv.weight": 0, "res2.0.conv_b.conv_t.weight": 1,
                                "head.proj.weight": 5}),
])
def test_cnn_layer_ids_by_stage(name, expected):
    model = _meta(name)
    names = dict(model.named_parameters())
    assert model.num_layers() == 6
    for key, layer in expected.items():
        assert key in names, key
        assert model.layer_id(key) == layer, key
    assert {model.layer_id(n) for n in names} == set(range(6))


def _cfg(**train):
    cfg = get_cfg()
    cfg.CONFIG.MODEL.NAME = "videomae_vit_s"
    for key, value in train.items():
        setattr(cfg.CONFIG.TRAIN, key, value)
    return cfg


def test_layer_decay_multiplies_backbone_lr_mult_and_the_schedule():
    torch.manual_seed(0)
    model = create_model("videomae_vit_s", num_classes=3, depth=2, embed_dim=32, num_heads=2,
                         frames=4, crop_size=32)
    cfg = _cfg(LR=0.1, LAYER_DECAY=0.5, BACKBONE_LR_MULT=0.1, OPTIMIZER="AdamW",
               USE_WARMUP=False, LR_POLICY="Step", LR_MILESTONE=[1000])
    opt = build_optimizer(cfg, model, model.head.parameters())
    build_lr_scheduler(cfg, opt, steps_per_epoch=10)
    lr_of = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    # 4 layers: patch_embed 0, blocks 1-2, fc_norm/head 3.
    assert lr_of[id(model.patch_embed.proj.weight)] == pytest.approx(0.1 * 0.1 * 0.5 ** 3)
    assert lr_of[id(model.blocks[1].attn.qkv.weight)] == pytest.approx(0.1 * 0.1 * 0.5)
    assert lr_of[id(model.fc_norm.weight)] == pytest.approx(0.1 * 0.1)
    assert lr_of[id(model.head.weight)] == pytest.approx(0.1)


def test_off_by_default_keeps_the_groups():
    torch.manual_seed(0)
    model = create_model("videomae_vit_s", num_classes=3, depth=2, embed_dim=32, num_heads=2,
                         frames=4, crop_size=32)
    groups = param_groups(model, 0.05, {id(p) for p in model.head.parameters()})
    assert [(g["weight_decay"], g["lr_mult"]) for g in groups] == [
        (0.05, 1.0), (0.05, 1.0), (0.0, 1.0), (0.0, 1.0)]


def test_a_model_without_layers_is_one_line_naming_it():
    model = _meta("resnet18")
    with pytest.raises(LayerDecayError, match=r"LAYER_DECAY 0.75: model resnet18 does not name"):
        param_groups(model, 0.0, layer_decay=0.75, model_name="resnet18")
