"""MViT v1 / v2: parameter counts against torchvision's and PySlowFast's published ones, logits
against torchvision's ``MViT`` and PyTorchVideo's ``create_multiscale_vision_transformers`` on the
same random weights (converted with --from torchvision / pytorchvideo), PySlowFast's key layouts,
and PySlowFast's MViT configs turned into zoo names and kwargs (``mvit_model``)."""

import os
from unittest import mock

import pytest
import torch
import yaml

import zoo
from zoo.config.pyslowfast_mvit import MVIT_KEYS, mvit_model
from zoo.config.tree import flatten_cfg
from zoo.config.validation import ConfigError
from zoo.models import model_facts
from zoo.models.flops import count_params
from zoo.models.mvit import MViTConfigError
from zoo.models.weights.convert import convert_state_dict

tvm = pytest.importorskip("torchvision.models.video.mvit")

# torchvision's metadata: mvit_v2_s 34,537,744 and mvit_v1_b 36,610,672 parameters.
TORCHVISION_PARAMS = {"mvit_v2_s": 34_537_744, "mvit_v1_b_16x4": 36_610_672}
# PySlowFast's projects/mvitv2 README, in millions (K400; MViTv2-L's SSv2 row, 174 classes, as
# its K400 row prints 217.6M for the same config's 213.4M network).
PUBLISHED_M = {"mvit_v2_s": (400, 34.5), "mvit_v2_b": (400, 51.2), "mvit_v2_l": (174, 213.1)}
FRAMES, CROP = 4, 64


def _randomize(model: torch.nn.Module) -> torch.nn.Module:
    """Every parameter random (norm weights around 1), so no layer is a silent identity."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=p.dtype)
            p.copy_(1 + 0.1 * r if name.endswith("weight") and p.dim() == 1 else 0.1 * r)
    return model.eval()


def _tv_config(builder: str) -> dict:
    """The arguments torchvision's ``mvit_v2_s`` / ``mvit_v1_b`` hand to its MViT class."""
    got = {}
    with mock.patch.object(tvm, "_mvit", lambda **kw: got.update(kw)):
        getattr(tvm, builder)()
    return got


def _tv_mvit(blocks, v2: bool, classes: int = 7) -> torch.nn.Module:
    return tvm.MViT(spatial_size=(CROP, CROP), temporal_size=FRAMES, block_setting=blocks,
                    residual_pool=v2, residual_with_cls_embed=False, rel_pos_embed=v2,
                    proj_after_attn=v2, num_classes=classes)


def _v2_blocks(depth: int, starts, width: int = 96, kv: int = 8):
    """torchvision block settings of an MViTv2 with PySlowFast's stage rule: width and heads
    doubled, queries pooled 2x2 at ``starts``; every block pools q, k, v with 3x3x3 kernels."""
    blocks, dim, heads, kv_stride = [], width, 1, kv
    for i in range(depth):
        out = dim
        if i in starts:
            out, heads, kv_stride = dim * 2, heads * 2, max(kv_stride // 2, 1)
        blocks.append(tvm.MSBlockConfig(
            num_heads=heads, input_channels=dim, output_channels=out, kernel_q=[3, 3, 3],
            kernel_kv=[3, 3, 3], stride_q=[1, 2, 2] if i in starts else [1, 1, 1],
            stride_kv=[1, kv_stride, kv_stride]))
        dim = out
    return blocks


def _same_logits(zoo_name: str, theirs: torch.nn.Module, scheme: str, dtype=torch.float32,
                 **kwargs) -> None:
    state, classes, _ = convert_state_dict(theirs.state_dict(), scheme, zoo_name,
                                           frames=FRAMES, crop_size=CROP, **kwargs)
    ours = zoo.create_model(zoo_name, num_classes=classes, frames=FRAMES, crop_size=CROP,
                            **kwargs).eval()
    ours.load_state_dict(state)
    x = torch.randn(2, 3, FRAMES, CROP, CROP, generator=torch.Generator().manual_seed(1))
    ours, theirs, x = ours.to(dtype), theirs.to(dtype), x.to(dtype)
    with torch.no_grad():
        a, b = ours(x), theirs(x)
    assert a.shape == (2, classes)
    assert (a - b).abs().max() <= 1e-4 * b.abs().max()


@pytest.mark.parametrize("name,builder", [("mvit_v2_s", "mvit_v2_s"),
                                          ("mvit_v1_b_16x4", "mvit_v1_b")])
def test_parameter_counts_are_torchvision_s(name, builder):
    with torch.device("meta"):
        ours = zoo.create_model(name, num_classes=400)
        theirs = getattr(tvm, builder)()
    assert count_params(ours) == count_params(theirs) == TORCHVISION_PARAMS[name]


@pytest.mark.parametrize("name", sorted(PUBLISHED_M))
def test_parameter_counts_round_to_pyslowfast_s(name):
    classes, millions = PUBLISHED_M[name]
    with torch.device("meta"):
        model = zoo.create_model(name, num_classes=classes)
    assert round(count_params(model) / 1e6, 1) == millions


@pytest.mark.parametrize("name,builder", [("mvit_v2_s", "mvit_v2_s"),
                                          ("mvit_v1_b_16x4", "mvit_v1_b")])
def test_torchvision_structures_give_the_same_logits(name, builder):
    """torchvision's own S / v1-B block settings at 4 x 64 x 64."""
    cfg = _tv_config(builder)
    theirs = _randomize(_tv_mvit(cfg["block_setting"], name.startswith("mvit_v2")))
    _same_logits(name, theirs, "torchvision")


def test_tiny_v2_and_v1_give_the_same_logits():
    """Three-block nets, width 16 doubling at block 1, both versions' block rules."""
    tiny = dict(depth=3, embed_dim=16, dim_mul=[[1, 2.0]], head_mul=[[1, 2.0]])
    theirs = _randomize(_tv_mvit(_v2_blocks(3, (1,), width=16, kv=4), v2=True))
    _same_logits("mvit_v2_s", theirs, "torchvision", pool_kv_stride_adaptive=[1, 4, 4],
                 pool_q_stride=[[0, 1, 1, 1], [1, 1, 2, 2], [2, 1, 1, 1]], **tiny)
    v1 = [tvm.MSBlockConfig(1, 16, 32, [], [3, 3, 3], [], [1, 4, 4]),
          tvm.MSBlockConfig(2, 32, 32, [3, 3, 3], [3, 3, 3], [1, 2, 2], [1, 2, 2]),
          tvm.MSBlockConfig(2, 32, 32, [], [3, 3, 3], [], [1, 2, 2])]
    theirs = _randomize(_tv_mvit(v1, v2=False))
    _same_logits("mvit_v1_b_16x4", theirs, "torchvision", pool_kv_stride_adaptive=[1, 4, 4],
                 pool_q_stride=[[1, 1, 2, 2]], **tiny)


def test_mvit_v2_b_structure_gives_the_same_logits():
    """MViTv2-B's 24 blocks (stages at 2, 5, 21) as torchvision block settings, in float64."""
    theirs = _randomize(_tv_mvit(_v2_blocks(24, (2, 5, 21)), v2=True))
    _same_logits("mvit_v2_b", theirs, "torchvision", dtype=torch.float64)


def test_pytorchvideo_mvit_b_gives_the_same_logits():
    """PyTorchVideo's MViT-B 16x4 (hub ``mvit_base_16x4``'s arguments): its separate q / k / v
    fuse into zoo's qkv. Its pooled-token LayerNorms use eps 1e-5 (zoo and PySlowFast 1e-6):
    set to 1e-6 here so the comparison is exact."""
    vt = pytest.importorskip("pytorchvideo.models.vision_transformers")
    theirs = vt.create_multiscale_vision_transformers(
        spatial_size=CROP, temporal_size=FRAMES, embed_dim_mul=[[1, 2.0], [3, 2.0], [14, 2.0]],
        atten_head_mul=[[1, 2.0], [3, 2.0], [14, 2.0]],
        pool_q_stride_size=[[1, 1, 2, 2], [3, 1, 2, 2], [14, 1, 2, 2]],
        pool_kv_stride_adaptive=[1, 8, 8], pool_kvq_kernel=[3, 3, 3], head_num_classes=7)
    for module in theirs.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = 1e-6
    _same_logits("mvit_v1_b_16x4", _randomize(theirs), "pytorchvideo")


def test_pyslowfast_files_load_with_separate_or_fused_qkv():
    """A PySlowFast state dict (zoo's names) converts unchanged; with MVIT.SEPARATE_QKV's
    separate q / k / v it is fused, and a fused file splits into a separate_qkv model."""
    kwargs = dict(frames=FRAMES, crop_size=CROP, depth=3, embed_dim=16, dim_mul=[[1, 2.0]],
                  head_mul=[[1, 2.0]], pool_q_stride=[[1, 1, 2, 2]])
    fused = zoo.create_model("mvit_v2_s", num_classes=5, **kwargs).state_dict()
    state, classes, _ = convert_state_dict(fused, "pyslowfast", "mvit_v2_s", **kwargs)
    assert classes == 5 and all(torch.equal(state[k], v) for k, v in fused.items())
    split = zoo.create_model("mvit_v2_s", num_classes=5, separate_qkv=True, **kwargs)
    state, _, _ = convert_state_dict(fused, "pyslowfast", "mvit_v2_s", separate_qkv=True,
                                     **kwargs)
    split.load_state_dict(state)
    back, _, _ = convert_state_dict(split.state_dict(), "pyslowfast", "mvit_v2_s", **kwargs)
    assert all(torch.equal(back[k], v) for k, v in fused.items())
    assert torch.equal(state["blocks.1.attn.k.weight"], fused["blocks.1.attn.qkv.weight"][32:64])


def test_a_torchvision_file_loads_as_pretrained(tmp_path):
    theirs = _randomize(_tv_mvit(_tv_config("mvit_v2_s")["block_setting"], v2=True, classes=400))
    path = os.path.join(tmp_path, "mvit_v2_s.pth")
    torch.save(theirs.state_dict(), path)
    ours = zoo.create_model("mvit_v2_s", frames=FRAMES, crop_size=CROP, pretrained=path).eval()
    x = torch.randn(1, 3, FRAMES, CROP, CROP)
    with torch.no_grad():
        assert (ours(x) - theirs(x)).abs().max() <= 1e-4 * theirs(x).abs().max()


def test_classifier_weight_decay_and_input_checks():
    model = zoo.create_model("mvit_v2_s", num_classes=5, frames=FRAMES, crop_size=CROP)
    assert model.get_classifier() is model.head.projection
    model.reset_classifier(3)
    with pytest.raises(MViTConfigError, match=rf"built for clips of {FRAMES} frames x {CROP} px "
                       rf"\(MODEL.KWARGS frames / crop_size\) but got {FRAMES} frames x 32 px "
                       r"\(DATA.CLIP_LEN / CROP_SIZE\)"):
        model(torch.randn(1, 3, FRAMES, 32, 32))
    with torch.no_grad():
        assert model.eval()(torch.randn(1, 3, FRAMES, CROP, CROP)).shape == (1, 3)
    from zoo.solver.optimizer import param_groups
    no_decay = {id(p) for g in param_groups(model, 0.05) if g["weight_decay"] == 0
                for p in g["params"]}
    # mvit_v2_s is built with MVIT.ZERO_DECAY_POS_CLS False (its config): only norms / biases.
    assert id(model.cls_token) not in no_decay
    model = zoo.create_model("mvit_v2_s", num_classes=5, frames=FRAMES, crop_size=CROP,
                             zero_decay_pos_cls=True)
    no_decay = {id(p) for g in param_groups(model, 0.05) if g["weight_decay"] == 0
                for p in g["params"]}
    assert {id(model.cls_token), id(model.blocks[0].attn.rel_pos_t)} <= no_decay
    for bad in (dict(patch_2d=True), dict(mode="conv_unshared"), dict(norm="batchnorm")):
        with pytest.raises(MViTConfigError, match=list(bad)[0]):
            zoo.create_model("mvit_v2_s", **bad)


# PySlowFast's MViT configs (vendored, unmodified) and the registered name each one builds.
PYSLOWFAST_CONFIGS = {"MVITv2_S_16x4": "mvit_v2_s", "MVITv2_B_32x3": "mvit_v2_b",
                      "MVITv2_L_40x3_test": "mvit_v2_l", "MVIT_B_16x4_CONV": "mvit_v1_b_16x4",
                      "MVIT_B_32x3_CONV": "mvit_v1_b_32x3"}
_VENDORED = os.path.join(os.path.dirname(__file__), "data", "pyslowfast", "configs", "Kinetics")


def _config(stem: str) -> dict:
    """The flat keys of the vendored PySlowFast file ``stem``.yaml."""
    with open(os.path.join(_VENDORED, stem + ".yaml")) as f:
        return flatten_cfg(yaml.safe_load(f))


@pytest.mark.parametrize("stem", sorted(PYSLOWFAST_CONFIGS))
def test_pyslowfast_configs_map_to_their_registered_model(stem):
    name, kwargs = mvit_model(_config(stem), stem)
    assert (name, kwargs) == (PYSLOWFAST_CONFIGS[stem], [])
    classes = PUBLISHED_M.get(name, (400,))[0]
    with torch.device("meta"):
        model = zoo.create_model(name, num_classes=classes,
                                 **dict(zip(kwargs[::2], kwargs[1::2])))
    if name in TORCHVISION_PARAMS:
        assert count_params(model) == TORCHVISION_PARAMS[name]
    elif name in PUBLISHED_M:
        assert round(count_params(model) / 1e6, 1) == PUBLISHED_M[name][1]
    else:  # MViTv1-B 32x3 (24 blocks): no count published; the registered facts' count
        assert count_params(model) == model_facts(name)["params"] == 53_115_280


def test_pyslowfast_config_changes_become_kwargs():
    flat = _config("MVITv2_S_16x4")
    flat.update({"DATA.NUM_FRAMES": 8, "MVIT.DROPPATH_RATE": 0.1, "MVIT.QKV_BIAS": False,
                 "MODEL.DROPOUT_RATE": 0.3})
    name, kwargs = mvit_model(flat, "x.yaml")
    assert name == "mvit_v2_s"
    assert dict(zip(kwargs[::2], kwargs[1::2])) == {
        "frames": 8, "droppath_rate": 0.1, "qkv_bias": False, "dropout": 0.3}
    with torch.device("meta"):
        model = zoo.create_model(name, **dict(zip(kwargs[::2], kwargs[1::2])))
    assert model.blocks[0].attn.qkv.bias is None and model.patch_dims == [4, 56, 56]
    # The PyTorchVideo-backed config (MODEL_NAME PTVMViT) is the same network as MViT-B 16x4.
    flat = _config("MVIT_B_16x4_CONV")
    assert mvit_model(dict(flat, **{"MODEL.MODEL_NAME": "PTVMViT"}), "p.yaml") == (
        "mvit_v1_b_16x4", [])
    assert "MVIT.REV.ENABLE" in MVIT_KEYS and "MVIT.SEPARATE_QKV" in MVIT_KEYS


@pytest.mark.parametrize("key,value", [("MVIT.PATCH_2D", True),
                                       ("MVIT.USE_FIXED_SINCOS_POS", True),
                                       ("MVIT.NOT_A_KEY", 1), ("DATA.TEST_CROP_SIZE", 256)])
def test_pyslowfast_config_values_zoo_cannot_honour_are_refused(key, value):
    flat = dict(_config("MVIT_B_16x4_CONV"), **{key: value})
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as err:
        mvit_model(flat, "REV_MVIT_B_16x4_CONV.yaml")
    assert len(str(err.value).splitlines()) == 1


def test_full_size_mvit_v2_s_gives_torchvision_s_logits():
    """torchvision's own mvit_v2_s at 16 x 224 x 224, random weights, converted."""
    theirs = _randomize(tvm.mvit_v2_s())
    state, _, _ = convert_state_dict(theirs.state_dict(), "torchvision", "mvit_v2_s")
    ours = zoo.create_model("mvit_v2_s").eval()
    ours.load_state_dict(state)
    x = torch.randn(1, 3, 16, 224, 224, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        a, b = ours(x), theirs(x)
    assert (a - b).abs().max() <= 1e-4 * b.abs().max()


def test_the_dry_run_stops_on_a_clip_the_model_was_not_built_for():
    """An MViT at its 16 x 224 with DATA.CLIP_LEN 8: the dry run passed and the first training
    step stopped as "an internal error"; the dry run now shows the clip to the model on the meta
    device and stops with the model's own line."""
    from zoo.cli.dry_run import dry_run
    from zoo.config import load_config

    cfg = load_config(None, ["MODEL.NAME", "mvit_v2_s", "DATA.NUM_CLASSES", "3",
                             "DATA.CLIP_LEN", "8", "DATA.CROP_SIZE", "224"])
    with pytest.raises(MViTConfigError, match=r"set DATA.CLIP_LEN 16 / CROP_SIZE 224, or add "
                                              r"'frames', 8, 'crop_size', 224 to MODEL.KWARGS "
                                              r"beside its other entries \(.*; a tested or "
                                              r"predicted checkpoint is built from its own "
                                              r"KWARGS, so there only DATA applies\)"):
        dry_run(cfg)
    fits = load_config(None, ["MODEL.NAME", "mvit_v2_s", "DATA.NUM_CLASSES", "3",
                              "DATA.CLIP_LEN", "16", "DATA.CROP_SIZE", "224"])
    assert dry_run(fits).params > 0


# A three-block MViTv2 (width 16 doubling at block 1), as torchvision block settings and as the
# zoo kwargs of the same network.
TINY_V2 = dict(depth=3, embed_dim=16, dim_mul=[[1, 2.0]], head_mul=[[1, 2.0]],
               pool_kv_stride_adaptive=[1, 4, 4],
               pool_q_stride=[[0, 1, 1, 1], [1, 1, 2, 2], [2, 1, 1, 1]])
# MViTv1 without pooled stages, two blocks.
TINY_V1 = dict(depth=2, embed_dim=16, dim_mul=[], head_mul=[], pool_q_stride=[],
               pool_kv_stride_adaptive=[1, 2, 2], num_classes=3)


def _tv_tiny_v2_at(frames: int, crop: int) -> torch.nn.Module:
    return tvm.MViT(spatial_size=(crop, crop), temporal_size=frames,
                    block_setting=_v2_blocks(3, (1,), width=16, kv=4), residual_pool=True,
                    residual_with_cls_embed=False, rel_pos_embed=True, proj_after_attn=True,
                    num_classes=7)


def test_weights_of_another_clip_size_give_torchvisions_run_time_logits(tmp_path, caplog):
    """MViTv2 weights trained at 4 x 64 x 64, fine-tuned at 8 x 96 x 96: the relative-position
    tables no longer fit and loading stopped. They are resized when loaded; torchvision resizes
    the same tables at run time (its ``_add_rel_pos``): its model built for 8 x 96 carrying the
    4 x 64 tables gives the logits."""
    small = _randomize(_tv_tiny_v2_at(FRAMES, CROP))
    theirs = _tv_tiny_v2_at(8, 96).eval()
    own = theirs.state_dict()
    theirs.load_state_dict({k: v for k, v in small.state_dict().items()
                            if own[k].shape == v.shape}, strict=False)
    for name, module in theirs.named_modules():
        for table in ("rel_pos_h", "rel_pos_w", "rel_pos_t"):
            if isinstance(getattr(module, table, None), torch.nn.Parameter):
                setattr(module, table, torch.nn.Parameter(small.get_parameter(f"{name}.{table}")))
    x = torch.randn(1, 3, 8, 96, 96, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = theirs(x)
    state, _, report = convert_state_dict(small.state_dict(), "torchvision", "mvit_v2_s",
                                          frames=8, crop_size=96, **TINY_V2)
    assert any(line.startswith("resized 9 position table(s)") for line in report.lines())
    path = os.path.join(tmp_path, "small.pth")
    torch.save(small.state_dict(), path)
    for loaded in (state, path):
        if isinstance(loaded, str):
            with caplog.at_level("WARNING"):
                ours = zoo.create_model("mvit_v2_s", num_classes=7, frames=8, crop_size=96,
                                        pretrained=loaded, **TINY_V2).eval()
            assert "resized 9 position table(s) trained at another clip size" in caplog.text
        else:
            ours = zoo.create_model("mvit_v2_s", num_classes=7, frames=8, crop_size=96,
                                    **TINY_V2).eval()
            ours.load_state_dict(loaded)
        with torch.no_grad():
            assert (ours(x) - want).abs().max() <= 1e-5 * want.abs().max()


def _pyslowfast_positions(model: torch.nn.Module, grid) -> torch.Tensor:
    """PySlowFast's ``_get_pos_embed``: the patch positions of ``model`` (separate tables summed
    first), resized trilinearly to ``grid``, after the class token's row."""
    table = model._positions()
    c = table.shape[-1]
    patches = table[:, 1:].reshape(1, *model.patch_dims, c).permute(0, 4, 1, 2, 3)
    patches = torch.nn.functional.interpolate(patches, size=tuple(grid), mode="trilinear")
    return torch.cat((table[:, :1], patches.reshape(1, c, -1).permute(0, 2, 1)), dim=1)


@pytest.mark.parametrize("sep", [True, False])
def test_absolute_positions_of_another_clip_size_are_resized_as_pyslowfast_does(tmp_path, sep):
    """MViTv1's absolute positions (separate T and H x W tables, or one joint table) from a
    4 x 64 x 64 zoo run into a model for 8 x 64 x 64: the model's positions are PySlowFast's
    run-time trilinear resize of the trained ones."""
    kwargs = dict(TINY_V1, sep_pos_embed=sep)
    small = _randomize(zoo.create_model("mvit_v1_b_16x4", frames=FRAMES, crop_size=CROP,
                                        **kwargs))
    path = os.path.join(tmp_path, "small.pth")
    torch.save(small.state_dict(), path)
    big = zoo.create_model("mvit_v1_b_16x4", frames=8, crop_size=CROP, pretrained=path, **kwargs)
    with torch.no_grad():
        want = _pyslowfast_positions(small, big.patch_dims)
        assert torch.allclose(big._positions(), want, atol=1e-6)
        assert torch.equal(big.cls_token, small.cls_token)


def test_a_joint_position_table_whose_grid_is_ambiguous_stops_with_one_line(tmp_path):
    """A joint table of 4 x 8 x 8 positions into a model of grid 4 x 4 x 4: 16 x 4 x 4 fits its
    length as well, so the loader cannot tell which was trained and says so."""
    kwargs = dict(TINY_V1, sep_pos_embed=False)
    small = zoo.create_model("mvit_v1_b_16x4", frames=8, crop_size=32, **kwargs)
    path = os.path.join(tmp_path, "small.pth")
    torch.save(small.state_dict(), path)
    with pytest.raises(MViTConfigError) as err:
        zoo.create_model("mvit_v1_b_16x4", frames=8, crop_size=16, pretrained=path, **kwargs)
    assert "pos_embed: its 256 positions fit both" in str(err.value)
    assert len(str(err.value).splitlines()) == 1
