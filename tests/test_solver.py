"""Optimizer parameter groups and the per-iteration LR schedule."""

import math

import pytest
import torch
import torch.nn as nn

from zoo.config import load_config
from zoo.solver import build_lr_scheduler, build_optimizer, lr_scale
from zoo.solver.optimizer import param_groups


def _net():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(2))


def test_no_weight_decay_on_norm_and_bias_and_backbone_multiplier():
    net = nn.Sequential(nn.Conv2d(3, 4, 3, bias=True), nn.BatchNorm2d(4), nn.Flatten(),
                        nn.Linear(4 * 6 * 6, 2))
    cfg = load_config(None, ["TRAIN.W_DECAY", "0.01", "TRAIN.BACKBONE_LR_MULT", "0.1",
                             "TRAIN.LR", "1.0"])
    opt = build_optimizer(cfg, net, net[3].parameters())
    by_param = {}
    for g in opt.param_groups:
        for p in g["params"]:
            by_param[id(p)] = (g["weight_decay"], g["lr_mult"])
    assert by_param[id(net[0].weight)] == (0.01, 0.1)
    assert by_param[id(net[0].bias)] == (0.0, 0.1)
    assert by_param[id(net[1].weight)] == (0.0, 0.1)
    assert by_param[id(net[3].weight)] == (0.01, 1.0)
    assert by_param[id(net[3].bias)] == (0.0, 1.0)
    sched = build_lr_scheduler(cfg, opt, steps_per_epoch=10)
    lrs = {g["lr_mult"]: g["lr"] for g in opt.param_groups}
    assert lrs[1.0] == pytest.approx(sched.lr_at(0))
    assert lrs[0.1] == pytest.approx(0.1 * sched.lr_at(0))


class _ScaleNorm(nn.Module):
    """A norm layer zoo has never heard of: a 1-D scale, like torch's RMSNorm (torch >= 2.4)."""

    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * self.scale


class _Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.RMSNorm(dim) if hasattr(nn, "RMSNorm") else _ScaleNorm(dim)
        self.other_norm = _ScaleNorm(dim)
        self.fc = nn.Linear(dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 0.1))  # layer scale: 1-D, not a bias
        self.pos_embed = nn.Parameter(torch.zeros(1, 4, dim))


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = _Block(8)
        self.pos_embed = nn.Parameter(torch.zeros(1, 4, 8))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, 8))
        self.head = nn.Linear(8, 3)

    def no_weight_decay(self):
        # A full dotted name (timm's convention) names that parameter only; a last component
        # names every parameter of that name.
        return {"encoder.pos_embed", "cls_token"}


def test_weight_decay_skips_every_1d_parameter_and_the_names_listed_in_full_or_last():
    net = _Net()
    groups = param_groups(net, 0.05)
    names = {id(p): n for n, p in net.named_parameters()}
    wd = {names[id(p)]: g["weight_decay"] for g in groups for p in g["params"]}
    assert set(wd) == set(names.values())
    # timm's param_groups_weight_decay: ndim <= 1, or ".bias", or a listed (full) name.
    for name, p in net.named_parameters():
        exempt = p.ndim <= 1 or name.endswith(".bias") or name in net.no_weight_decay()
        assert wd[name] == (0.0 if exempt else 0.05), name
    norm = "encoder.norm.weight" if hasattr(nn, "RMSNorm") else "encoder.norm.scale"
    assert wd["encoder.gamma"] == wd[norm] == wd["encoder.other_norm.scale"] == 0
    assert wd["encoder.pos_embed"] == wd["cls_token"] == 0.0
    assert wd["pos_embed"] == wd["encoder.fc.weight"] == wd["head.weight"] == 0.05


def test_warmup_then_cosine_per_iteration():
    cfg = load_config(None, ["TRAIN.LR", "0.1", "TRAIN.EPOCH_NUM", "10", "TRAIN.USE_WARMUP", "True",
                             "TRAIN.WARMUP_EPOCHS", "2", "TRAIN.WARMUP_START_LR", "0.01",
                             "TRAIN.WARMUP_END_LR", "0.1"])
    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.0)
    s = build_lr_scheduler(cfg, opt, steps_per_epoch=5)
    assert s.lr_at(0) == pytest.approx(0.01)
    assert s.lr_at(5) == pytest.approx(0.01 + 0.5 * 0.09)
    assert s.lr_at(10) == pytest.approx(0.1)  # warmup ends, cosine starts at the peak
    assert s.lr_at(30) == pytest.approx(0.1 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert s.lr_at(50) == pytest.approx(0.0, abs=1e-12)
    for _ in range(7):
        s.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(s.lr_at(7))
    state = s.state_dict()
    s2 = build_lr_scheduler(cfg, opt, steps_per_epoch=5)
    s2.load_state_dict(state)
    assert s2.get_last_lr() == pytest.approx(s.get_last_lr())


def test_step_policy():
    cfg = load_config(None, ["TRAIN.LR", "1.0", "TRAIN.LR_POLICY", "Step", "TRAIN.LR_MILESTONE",
                             "[2, 4]", "TRAIN.STEP", "0.1", "TRAIN.EPOCH_NUM", "6"])
    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.0)
    s = build_lr_scheduler(cfg, opt, steps_per_epoch=3)
    assert [round(s.lr_at(i), 6) for i in (0, 5, 6, 11, 12)] == [1.0, 1.0, 0.1, 0.1, 0.01]


def test_linear_scaling_rule():
    cfg = load_config(None, ["TRAIN.BATCH_SIZE", "8", "TRAIN.REFERENCE_BATCH", "16",
                             "TRAIN.LR", "0.1"])
    assert lr_scale(cfg, world_size=4) == 2.0
    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.0)
    s = build_lr_scheduler(cfg, opt, steps_per_epoch=3, world_size=4)
    assert s.base_lr == pytest.approx(0.2)
    assert lr_scale(load_config(None, []), world_size=8) == 1.0


def test_everything_frozen_is_a_clear_error():
    net = nn.Linear(2, 2)
    for p in net.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        build_optimizer(load_config(None, []), net)


@pytest.mark.parametrize("name", ["SGD", "AdamW"])
def test_fast_optimizer_updates_like_the_reference_loop(name):
    """make_optimizer picks the fused (or foreach) kernels: same update as PyTorch's per-tensor
    loop, same state-dict layout."""
    from zoo.solver.optimizer import make_optimizer

    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    b = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    b.load_state_dict(a.state_dict())
    cls = torch.optim.SGD if name == "SGD" else torch.optim.AdamW
    extra = {"momentum": 0.9} if name == "SGD" else {}
    reference = cls(a.parameters(), lr=0.1, weight_decay=1e-3, foreach=False, **extra)
    fast = make_optimizer(name, list(b.parameters()), 0.1, momentum=0.9, weight_decay=1e-3)
    assert fast.defaults.get("fused") or fast.defaults.get("foreach")
    x, y = torch.randn(16, 5), torch.randint(0, 3, (16,))
    for _ in range(5):
        for net, opt in ((a, reference), (b, fast)):
            nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
            opt.zero_grad()
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6)
    assert reference.state_dict()["state"].keys() == fast.state_dict()["state"].keys()
    with pytest.raises(ValueError, match="unknown optimizer 'Adam'"):
        make_optimizer("Adam", list(b.parameters()), 0.1)


def test_the_warmup_ends_on_the_schedules_lr_whatever_lr_is():
    import pathlib

    # The VideoMAE fine-tuning config with its LR lowered on the command line: the warmup climbs
    # to that LR, where the cosine starts, with no jump.
    root = pathlib.Path(__file__).resolve().parents[1]
    cfg = load_config(str(root / "configs" / "custom" / "videomae_vit_b_finetune.yaml"),
                      ["TRAIN.LR", "1e-4"])
    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.0)
    s = build_lr_scheduler(cfg, opt, steps_per_epoch=100)
    end = s.warmup_iters
    assert end > 0 and s.lr_at(end) == pytest.approx(s.base_lr)
    assert s.lr_at(end - 1) < s.base_lr
    assert s.lr_at(end) - s.lr_at(end - 1) == pytest.approx(s.lr_at(1) - s.lr_at(0))
    # The defaults with a warmup and LR 0.001: the peak is 0.001.
    cfg = load_config(None, ["TRAIN.USE_WARMUP", "True", "TRAIN.LR", "0.001",
                             "TRAIN.WARMUP_START_LR", "0.0001"])
    s = build_lr_scheduler(cfg, opt, steps_per_epoch=10)
    assert max(s.lr_at(i) for i in range(100)) == pytest.approx(0.001)
    # Step: the warmup ends on the factor of the step it reaches (PySlowFast's warmup).
    cfg = load_config(None, ["TRAIN.USE_WARMUP", "True", "TRAIN.LR", "1.0", "TRAIN.LR_POLICY",
                             "Step", "TRAIN.LR_MILESTONE", "[1, 4]", "TRAIN.LR_FACTORS",
                             "[1.0, 0.5, 0.1]", "TRAIN.WARMUP_EPOCHS", "2",
                             "TRAIN.WARMUP_START_LR", "0.0", "TRAIN.EPOCH_NUM", "6"])
    s = build_lr_scheduler(cfg, opt, steps_per_epoch=10)
    assert [s.lr_at(i) for i in (10, 20, 39, 40)] == pytest.approx([0.25, 0.5, 0.5, 0.1])


def test_a_warmup_that_ends_off_the_schedule_stops_with_one_line():
    from zoo.config import ConfigError

    with pytest.raises(ConfigError) as e:
        load_config(None, ["TRAIN.USE_WARMUP", "True", "TRAIN.LR", "0.001",
                           "TRAIN.WARMUP_END_LR", "0.1"])
    line = str(e.value)
    assert "\n" not in line and "CONFIG.TRAIN.WARMUP_END_LR = 0.1" in line
    assert "set WARMUP_END_LR 0" in line
    # Equal to the schedule's LR, or no warmup at all: nothing to refuse.
    load_config(None, ["TRAIN.USE_WARMUP", "True", "TRAIN.LR", "0.001",
                       "TRAIN.WARMUP_END_LR", "0.001", "TRAIN.WARMUP_START_LR", "0.0"])
    load_config(None, ["TRAIN.LR", "0.001", "TRAIN.WARMUP_END_LR", "0.1"])


def test_a_warmup_that_starts_above_its_end_stops_with_one_line():
    """USE_WARMUP with LR 0.001 and the default WARMUP_START_LR 0.01: the "warmup" lowered the
    LR from 0.01 to 0.001, ten times the peak the log named."""
    from zoo.config import ConfigError

    with pytest.raises(ConfigError) as e:
        load_config(None, ["TRAIN.USE_WARMUP", "True", "TRAIN.LR", "0.001"])
    line = str(e.value)
    assert "\n" not in line and "CONFIG.TRAIN.WARMUP_START_LR = 0.01 is above" in line
    assert "(0.001, from CONFIG.TRAIN.LR = 0.001)" in line
    load_config(None, ["TRAIN.USE_WARMUP", "True", "TRAIN.LR", "0.001",
                       "TRAIN.WARMUP_START_LR", "0.00001"])
    load_config(None, ["TRAIN.LR", "0.001"])  # no warmup: nothing to refuse


def test_nesterov_sgd_is_torchs_nesterov_update_and_needs_sgd_with_momentum():
    # One step of zoo's optimizer against torch's SGD(nesterov=True) written out: the second
    # update of plain and of Nesterov momentum differ, so the test tells them apart.
    from zoo.config import ConfigError
    from zoo.solver import build_optimizer

    for nesterov in (False, True):
        cfg = load_config(None, ["TRAIN.LR", "0.1", "TRAIN.W_DECAY", "0.0",
                                 "TRAIN.NESTEROV", str(nesterov)])
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2, bias=False)
        weight = model.weight.detach().clone()
        optimizer = build_optimizer(cfg, model)
        assert optimizer.param_groups[0]["nesterov"] is nesterov
        buf = torch.zeros_like(weight)
        for _ in range(2):
            optimizer.zero_grad()
            model(torch.ones(1, 3)).pow(2).sum().backward()
            grad = model.weight.grad.detach().clone()
            optimizer.step()
            buf = 0.9 * buf + grad
            weight -= 0.1 * (grad + 0.9 * buf if nesterov else buf)
            assert torch.allclose(model.weight.detach(), weight, atol=1e-6)
    for wrong in (["TRAIN.OPTIMIZER", "AdamW"], ["TRAIN.MOMENTUM", "0.0"]):
        with pytest.raises(ConfigError, match="CONFIG.TRAIN.NESTEROV True needs OPTIMIZER 'SGD' "
                                              "with MOMENTUM above 0"):
            load_config(None, ["TRAIN.NESTEROV", "True", *wrong])


def test_a_warmup_as_long_as_a_cosine_from_epoch_0_stops_naming_the_epochs():
    """The Swin recipe (warmup 2.5 epochs, cosine from epoch 0) run for 2 epochs: the cosine is
    0 where the warmup ends, so every LR was 0 (with WARMUP_START_LR 0) and nothing trained."""
    from zoo.config import ConfigError

    short = ["TRAIN.USE_WARMUP", "True", "TRAIN.LR", "0.001", "TRAIN.COSINE_AFTER_WARMUP",
             "False", "TRAIN.WARMUP_EPOCHS", "2.5", "TRAIN.WARMUP_START_LR", "0.0"]
    for epochs in ("2", "1"):
        with pytest.raises(ConfigError) as e:
            load_config(None, [*short, "TRAIN.EPOCH_NUM", epochs])
        assert str(e.value) == (
            f"CONFIG.TRAIN.WARMUP_EPOCHS = 2.5 is not below CONFIG.TRAIN.EPOCH_NUM = {epochs}, "
            "and the cosine runs from epoch 0 (COSINE_AFTER_WARMUP False): it reaches 0 before "
            "the warmup ends, so the run would not train; lower WARMUP_EPOCHS below EPOCH_NUM "
            "or raise EPOCH_NUM")
    load_config(None, [*short, "TRAIN.EPOCH_NUM", "3"])
    load_config(None, [*short[:4], "TRAIN.WARMUP_EPOCHS", "2.5", "TRAIN.EPOCH_NUM", "2",
                       "TRAIN.WARMUP_START_LR", "0.0"])  # after the warmup: it still trains


def _pyslowfast_lr(epoch, base_lr, max_epoch, warmup_epochs, warmup_start):
    """PySlowFast's get_lr_at_epoch for LR_POLICY cosine with COSINE_AFTER_WARMUP False and
    COSINE_END_LR 0 (slowfast/utils/lr_policy.py), written out from its definition."""
    def cosine(e):
        return base_lr * (math.cos(math.pi * e / max_epoch) + 1.0) * 0.5

    if epoch < warmup_epochs:
        slope = (cosine(warmup_epochs) - warmup_start) / warmup_epochs
        return warmup_start + epoch * slope
    return cosine(epoch)


def test_a_cosine_from_epoch_0_gives_pyslowfasts_lr_at_every_step():
    cfg = load_config(None, ["TRAIN.LR", "0.1", "TRAIN.EPOCH_NUM", "10", "TRAIN.USE_WARMUP", "True",
                             "TRAIN.WARMUP_EPOCHS", "2", "TRAIN.WARMUP_START_LR", "0.001",
                             "TRAIN.COSINE_AFTER_WARMUP", "False"])
    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.0)
    steps = 4
    s = build_lr_scheduler(cfg, opt, steps_per_epoch=steps)
    # PySlowFast sets the LR of every iteration from its fractional epoch.
    expected = [_pyslowfast_lr(i / steps, 0.1, 10, 2, 0.001) for i in range(10 * steps + 1)]
    assert [s.lr_at(i) for i in range(10 * steps + 1)] == pytest.approx(expected, abs=1e-12)
    # The warmup ends on the cosine's value at epoch 2, below LR: 0.1 x (1 + cos(pi / 5)) / 2.
    assert s.lr_at(2 * steps) == pytest.approx(0.1 * 0.5 * (1 + math.cos(math.pi / 5)))
    for _ in range(5):
        s.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(expected[5])
    # MMAction2's Swin recipe (30 epochs, 2.5 of warmup): a cosine starting after the warmup
    # trains at 5% more LR at epoch 5 and 19% more at epoch 29.
    swin = ["TRAIN.LR", "1e-3", "TRAIN.EPOCH_NUM", "30", "TRAIN.USE_WARMUP", "True",
            "TRAIN.WARMUP_EPOCHS", "2.5", "TRAIN.WARMUP_START_LR", "1e-4"]
    after = build_lr_scheduler(load_config(None, swin), opt, steps_per_epoch=10)
    from_0 = build_lr_scheduler(load_config(None, [*swin, "TRAIN.COSINE_AFTER_WARMUP", "False"]),
                                opt, steps_per_epoch=10)
    assert after.lr_at(50) / from_0.lr_at(50) == pytest.approx(1.05, abs=0.005)
    assert after.lr_at(290) / from_0.lr_at(290) == pytest.approx(1.19, abs=0.005)


def test_the_cosine_starts_after_the_warmup_by_default():
    assert load_config(None, []).CONFIG.TRAIN.COSINE_AFTER_WARMUP is True
    args = ["TRAIN.LR", "0.1", "TRAIN.EPOCH_NUM", "10", "TRAIN.USE_WARMUP", "True",
            "TRAIN.WARMUP_EPOCHS", "2", "TRAIN.WARMUP_START_LR", "0.01"]
    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.0)
    default = build_lr_scheduler(load_config(None, args), opt, steps_per_epoch=5)
    spelled = build_lr_scheduler(load_config(None, [*args, "TRAIN.COSINE_AFTER_WARMUP", "True"]),
                                 opt, steps_per_epoch=5)
    # VideoMAE's rule: the warmup climbs to LR, then the cosine spans the 8 epochs after it.
    expected = [0.01 + 0.09 * i / 10 if i < 10 else
                0.1 * 0.5 * (1 + math.cos(math.pi * (i - 10) / 40)) for i in range(51)]
    assert [default.lr_at(i) for i in range(51)] == pytest.approx(expected, abs=1e-12)
    assert [spelled.lr_at(i) for i in range(51)] == pytest.approx(expected, abs=1e-12)


def test_the_peak_lr_is_the_largest_the_schedule_reaches():
    """The training log's "peak LR": a cosine from epoch 0 after a warmup never reaches LR."""
    args = ["TRAIN.LR", "0.1", "TRAIN.EPOCH_NUM", "10", "TRAIN.USE_WARMUP", "True",
            "TRAIN.WARMUP_EPOCHS", "2", "TRAIN.WARMUP_START_LR", "0.01"]
    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.0)
    after = build_lr_scheduler(load_config(None, args), opt, steps_per_epoch=5)
    from_0 = build_lr_scheduler(load_config(None, [*args, "TRAIN.COSINE_AFTER_WARMUP", "False"]),
                                opt, steps_per_epoch=5)
    assert after.peak_lr() == pytest.approx(0.1)
    assert from_0.peak_lr() == pytest.approx(0.1 * 0.5 * (1 + math.cos(math.pi / 5)))
    assert from_0.peak_lr() == pytest.approx(max(from_0.lr_at(i) for i in range(51)))
    rising = build_lr_scheduler(load_config(None, [
        "TRAIN.LR", "0.1", "TRAIN.EPOCH_NUM", "4", "TRAIN.LR_POLICY", "Step",
        "TRAIN.LR_MILESTONE", "[2]", "TRAIN.LR_FACTORS", "[1.0, 2.0]"]), opt, steps_per_epoch=5)
    assert rising.peak_lr() == pytest.approx(0.2)


def test_a_warmup_end_spelled_out_is_the_cosines_value_when_it_starts_at_epoch_0():
    from zoo.config import ConfigError

    base = ["TRAIN.USE_WARMUP", "True", "TRAIN.LR", "0.1", "TRAIN.EPOCH_NUM", "10",
            "TRAIN.WARMUP_EPOCHS", "2", "TRAIN.WARMUP_START_LR", "0.0",
            "TRAIN.COSINE_AFTER_WARMUP", "False"]
    end = 0.1 * 0.5 * (1 + math.cos(math.pi / 5))
    load_config(None, [*base, "TRAIN.WARMUP_END_LR", str(end)])
    with pytest.raises(ConfigError) as e:
        load_config(None, [*base, "TRAIN.WARMUP_END_LR", "0.1"])
    assert "\n" not in str(e.value) and f"({end:.6g}, from CONFIG.TRAIN.LR = 0.1)" in str(e.value)
    with pytest.raises(ConfigError, match="CONFIG.TRAIN.COSINE_AFTER_WARMUP = 'no'"):
        load_config(None, ["TRAIN.COSINE_AFTER_WARMUP", "'no'"])
    # Step has no cosine: the key changes nothing there.
    step = ["TRAIN.LR", "1.0", "TRAIN.LR_POLICY", "Step", "TRAIN.LR_MILESTONE", "[2, 4]",
            "TRAIN.EPOCH_NUM", "6", "TRAIN.USE_WARMUP", "True", "TRAIN.WARMUP_START_LR", "0.1"]
    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.0)
    a = build_lr_scheduler(load_config(None, step), opt, steps_per_epoch=3)
    b = build_lr_scheduler(load_config(None, [*step, "TRAIN.COSINE_AFTER_WARMUP", "False"]), opt,
                           steps_per_epoch=3)
    assert [a.lr_at(i) for i in range(18)] == [b.lr_at(i) for i in range(18)]
