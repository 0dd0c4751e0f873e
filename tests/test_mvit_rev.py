"""Reversible MViT: PySlowFast's parameter count and key layout, the memory-saving backward against
plain autograd through the same blocks (float64, with dropout and stochastic depth), the
inversion of a block, the REV config keys, and one-line errors for REV values it cannot build."""

import os

import pytest
import torch
import yaml

import zoo
from zoo.config.pyslowfast_mvit import builder_kwargs, mvit_model, mvit_notes
from zoo.config.tree import flatten_cfg
from zoo.models import model_facts
from zoo.models.flops import count_params, measure
from zoo.models.mvit import MViTConfigError
from zoo.models.mvit_rev_layers import ReversibleBlock
from zoo.models.weights.convert import convert_state_dict

NAME = "mvit_rev_b_16x4"
TINY = dict(frames=8, crop_size=32, embed_dim=16, num_classes=5)
CONFIG = os.path.join(os.path.dirname(__file__), "data", "pyslowfast", "configs", "Kinetics",
                      "REV_MVIT_B_16x4_CONV.yaml")


def _flat() -> dict:
    with open(CONFIG) as f:
        return flatten_cfg(yaml.safe_load(f))


def test_params_and_flops_are_pyslowfasts():
    with torch.device("meta"):
        model = zoo.create_model(NAME)
    params = count_params(model)
    # projects/rev/README.md: 34.9M (printed cut to one decimal), 64 GFLOPs per view.
    assert params == model_facts(NAME)["params"] == 34_963_120
    assert int(params / 1e5) / 10 == 34.9
    assert round(measure(NAME)["gflops"]) == 64
    facts = model_facts(NAME)
    assert (facts["input_frames"], facts["sampling_stride"], facts["crop_size"]) == (16, 4, 224)
    assert facts["published_top1"] == 78.4


def test_keys_follow_pyslowfasts_layout():
    with torch.device("meta"):
        state = zoo.create_model(NAME).state_dict()
    top = {k for k in state if not k.startswith("rev_backbone.")}
    assert top == {"patch_embed.proj.weight", "patch_embed.proj.bias", "pos_embed_spatial",
                   "pos_embed_temporal", "norm.weight", "norm.bias", "head.projection.weight",
                   "head.projection.bias"}
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    # Block 1 is a stage transition 96 -> 192 (2 heads): the shortcut projects, then pools with
    # the attention's query conv; QKV_BIAS False.
    assert shapes["rev_backbone.layers.1.res_proj.weight"] == (192, 96)
    assert shapes["rev_backbone.layers.1.F.attn.qkv.weight"] == (576, 96)
    assert shapes["rev_backbone.layers.1.F.attn.pool_q.weight"] == (96, 1, 3, 3, 3)
    assert shapes["rev_backbone.layers.1.G.mlp.fc1.weight"] == (768, 192)
    assert "rev_backbone.layers.1.F.attn.qkv.bias" not in shapes
    assert not any(k.startswith("rev_backbone.layers.2.res_proj") for k in shapes)
    assert shapes["rev_backbone.layers.15.G.mlp.fc2.weight"] == (768, 3072)
    # RESPATH_FUSE concat: the head sees both streams.
    assert shapes["norm.weight"] == (1536,) and shapes["head.projection.weight"] == (400, 1536)


def _grads(model, x, rev: bool, seed: int = 3):
    model.rev_backbone.rev_backprop = rev
    model.zero_grad()
    torch.manual_seed(seed)
    out = model(x)
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_reversible_backward_equals_plain_autograd():
    torch.manual_seed(0)
    model = zoo.create_model(NAME, dropout_rate=0.2, droppath_rate=0.5, **TINY).double().train()
    x = torch.randn(4, 3, 8, 32, 32, dtype=torch.float64)
    out_rev, g_rev = _grads(model, x, rev=True)
    out_plain, g_plain = _grads(model, x, rev=False)
    torch.testing.assert_close(out_rev, out_plain, rtol=0, atol=0)
    # Inverting Y2 - G(Y1) costs float64 rounding of the streams' size, nothing more.
    scale = max(g.abs().max().item() for g in g_plain.values())
    for name, g in g_plain.items():
        torch.testing.assert_close(g_rev[name], g, rtol=1e-7, atol=1e-9 * scale, msg=name)
    assert all(g.abs().sum() > 0 for n, g in g_rev.items() if "layers.0." in n)
    # Another seed draws other masks: the gradients differ, so the replay above was not vacuous.
    _, g_other = _grads(model, x, rev=True, seed=4)
    assert any(not torch.equal(g_other[n], g_plain[n]) for n in g_plain)


def _block(drop_path: float = 0.5, dropout: float = 0.3) -> ReversibleBlock:
    attn = dict(num_heads=2, qkv_bias=True, dropout=dropout, kernel_q=[3, 3, 3],
                kernel_kv=[3, 3, 3], stride_q=[1, 1, 1], stride_kv=[1, 2, 2], has_cls=False,
                mode="conv", pool_first=False, rel_pos_spatial=False, rel_pos_temporal=False,
                rel_pos_zero_init=False, residual_pooling=False, separate_qkv=False)
    return ReversibleBlock(8, (2, 4, 4), 4.0, drop_path, torch.nn.LayerNorm, **attn).double()


def test_a_block_inverts_and_replays_its_randomness():
    torch.manual_seed(0)
    block = _block().train()
    x1, x2 = torch.randn(2, 8, 32, 8, dtype=torch.float64).unbind(0)
    x1, x2 = x1.expand(8, -1, -1).clone(), x2.expand(8, -1, -1).clone()
    with torch.no_grad():
        y1, y2, replay = block.step(x1, x2, record=True)
    mask = replay[2].flatten()
    assert (mask == 0).any() and (mask > 0).any()  # some samples dropped, some kept
    dy1, dy2 = torch.randn_like(y1), torch.randn_like(y2)
    params = [p for p in block.parameters()]
    r1, r2, dx1, dx2, pgrads = block.invert(y1, y2, dy1, dy2, replay, params)
    torch.testing.assert_close(r1, x1, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(r2, x2, rtol=1e-12, atol=1e-12)
    # The same gradients through plain autograd, with the same randomness.
    a1, a2 = x1.clone().requires_grad_(), x2.clone().requires_grad_()
    with torch.random.fork_rng():
        replay[0].restore()
        b1, b2, again = block.step(a1, a2, record=True)
    assert torch.equal(again[2], replay[2])
    torch.testing.assert_close(b1.detach(), y1, rtol=0, atol=0)
    grads = torch.autograd.grad((b1, b2), [a1, a2] + params, (dy1, dy2))
    torch.testing.assert_close(dx1, grads[0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(dx2, grads[1], rtol=1e-10, atol=1e-12)
    for got, want in zip(pgrads, grads[2:]):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def _saved_numel(model, x) -> int:
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return total


def test_training_stores_no_activations_inside_reversible_runs():
    torch.manual_seed(0)
    model = zoo.create_model(NAME, **TINY).train()
    x = torch.randn(2, 3, 8, 32, 32)
    model.rev_backbone.rev_backprop = False
    plain = _saved_numel(model, x)
    model.rev_backbone.rev_backprop = True
    rev = _saved_numel(model, x)
    assert rev < plain / 2, (rev, plain)


@pytest.mark.parametrize("kwargs", [
    {},
    dict(rev_res_path="max", rev_pre_q_fusion="concat"),
    dict(rev_respath_fuse="ln+concat_linear_2", rev_pre_q_fusion="concat_linear"),
    dict(rev_respath_fuse="avg", use_mean_pooling=True, rev_pre_q_fusion="max"),
])
def test_tiny_variants_train_and_evaluate(kwargs):
    torch.manual_seed(0)
    model = zoo.create_model(NAME, droppath_rate=0.2, **TINY, **kwargs).train()
    x = torch.randn(2, 3, 8, 32, 32)
    out = model(x)
    assert out.shape == (2, 5) and torch.isfinite(out).all()
    out.logsumexp(1).sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    with torch.no_grad():
        assert model.eval()(x).shape == (2, 5)
    keys = model.state_dict().keys()
    if kwargs.get("rev_respath_fuse", "").startswith("ln+"):
        assert {"fuse.fuse_fn.0.weight", "fuse.fuse_fn.1.fc1.weight"} <= keys
        assert "rev_backbone.layers.1.pre_q_fuse.fuse_fn.fc2.weight" in keys


def test_pyslowfast_layout_loads_through_the_pyslowfast_scheme():
    torch.manual_seed(0)
    theirs = zoo.create_model(NAME, **TINY).eval()  # PySlowFast's names are the model's own
    state, classes, _ = convert_state_dict(theirs.state_dict(), "pyslowfast",
                                           NAME, frames=8, crop_size=32, embed_dim=16)
    ours = zoo.create_model(NAME, **dict(TINY, num_classes=classes)).eval()
    ours.load_state_dict(state)
    x = torch.randn(1, 3, 8, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x))


def test_pyslowfasts_rev_config_maps_to_the_registered_name():
    flat = _flat()
    assert mvit_model(flat, "REV_MVIT_B_16x4_CONV.yaml") == (NAME, [])
    assert any("CLS_EMBED_ON" in n for n in mvit_notes(flat))
    flat.update({"MVIT.REV.RES_PATH": "max", "MVIT.REV.PRE_Q_FUSION": "concat",
                 "MVIT.DROPPATH_RATE": 0.1})
    name, kwargs = mvit_model(flat, "x.yaml")
    assert name == NAME and dict(zip(kwargs[::2], kwargs[1::2])) == {
        "droppath_rate": 0.1, "rev_res_path": "max", "rev_pre_q_fusion": "concat"}
    # Without REV.ENABLE the REV keys are not arguments of the (plain) MViT.
    plain = builder_kwargs(dict(flat, **{"MVIT.REV.ENABLE": False}))
    assert not any(k.startswith("rev_") for k in plain) and plain["cls_embed_on"] is True


@pytest.mark.parametrize("kwargs, words", [
    (dict(cls_embed_on=True), "cls_embed_on"),
    (dict(rev_buffer_layers=[1, 3]), "block 14"),
    (dict(rev_buffer_layers=[0, 1, 3, 14]), "rev_buffer_layers"),
    (dict(rev_buffer_layers=[1, 3, 14, 15]), "rev_buffer_layers"),
    (dict(rev_res_path="avg"), "rev_res_path"),
    (dict(rev_respath_fuse="avg"), "use_mean_pooling"),
    (dict(rev_respath_fuse="mean"), "rev_respath_fuse"),
    (dict(rev_pre_q_fusion="concat_linear_x"), "rev_pre_q_fusion"),
])
def test_rev_values_it_cannot_build_are_one_line_errors(kwargs, words):
    with pytest.raises(MViTConfigError, match=words) as err, torch.device("meta"):
        zoo.create_model(NAME, **kwargs)
    assert len(str(err.value).splitlines()) == 1


@pytest.mark.slow
def test_full_size_trains_one_step_reversibly():
    torch.manual_seed(0)
    model = zoo.create_model(NAME, num_classes=10).train()
    out = model(torch.randn(1, 3, 16, 224, 224))
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
