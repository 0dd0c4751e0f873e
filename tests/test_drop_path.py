"""Stochastic depth (CONFIG.MODEL.DROP_PATH / the ``drop_path`` builder argument): linear rates
per family, no effect in eval, a dropped block passes only its shortcut."""

import copy

import pytest
import torch
import torch.nn as nn

from zoo.config import ConfigError, get_cfg
from zoo.models import build_model, create_model
from zoo.models.blocks3d import Bottleneck
from zoo.models.blockwise import drop_path_module, linear_rates
from zoo.models.resnet3d import ResNet3d
from zoo.models.swin3d import SwinBlock3d
from zoo.models.videomae import Block as VideoMAEBlock
from zoo.models.x3d import X3DBlock


def _rate(module) -> float:
    return 0.0 if isinstance(module, nn.Identity) else module.p


def block_rates(model):
    """The drop-path probability of each residual block, one list per pathway."""
    name = type(model).__name__
    if name in ("VideoMAE", "MViT"):
        return [[_rate(b.drop_path) for b in model.blocks]]
    if name == "SwinTransformer3d":
        return [[_rate(b.stochastic_depth) for b in model.checkpoint_blocks()]]
    return [[_rate(b.drop_path) for b in chain] for chain in model.residual_chains()]


@pytest.mark.parametrize("name, blocks", [
    ("videomae_vit_b", [12]), ("mvit_v2_s", [16]), ("swin3d_t", [12]),
    ("slowfast_8x8_resnet50", [16, 16]), ("slow_8x8_resnet50", [16]), ("i3d_resnet50", [16]),
    ("x3d_m", [26]), ("r2plus1d_resnet18", [8]), ("r2plus1d_16x4_resnet50", [16]),
    ("ircsn_resnet152", [50]), ("r2plus1d_v2_resnet152", [50]), ("tpn_resnet50_f8s8", [16]),
])
def test_rates_are_linear_over_depth(name, blocks):
    with torch.device("meta"):
        model = create_model(name, drop_path=0.2)
    rates = block_rates(model)
    assert [len(r) for r in rates] == blocks
    for chain in rates:
        assert chain == pytest.approx(linear_rates(0.2, len(chain)), abs=1e-12)
        assert chain[0] == 0.0 and chain[-1] == pytest.approx(0.2)


def test_cnns_default_to_none_and_transformers_keep_theirs():
    with torch.device("meta"):
        assert block_rates(create_model("x3d_xs")) == [[0.0] * 26]
        assert block_rates(create_model("swin3d_b"))[0][-1] == pytest.approx(0.3)
        # PySlowFast's MVITv2_S_16x4 config: MVIT.DROPPATH_RATE 0.2.
        assert block_rates(create_model("mvit_v2_s"))[0][-1] == pytest.approx(0.2)
        # MViT takes zoo's drop_path for PySlowFast's droppath_rate.
        assert block_rates(create_model("mvit_v2_s", drop_path=0.3))[0][-1] == pytest.approx(0.3)


def test_eval_output_is_unchanged_by_drop_path():
    torch.manual_seed(0)
    plain = ResNet3d(num_classes=3, depth=18, width=4, zero_init_final_bn=False).eval()
    dropped = ResNet3d(num_classes=3, depth=18, width=4, drop_path=0.5).eval()
    dropped.load_state_dict(plain.state_dict())
    assert set(dropped.state_dict()) == set(plain.state_dict())
    x = torch.randn(2, 3, 2, 16, 16)
    torch.testing.assert_close(dropped(x), plain(x), rtol=0, atol=0)
    assert not torch.equal(dropped.train()(x), plain.train()(x))  # it does act in training


def test_a_block_at_rate_one_passes_only_its_shortcut_in_training():
    torch.manual_seed(0)
    x = torch.randn(2, 8, 2, 8, 8)
    block = Bottleneck(8, 4, 8, kt=3, stride=1).train()
    block.drop_path = drop_path_module(1.0)
    torch.testing.assert_close(block(x), torch.relu(x), rtol=0, atol=0)
    x3d = X3DBlock(8, 12, 8, stride=1, se_ratio=0.0625).train()
    x3d.drop_path = drop_path_module(1.0)
    torch.testing.assert_close(x3d(x), torch.relu(x), rtol=0, atol=0)
    tokens = torch.randn(2, 5, 16)
    vit = VideoMAEBlock(16, 2, 4.0, True, 1.0, 0.0, 0.0, 1e-6).train()
    torch.testing.assert_close(vit(tokens), tokens, rtol=0, atol=0)
    grid = torch.randn(2, 2, 4, 4, 16)
    swin = SwinBlock3d(16, 2, (2, 4, 4), (0, 0, 0), 4.0, 0.0, 0.0, 1.0).train()
    torch.testing.assert_close(swin(grid), grid, rtol=0, atol=0)
    # Below 1 the branch is kept for some samples.
    block.drop_path = drop_path_module(0.5)
    torch.manual_seed(1)
    out = torch.stack([block(x) for _ in range(8)])
    assert not torch.equal(out, torch.relu(x).expand_as(out))


def _cfg(name, drop_path, kwargs=()):
    cfg = get_cfg()
    cfg.CONFIG.MODEL.NAME = name
    cfg.CONFIG.MODEL.DROP_PATH = drop_path
    cfg.CONFIG.MODEL.KWARGS = list(kwargs)
    cfg.CONFIG.DATA.NUM_CLASSES = 5
    return cfg


def test_build_model_passes_the_key_as_the_drop_path_kwarg():
    with torch.device("meta"):
        model = build_model(_cfg("x3d_xs", 0.1))
        assert block_rates(model)[0][-1] == pytest.approx(0.1)
        assert block_rates(build_model(_cfg("swin3d_t", 0.0)))[0][-1] == pytest.approx(0.1)
        with pytest.raises(ConfigError, match="DROP_PATH 0.1 and MODEL.KWARGS drop_path"):
            build_model(_cfg("x3d_xs", 0.1, ["drop_path", "0.2"]))
        with pytest.raises(ConfigError, match="DROP_PATH 0.1: model r3d_18 has no stochastic"):
            build_model(_cfg("r3d_18", 0.1))


def test_drop_path_set_twice_or_out_of_range_stops_under_every_kwarg_name():
    # MViT's configs set droppath_rate: MODEL.DROP_PATH replaced it without a word.
    with pytest.raises(ConfigError, match="DROP_PATH 0.3 and MODEL.KWARGS droppath_rate 0.1 "
                                          "both set the stochastic depth: keep one"):
        build_model(_cfg("mvit_v2_s", 0.3, ["droppath_rate", "0.1"]))
    # A typo (1.5 for 0.15) stopped the first forward as "an internal error".
    with pytest.raises(ConfigError, match="KWARGS drop_path 1.5 is not allowed: a stochastic "
                                          r"depth rate is a probability in \[0, 1\)"):
        build_model(_cfg("videomae_vit_b", 0.0, ["drop_path", "1.5"]))
    # The dry run builds from the same kwargs, so it stops on them too.
    from zoo.cli.dry_run import dry_run

    with pytest.raises(ConfigError, match="droppath_rate"):
        dry_run(_cfg("mvit_v2_s", 0.3, ["droppath_rate", "0.1"]))


def test_a_kwarg_the_builder_does_not_take_is_one_config_line_with_the_near_name():
    with torch.device("meta"):
        with pytest.raises(ConfigError) as e:
            build_model(_cfg("slowfast_tiny_resnet18", 0.0, ["dropuot", "0.1"]))
    msg = str(e.value)
    assert msg.startswith("CONFIG.MODEL.KWARGS: model slowfast_tiny_resnet18 takes no argument "
                          "'dropuot' (did you mean 'dropout'?); it takes alpha, beta_inv")
    assert "\n" not in msg


def test_a_type_error_inside_the_model_s_code_is_not_a_config_mistake(monkeypatch):
    # A stray keyword in a call inside the model's __init__ that names a KWARGS or DROP_PATH key
    # by chance is the model's TypeError, raised with its traceback: not a config mistake such as
    # "takes no argument 'width' (did you mean 'width'?)".
    import traceback

    from zoo.models import MODEL_REGISTRY, register_model

    def make_block(cin, cout):
        return nn.Conv3d(cin, cout, 1)

    class Buggy(nn.Module):
        def __init__(self, num_classes: int, width: int = 8, drop_path: float = 0.0) -> None:
            super().__init__()
            self.c = make_block(3, cout=width, width=width)  # the bug
            self.fc = nn.Linear(width, num_classes)

    class BuggyDropPath(Buggy):
        def __init__(self, num_classes: int, width: int = 8, drop_path: float = 0.0) -> None:
            nn.Module.__init__(self)
            self.dp = nn.Dropout(p=drop_path, drop_path=drop_path)  # the bug

    monkeypatch.setattr(MODEL_REGISTRY, "_obj_map", dict(MODEL_REGISTRY._obj_map))
    register_model("t_buggy", Buggy)
    register_model("t_buggy_dp", BuggyDropPath)
    for name, rate, kwargs in (("t_buggy", 0.0, ["width", "4"]), ("t_buggy_dp", 0.1, [])):
        with pytest.raises(TypeError) as e:
            build_model(_cfg(name, rate, kwargs))
        assert not isinstance(e.value, ConfigError)
        frames = [f.name for f in traceback.extract_tb(e.value.__traceback__)]
        assert frames[-1] in ("make_block", "__init__") and "__init__" in frames
    with pytest.raises(ConfigError, match="model t_buggy takes no argument 'widht' \\(did you "
                                          "mean 'width'\\?\\)"):
        build_model(_cfg("t_buggy", 0.0, ["widht", "4"]))  # the builder's own refusal


def test_a_deep_copy_keeps_the_rates():
    with torch.device("meta"):
        model = create_model("x3d_xs", drop_path=0.2)
    assert block_rates(copy.deepcopy(model)) == block_rates(model)
