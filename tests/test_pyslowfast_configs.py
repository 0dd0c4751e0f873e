"""Every PySlowFast Kinetics config (tests/data/pyslowfast, unmodified) converts to a zoo config
that passes the dry run and builds PySlowFast's architecture: parameter counts against
PyTorchVideo's hub builders (which reproduce PySlowFast's nets) or PySlowFast's model zoo, the
non-local blocks against a shape table of PySlowFast's ``Nonlocal``, and the relative step
schedule against PySlowFast's ``get_lr_at_epoch`` computed from the YAML's values."""

from __future__ import annotations

import bisect
import pathlib
import warnings

import pytest
import torch

from zoo.cli.dry_run import dry_run_file
from zoo.config import load_config
from zoo.config.convert_pyslowfast import write_converted
from zoo.config.yaml_files import read_yaml as read_zoo_yaml
from zoo.solver.lr_scheduler import WarmupScheduler


def read_yaml(path: str):
    """A PySlowFast file as its own loader reads it (a key set twice: the last wins)."""
    return read_zoo_yaml(path, unique_keys=False)


ROOT = pathlib.Path(__file__).parent / "data" / "pyslowfast" / "configs" / "Kinetics"
CONFIGS = sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.yaml"))
def _convert(rel: str, tmp_path) -> tuple:
    out = tmp_path / (rel.replace("/", "__"))
    name, unmatched, notes = write_converted(str(ROOT / rel), str(out))
    return str(out), name, unmatched, notes


def test_the_57_current_configs_are_vendored():
    assert len(CONFIGS) == 57
    assert {p.split("/")[0] for p in CONFIGS if "/" in p} == {"c2", "pytorchvideo"}


@pytest.mark.parametrize("rel", CONFIGS)
def test_config_converts(rel, tmp_path):
    out, name, unmatched, notes = _convert(rel, tmp_path)
    # Only keys with no effect on the run stay unlisted by a note.
    assert set(unmatched) <= {"DATA_LOADER.PIN_MEMORY"}, unmatched
    cfg = load_config(out)
    assert cfg.CONFIG.MODEL.NAME == name
    assert all(isinstance(n, str) and n for n in notes)


@pytest.mark.parametrize("rel", CONFIGS)
def test_converted_config_passes_the_dry_run(rel, tmp_path):
    out, name, _, _ = _convert(rel, tmp_path)
    result = dry_run_file(out)
    assert result.model == name and result.num_classes == 400 and result.params > 1_000_000


def _params(rel: str, tmp_path) -> int:
    return dry_run_file(_convert(rel, tmp_path)[0]).params


def _hub_params(builder: str) -> int:
    hub = pytest.importorskip("pytorchvideo.models.hub")
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        model = getattr(hub, builder)(pretrained=False)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("rel, builder", [
    ("SLOW_8x8_R50.yaml", "slow_r50"),
    ("pytorchvideo/SLOW_8x8_R50.yaml", "slow_r50"),
    ("I3D_8x8_R50.yaml", "i3d_r50"),
    ("pytorchvideo/I3D_8x8_R50.yaml", "i3d_r50"),
    ("C2D_8x8_R50.yaml", "c2d_r50"),
    ("pytorchvideo/C2D_8x8_R50.yaml", "c2d_r50"),
    ("pytorchvideo/CSN_32x2_R101.yaml", "csn_r101"),
    ("pytorchvideo/R2PLUS1D_16x4_R50.yaml", "r2plus1d_r50"),
    ("pytorchvideo/X3D_XS.yaml", "x3d_xs"),
    ("pytorchvideo/X3D_L.yaml", "x3d_l"),
])
def test_params_equal_pytorchvideos_builder(rel, builder, tmp_path):
    assert _params(rel, tmp_path) == _hub_params(builder)


# PySlowFast's published counts (MODEL_ZOO.md and the X3D / MViTv2 papers) to their rounding.
@pytest.mark.parametrize("rel, params, digits", [
    ("X3D_M.yaml", 3_794_322, 0),
    ("X3D_XS.yaml", 3_794_322, 0),
    ("X3D_L.yaml", 6_153_432, 0),
    ("SLOWFAST_8x8_R50.yaml", 34_566_488, 0),
    ("MVITv2_S_16x4.yaml", 34.5e6, -5),
    ("MVITv2_B_32x3.yaml", 51.2e6, -5),
])
def test_params_equal_pyslowfasts_model_zoo(rel, params, digits, tmp_path):
    assert round(_params(rel, tmp_path), digits) == params


def nonlocal_entries(channels: int) -> dict:
    """PySlowFast's Nonlocal(dim=C, dim_inner=C // 2) tensors, zoo's names: conv_theta / conv_phi /
    conv_g / conv_out / bn are theta / phi / g / W / bn."""
    c, e = channels, channels // 2
    table = {f"{n}.weight": (e, c, 1, 1, 1) for n in ("theta", "phi", "g")}
    table.update({f"{n}.bias": (e,) for n in ("theta", "phi", "g")})
    table.update({"W.weight": (c, e, 1, 1, 1), "W.bias": (c,), "bn.weight": (c,),
                  "bn.bias": (c,), "bn.running_mean": (c,), "bn.running_var": (c,),
                  "bn.num_batches_tracked": ()})
    return table


def _model(out: str) -> torch.nn.Module:
    import zoo

    cfg = load_config(out)
    kwargs = dict(zip(cfg.CONFIG.MODEL.KWARGS[::2], cfg.CONFIG.MODEL.KWARGS[1::2]))
    with torch.device("meta"):
        return zoo.create_model(cfg.CONFIG.MODEL.NAME, **kwargs)


# (config, prefix of the pathway's stages, {stage: blocks with a non-local}, stage widths)
_NLN = [
    ("SLOW_NLN_8x8_R50.yaml", "res", {3: (1, 3), 4: (1, 3, 5)}, 256),
    ("C2D_NLN_8x8_R50.yaml", "res", {3: (1, 3), 4: (1, 3, 5)}, 256),
    ("I3D_NLN_8x8_R101.yaml", "res", {3: (1, 3), 4: (1, 3, 5)}, 256),
    ("SLOWFAST_NLN_8x8_R50.yaml", "slow_res", {3: (1, 3), 4: (1, 3, 5)}, 256),
    ("c2/SLOWFAST_NLN_16x8_R101_50_50.yaml", "slow_res", {4: (6, 13, 20)}, 256),
]


@pytest.mark.parametrize("rel, prefix, where, width", _NLN)
def test_nonlocal_blocks_follow_pyslowfasts_shape_table(rel, prefix, where, width, tmp_path):
    out, *_ = _convert(rel, tmp_path)
    state = _model(out).state_dict()
    want = {}
    for stage, blocks in where.items():
        channels = width * 2 ** (stage - 2)
        for j in blocks:
            for key, shape in nonlocal_entries(channels).items():
                want[f"{prefix}{stage}.{j}.nonlocal_block.{key}"] = shape
    got = {k: tuple(v.shape) for k, v in state.items() if ".nonlocal_block." in k}
    assert got == want
    cfg = load_config(out)
    kwargs = dict(zip(cfg.CONFIG.MODEL.KWARGS[::2], cfg.CONFIG.MODEL.KWARGS[1::2]))
    data = read_yaml(str(ROOT / rel))
    assert kwargs["nonlocal_instantiation"] == data["NONLOCAL"]["INSTANTIATION"]
    assert kwargs["nonlocal_pool"] == [[1, 2, 2]] * 4  # PySlowFast's default NONLOCAL.POOL


def test_r101_50_101_cuts_temporal_kernels_per_pathway(tmp_path):
    out, *_ = _convert("c2/SLOWFAST_8x8_R101_50_101.yaml", tmp_path)
    model = _model(out)
    slow = [b.conv_a.kernel_size[0] for b in model.slow_res4]
    fast = [b.conv_a.kernel_size[0] for b in model.fast_res4]
    assert slow == [3] * 6 + [1] * 17 and fast == [3] * 23


def test_the_slowfast_shapes_the_converter_names_are_the_registered_ones():
    import re

    import zoo
    from zoo.config.pyslowfast_models import SLOWFAST_SHAPES

    registered = {n for n in zoo.list_models() if re.fullmatch(r"slowfast_\d+x\d+_resnet\d+", n)}
    assert registered == {"slowfast_{}x{}_resnet{}".format(*s) for s in SLOWFAST_SHAPES}


# (NUM_FRAMES, SAMPLING_RATE, ALPHA, DEPTH) of SLOWFAST_8x8_R50.yaml edited to a clip shape, or a
# depth, zoo registers no name for; and the net's registered shape with the same layout.
@pytest.mark.parametrize("frames, rate, alpha, depth, same_as", [
    (16, 8, 4, 50, "slowfast_8x8_resnet50"),  # 4x32
    (16, 2, 4, 50, "slowfast_8x8_resnet50"),  # 4x8
    (32, 2, 8, 101, "slowfast_8x8_resnet101"),  # 4x16 R101
    (32, 2, 4, 152, None),
])
def test_a_slowfast_clip_shape_without_a_name_builds_its_net(frames, rate, alpha, depth, same_as,
                                                             tmp_path):
    import yaml

    data = read_yaml(str(ROOT / "SLOWFAST_8x8_R50.yaml"))
    data["DATA"].update(NUM_FRAMES=frames, SAMPLING_RATE=rate)
    data["SLOWFAST"]["ALPHA"], data["RESNET"]["DEPTH"] = alpha, depth
    src = tmp_path / "edited.yaml"
    src.write_text(yaml.safe_dump(data))
    out = str(tmp_path / "zoo.yaml")
    name, _, notes = write_converted(str(src), out)
    assert any(f"zoo registers no slowfast_{frames // alpha}x{rate * alpha}_resnet{depth}" in n
               for n in notes), notes
    result = dry_run_file(out)  # the name is registered and the net builds
    assert result.model == name
    model = _model(out)
    assert model.alpha == alpha and len(model.slow_res4) == {50: 6, 101: 23, 152: 36}[depth]
    if same_as:  # SlowFast's weights do not depend on the clip: the registered net's, exactly
        import zoo

        with torch.device("meta"):  # with the file's fusion kernel and temporal-kernel cut
            want = zoo.create_model(same_as, alpha=alpha, fusion_kernel=7,
                                    num_block_temp_kernel=[3, 4, 6, 3])
        assert {k: v.shape for k, v in model.state_dict().items()} == \
            {k: v.shape for k, v in want.state_dict().items()}


SSV2 = ROOT.parent / "SSv2"


@pytest.mark.parametrize("rel", ["SLOWFAST_16x8_R50.yaml", "MVITv2_S_16x4.yaml",
                                 "pytorchvideo/SLOWFAST_8x8_R50.yaml"])
def test_something_something_configs_sample_one_frame_per_segment(rel, tmp_path):
    """PySlowFast's SSv2 loaders take NUM_FRAMES frames, one per equal segment of the whole video
    (slowfast/datasets/ssv2.py, get_seq_frames), not a SAMPLING_RATE window on a 30 fps
    timeline; their frame lists are not zoo's, so no list path is guessed."""
    src = SSV2 / rel
    frames = read_yaml(str(src))["DATA"]["NUM_FRAMES"]
    out = str(tmp_path / "zoo.yaml")
    name, unmatched, notes = write_converted(str(src), out)
    data = load_config(out).CONFIG.DATA
    assert (data.SAMPLING, data.CLIP_LEN, data.TARGET_FPS) == ("uniform", frames, 0.0)
    assert data.TRAIN_ANNO_PATH == "" and data.VAL_ANNO_PATH == ""
    assert sum("one from each equal segment" in n or "frame lists" in n for n in notes) == 2
    assert dry_run_file(out).model == name


def test_a_dataset_pyslowfast_registers_elsewhere_is_read_as_kinetics_with_a_note(tmp_path):
    data = read_yaml(str(ROOT / "SLOWFAST_8x8_R50.yaml"))
    data["TRAIN"]["DATASET"] = "epickitchens"
    src = tmp_path / "fork.yaml"
    src.write_text(__import__("yaml").safe_dump(data))
    _, _, notes = write_converted(str(src), str(tmp_path / "zoo.yaml"))
    assert any(n.startswith("TRAIN.DATASET epickitchens: not one of PySlowFast's own loaders")
               for n in notes), notes
    assert load_config(str(tmp_path / "zoo.yaml")).CONFIG.DATA.SAMPLING == "dense"


def pyslowfast_lr(solver: dict, epoch: float) -> float:
    """PySlowFast's get_lr_at_epoch for steps_with_relative_lrs with a linear warmup."""
    steps = list(solver["STEPS"]) + [solver["MAX_EPOCH"]]

    def lr_func(e: float) -> float:
        ind = next(i for i, s in enumerate(steps) if e < s) - 1
        return solver["LRS"][ind] * solver["BASE_LR"]

    lr = lr_func(epoch)
    if epoch < solver["WARMUP_EPOCHS"]:
        start, end = solver["WARMUP_START_LR"], lr_func(solver["WARMUP_EPOCHS"])
        lr = start + epoch * (end - start) / solver["WARMUP_EPOCHS"]
    return lr


def test_stepwise_schedule_equals_pyslowfasts(tmp_path):
    rel = "SLOWFAST_8x8_R50_stepwise.yaml"
    solver = read_yaml(str(ROOT / rel))["SOLVER"]
    out, *_ = _convert(rel, tmp_path)
    t = load_config(out).CONFIG.TRAIN
    assert list(t.LR_FACTORS) == [1, 0.1, 0.01, 0.001] and list(t.LR_MILESTONE) == [94, 154, 196]
    per_epoch = 4
    sched = WarmupScheduler(
        _Opt(), base_lr=t.LR, total_iters=t.EPOCH_NUM * per_epoch, policy=t.LR_POLICY,
        milestones=[m * per_epoch for m in t.LR_MILESTONE], factors=list(t.LR_FACTORS),
        warmup_iters=round(t.WARMUP_EPOCHS * per_epoch), warmup_start_lr=t.WARMUP_START_LR)
    for it in range(t.EPOCH_NUM * per_epoch):
        assert sched.lr_at(it) == pytest.approx(pyslowfast_lr(solver, it / per_epoch)), it
    assert bisect.bisect_right(list(t.LR_MILESTONE), 238) == 3  # the last epoch at LRS[3]


class _Opt:
    param_groups = [{}]


def test_recipe_keys_become_zoo_keys_or_notes(tmp_path):
    out, _, _, notes = _convert("MVITv2_S_16x4.yaml", tmp_path)
    cfg = load_config(out)
    t, d = cfg.CONFIG.TRAIN, cfg.CONFIG.DATA
    assert (t.MIXUP_ALPHA, t.CUTMIX_ALPHA, t.LABEL_SMOOTHING, t.CLIP_GRAD_NORM) == (
        0.8, 1.0, 0.1, 1.0)
    assert (t.OPTIMIZER, d.CLIPS_PER_VIDEO, d.CLIPS_WINDOW) == ("AdamW", 2, "shared")
    # 16 videos over 8 GPUs, 2 clips each (AUG.NUM_SAMPLE): 4 clips per process.
    assert (t.BATCH_SIZE, t.REFERENCE_BATCH) == (4, 32)
    # AUG.ENABLE with AA_TYPE rand-m7-n4-mstd0.5-inc1, RE_PROB 0.25, RE_MODE pixel, RE_COUNT 1.
    assert (d.RAND_AUGMENT, d.RANDOM_ERASE) == ("rand-m7-n4-mstd0.5-inc1", 0.25)
    text = "\n".join(notes)
    assert "AUG." not in text and "TRAIN_JITTER_SCALES_RELATIVE" in text
    assert "processes, 2 clips per video: zoo's per-process CONFIG.TRAIN.BATCH_SIZE is 4 clips, " \
        "and CONFIG.TRAIN.REFERENCE_BATCH 32" in text


def test_augmentation_values_zoo_cannot_express_are_notes():
    from zoo.config.convert_pyslowfast import convert_pyslowfast

    data = read_yaml(str(ROOT / "MVITv2_S_16x4.yaml"))
    data["AUG"].update(AA_TYPE="v0", RE_MODE="const", RE_COUNT=2)
    out, _, notes = convert_pyslowfast(data)
    assert "RAND_AUGMENT" not in out["CONFIG"]["DATA"]
    assert out["CONFIG"]["DATA"]["RANDOM_ERASE"] == 0.25
    text = "\n".join(notes)
    assert "AUG.AA_TYPE v0" in text and "AUG.RE_MODE const" in text and "AUG.RE_COUNT 2" in text
    data["AUG"]["ENABLE"] = False  # PySlowFast then neither augments nor erases
    out, _, notes = convert_pyslowfast(data)
    assert not {"RAND_AUGMENT", "RANDOM_ERASE"} & set(out["CONFIG"]["DATA"])


def test_multigrid_cycles_become_zoo_keys(tmp_path):
    out, _, _, notes = _convert("SLOWFAST_8x8_R50_stepwise_multigrid.yaml", tmp_path)
    t = load_config(out).CONFIG.TRAIN
    # MULTIGRID.LONG_CYCLE + SHORT_CYCLE with PySlowFast's default factors.
    assert t.MULTIGRID == "long+short" and t.MULTIGRID_EPOCH_FACTOR == 1.5
    assert [f for pair in t.MULTIGRID_LONG_CYCLE_FACTORS for f in pair] == pytest.approx(
        [0.25, 0.5 ** 0.5, 0.5, 0.5 ** 0.5, 0.5, 1.0, 1.0, 1.0])
    assert t.MULTIGRID_SHORT_CYCLE_FACTORS == pytest.approx([0.5, 0.5 ** 0.5])
    assert not any(n.startswith("MULTIGRID") for n in notes)


def test_layer_decay_and_act_checkpoint_become_train_keys(tmp_path):
    out, _, _, notes = _convert("MVITv2_L_40x3_test.yaml", tmp_path)
    cfg = load_config(out)
    assert cfg.CONFIG.TRAIN.ACT_CHECKPOINT is True
    assert cfg.CONFIG.TRAIN.LAYER_DECAY == 0.0  # PySlowFast's default 1.0: every layer at LR
    assert not any("ACT_CHECKPOINT" in n or "LAYER_DECAY" in n for n in notes)
    # MVIT.DROPPATH_RATE is the model's own default (its builder kwarg droppath_rate).
    assert "DROP_PATH" not in str(list(cfg.CONFIG.MODEL.KWARGS))


def test_base_lr_scales_with_shards(tmp_path):
    out, *_ = _convert("REV_MVIT_B_16x4_CONV.yaml", tmp_path)
    assert load_config(out).CONFIG.TRAIN.LR == pytest.approx(1e-4 * 16)


@pytest.mark.parametrize("instantiation", ["softmax", "dot_product"])
def test_nonlocal_forward_follows_pyslowfasts_formula(instantiation):
    from zoo.models.nonlocal_block import NonLocal3d

    torch.manual_seed(0)
    block = NonLocal3d(8, instantiation=instantiation, pool=(1, 2, 2), group=2).double().eval()
    torch.nn.init.normal_(block.bn.weight)
    x = torch.randn(2, 8, 4, 6, 6, dtype=torch.float64)
    # PySlowFast's ResStage folds the time groups into the batch around Nonlocal.forward.
    xs = x.permute(0, 2, 1, 3, 4).reshape(4, 2, 8, 6, 6).permute(0, 2, 1, 3, 4)
    theta = block.theta(xs).flatten(2)
    pooled = torch.nn.functional.max_pool3d(xs, (1, 2, 2), (1, 2, 2))
    phi, g = block.phi(pooled).flatten(2), block.g(pooled).flatten(2)
    tp = torch.einsum("nct,ncp->ntp", theta, phi)
    tp = torch.softmax(tp * 4 ** -0.5, 2) if instantiation == "softmax" else tp / tp.shape[2]
    y = torch.einsum("ntg,ncg->nct", tp, g).view(4, 4, 2, 6, 6)
    out = xs + block.bn(block.W(y))
    want = out.permute(0, 2, 1, 3, 4).reshape(2, 4, 8, 6, 6).permute(0, 2, 1, 3, 4)
    torch.testing.assert_close(block(x), want)
