"""The GPU step settings (zoo/train/execution.py, zoo/accel/stem_pad.py) checked on the CPU: how
"auto" resolves, that the compiled (and CUDA-graph mode) step equals the eager one, what inductor
fuses, that a channels-last clip stays channels-last through SlowFast, and that the padded RGB
stem computes what the 3-channel one does with the same state dict."""

import copy
import logging
import re
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import zoo
from benchmarks.train import zoo_step
from zoo.accel.stem_pad import PAD_TO, PaddedConv3d, pad_stems
from zoo.config import ConfigError, load_config
from zoo.models.blocks3d import Bottleneck
from zoo.train.execution import (
    AUTO_COMPILE_MIN_ITERS,
    CompileTimer,
    Execution,
    resolve_execution,
)
from zoo.train.model_setup import apply_execution
from zoo.train.precision import resolve_channels_last

CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)
CL3D = torch.channels_last_3d


def _train(**kw):
    values = dict(COMPILE="auto", COMPILE_MODE="auto", CUDNN_BENCHMARK="auto",
                  STEM_PAD_CHANNELS="auto", MULTIGRID="")
    values.update(kw)
    return SimpleNamespace(**values)


# ----------------------------------------------------------------------- how "auto" resolves


def test_auto_is_eager_on_the_cpu():
    ex = resolve_execution(_train(), CPU, 1, 10 ** 6)
    assert (ex.compile, ex.cudnn_benchmark, ex.stem_pad, ex.cuda_graphs) == (False,) * 4
    assert ex.describe() == "eager"


def test_auto_on_cuda_compiles_long_epochs_with_cuda_graphs():
    short = resolve_execution(_train(), CUDA, 1, AUTO_COMPILE_MIN_ITERS - 1)
    assert not short.compile and short.cudnn_benchmark and short.stem_pad
    long = resolve_execution(_train(), CUDA, 1, AUTO_COMPILE_MIN_ITERS)
    assert long.compile and long.compile_mode == "reduce-overhead" and long.cuda_graphs
    assert long.describe() == ("torch.compile reduce-overhead, cuDNN benchmark, stems padded to "
                               "8 channels")
    # without an epoch length (prepare_model called alone) auto stays off
    assert not resolve_execution(_train(), CUDA, 1, None).compile


def test_auto_with_several_processes_or_fsdp():
    ddp = resolve_execution(_train(), CUDA, 2, 5000)
    assert ddp.compile and ddp.compile_mode == "default" and not ddp.cuda_graphs
    assert not resolve_execution(_train(), CUDA, 2, 5000, sharded=True).compile


def test_multigrid_shapes_are_not_static():
    ex = resolve_execution(_train(MULTIGRID="long"), CUDA, 1, 5000)
    assert not ex.compile and not ex.cudnn_benchmark and ex.stem_pad
    # an explicit CUDA-graph mode falls back to "default", and says why
    ex = resolve_execution(_train(MULTIGRID="short", COMPILE="True",
                                  COMPILE_MODE="reduce-overhead"), CUDA, 1, 10)
    assert ex.compile and ex.compile_mode == "default" and not ex.cuda_graphs
    assert "needs static shapes" in ex.describe()


def test_explicit_values_win():
    ex = resolve_execution(_train(COMPILE="False", CUDNN_BENCHMARK="False",
                                  STEM_PAD_CHANNELS="False"), CUDA, 1, 10 ** 6)
    assert (ex.compile, ex.cudnn_benchmark, ex.stem_pad) == (False, False, False)
    ex = resolve_execution(_train(COMPILE="True", COMPILE_MODE="max-autotune",
                                  STEM_PAD_CHANNELS="True", CUDNN_BENCHMARK="True"), CPU, 1, 1)
    # cuDNN's switch means nothing on the CPU; the rest is what was asked for
    assert ex.compile and ex.compile_mode == "max-autotune" and ex.stem_pad
    assert not ex.cudnn_benchmark


def test_compile_stays_off_with_activation_checkpointing():
    """torch.compile cannot trace the context that keeps a checkpointed block's BatchNorm
    statistics: auto stays off (a note says why), and True with it stops at config time."""
    ex = resolve_execution(_train(ACT_CHECKPOINT=True), CUDA, 1, AUTO_COMPILE_MIN_ITERS)
    assert not ex.compile and "COMPILE auto: off with ACT_CHECKPOINT True" in ex.describe()
    with pytest.raises(ConfigError, match="CONFIG.TRAIN.COMPILE True and CONFIG.TRAIN."
                                          "ACT_CHECKPOINT True do not run together"):
        load_config(None, ["TRAIN.COMPILE", "True", "TRAIN.ACT_CHECKPOINT", "True"])
    load_config(None, ["TRAIN.ACT_CHECKPOINT", "True"])  # auto: fine


def test_gpu_only_settings_asked_for_on_the_cpu_say_so():
    ex = resolve_execution(_train(COMPILE="True", COMPILE_MODE="reduce-overhead",
                                  CUDNN_BENCHMARK="True"), CPU, 1, 1)
    assert not ex.cudnn_benchmark
    assert "COMPILE_MODE reduce-overhead: no CUDA graphs off a CUDA GPU" in ex.describe()
    assert "CUDNN_BENCHMARK True: no effect off a CUDA GPU" in ex.describe()


def test_channels_last_auto_on_cuda_in_every_precision():
    for precision in ("fp32", "bf16", "fp16"):
        assert resolve_channels_last("auto", precision, CUDA)
    assert not resolve_channels_last("contiguous", "fp32", CUDA)
    assert not resolve_channels_last("auto", "fp32", torch.device("mps"))


def test_config_switches_take_booleans_and_refuse_other_values():
    cfg = load_config(None, ["TRAIN.COMPILE", "True", "TRAIN.STEM_PAD_CHANNELS", "False",
                             "TRAIN.COMPILE_MODE", "reduce-overhead"])
    train = cfg.CONFIG.TRAIN
    assert (train.COMPILE, train.STEM_PAD_CHANNELS, train.CUDNN_BENCHMARK) == (
        "True", "False", "auto")
    for key, value in (("TRAIN.COMPILE", "yes"), ("TRAIN.COMPILE_MODE", "fast"),
                       ("TRAIN.CUDNN_BENCHMARK", "on")):
        with pytest.raises(ConfigError, match=f"CONFIG.{key}"):
            load_config(None, [key, value])


def test_compile_timer_logs_first_step_against_later(caplog):
    timer = CompileTimer("default", later=2)
    timer.trainer = SimpleNamespace(device=CPU, logger=logging.getLogger("zoo.test_timer"))
    with caplog.at_level(logging.INFO, logger="zoo.test_timer"):
        for _ in range(4):
            timer.before_step()
            timer.after_step()
    assert timer.done and len(timer.times) == 3
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and re.match(
        r"torch.compile default: first step [\d.]+ s, the next 2 steps [\d.]+ s each \(median\): "
        r"compiling took about [\d.]+ s", lines[0]), lines


# ------------------------------------------------------------------------ stem channel padding


def _stem_pair(seed=0):
    torch.manual_seed(seed)
    conv = nn.Conv3d(3, 8, (5, 7, 7), stride=(1, 2, 2), padding=(2, 3, 3), bias=False)
    padded = copy.deepcopy(conv)
    assert pad_stems(padded) == 1 and type(padded) is PaddedConv3d
    return conv, padded


@pytest.mark.parametrize("layout", [torch.contiguous_format, CL3D])
def test_padded_stem_equals_the_3_channel_conv_in_fp32(layout):
    conv, padded = _stem_pair()
    conv.to(memory_format=layout)
    padded.to(memory_format=layout)
    x = torch.randn(2, 3, 4, 16, 16).contiguous(memory_format=layout)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = conv(xa), padded(xb)
    torch.testing.assert_close(yb, ya, rtol=1e-5, atol=1e-6)
    g = torch.randn_like(ya)
    ya.backward(g)
    yb.backward(g)
    # channels-last: the 2-D fold sums the weight gradient in another order
    torch.testing.assert_close(padded.weight.grad, conv.weight.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(xb.grad, xa.grad, rtol=1e-5, atol=1e-5)
    assert padded.weight.grad.shape == (8, 3, 5, 7, 7)
    assert yb.is_contiguous(memory_format=layout)


STEM_CASES = [  # (clip shape, out channels, kernel, stride, padding)
    ((2, 3, 8, 32, 32), 8, (5, 7, 7), (1, 2, 2), (2, 3, 3)),  # SlowFast's fast stem
    ((2, 3, 4, 32, 32), 16, (1, 7, 7), (1, 2, 2), (0, 3, 3)),  # its slow stem
    ((1, 3, 6, 33, 31), 8, (3, 7, 7), (1, 2, 2), (1, 3, 3)),  # odd sizes
    ((1, 3, 5, 29, 35), 8, (5, 5, 5), (1, 2, 2), (2, 2, 2)),  # crop on the right
    ((1, 3, 6, 30, 30), 8, (3, 3, 3), (1, 1, 1), (1, 1, 1)),  # no spatial stride
]


@pytest.mark.parametrize("s2d", [False, True])
@pytest.mark.parametrize("case", STEM_CASES, ids=lambda c: "x".join(map(str, c[2])))
def test_the_folded_stem_is_the_3d_conv_in_float64(case, s2d):
    from zoo.accel.stem_fold import stem_conv2d

    shape, cout, kernel, stride, padding = case
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64).contiguous(memory_format=CL3D)
    w = torch.randn(cout, 3, *kernel, dtype=torch.float64, requires_grad=True)
    b = torch.randn(cout, dtype=torch.float64, requires_grad=True)
    want = F.conv3d(x, w, b, stride, padding)
    got = stem_conv2d(x, w, b, stride, padding, s2d)
    assert got.shape == want.shape and got.is_contiguous(memory_format=CL3D)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-10)
    g = torch.randn_like(want)
    grads_want = torch.autograd.grad(want, (w, b), g)
    grads_got = torch.autograd.grad(got, (w, b), g)
    for a, e in zip(grads_got, grads_want):
        assert a.shape == e.shape
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-10)


def test_a_channels_last_padded_stem_takes_the_2d_fold(monkeypatch):
    from zoo.accel import stem_pad

    conv, padded = _stem_pair()
    x = torch.randn(2, 3, 4, 16, 16).contiguous(memory_format=CL3D)
    calls = []
    monkeypatch.setattr(stem_pad, "stem_conv2d", lambda *a: _record(calls, a))
    padded(x)
    assert len(calls) == 1
    monkeypatch.setattr(stem_pad, "FOLD_TAPS", False)
    padded(x)
    assert len(calls) == 1  # the padded 3-D conv


def _record(calls, args):
    from zoo.accel.stem_fold import stem_conv2d

    calls.append(args)
    return stem_conv2d(*args)


def test_padded_stem_within_bf16_rounding():
    conv, padded = _stem_pair(1)
    x = torch.randn(2, 3, 4, 16, 16)
    want = conv(x)  # float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = padded(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)


def test_padding_keeps_the_model_state_dict_and_output():
    torch.manual_seed(0)
    model = zoo.create_model("slowfast_tiny_resnet18", num_classes=5, width=8).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(2, 3, 8, 32, 32)
    want = model(x)
    apply_execution(model, CPU, False, route_convs=False, stem_pad=True)
    stems = [m for m in model.modules() if isinstance(m, PaddedConv3d)]
    assert len(stems) == 2 and all(m.in_channels == 3 < PAD_TO for m in stems)  # slow, fast
    after = model.state_dict()
    assert list(after) == list(before)
    assert all(after[k].shape == v.shape and torch.equal(after[k], v) for k, v in before.items())
    torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-5)
    # a padded model's checkpoint loads into a plain one and back
    zoo.create_model("slowfast_tiny_resnet18", num_classes=5, width=8).load_state_dict(after)


def test_only_narrow_plain_stem_convs_are_padded():
    class Mine(nn.Conv3d):
        pass

    for first in (nn.Conv3d(16, 8, 3), nn.Conv2d(4, 4, 3, groups=2), Mine(3, 8, 3)):
        later = nn.Conv3d(3, 8, 3)  # narrow, but not the stem
        assert pad_stems(nn.Sequential(first, later)) == 0
        assert type(later) is nn.Conv3d and type(first) in (nn.Conv3d, nn.Conv2d, Mine)
    image = nn.Sequential(nn.Conv2d(3, 16, 7), nn.Conv2d(16, 3, 1), nn.Conv2d(3, 8, 1))
    assert pad_stems(image) == 1 and type(image[0]).__name__ == "PaddedConv2d"
    assert [type(m) for m in image[1:]] == [nn.Conv2d, nn.Conv2d]


# ---------------------------------------------------------------------- layout round trips


@pytest.mark.slow  # SlowFast-R50 built twice
def test_channels_last_clip_stays_channels_last_through_every_conv3d():
    torch.manual_seed(0)
    model = zoo.create_model("slowfast_8x8_resnet50", num_classes=5, dropout=0.0).train()
    plain = copy.deepcopy(model)
    apply_execution(model, CPU, True)  # as the trainer prepares it on this device
    seen, wrong = [], []

    def check(module, inputs, output):
        name = names[module]
        seen.append(name)
        for what, t in (("input", inputs[0]), ("output", output)):
            if not t.is_contiguous(memory_format=CL3D):
                wrong.append(f"{name} {what} {tuple(t.shape)} strides {t.stride()}")

    names = {m: n for n, m in model.named_modules() if isinstance(m, nn.Conv3d)}
    for m in names:
        m.register_forward_hook(check)
    x = torch.randn(2, 3, 8, 32, 32)
    got = model(x.contiguous(memory_format=CL3D))
    assert len(seen) == len(names) > 100 and not wrong, wrong
    torch.testing.assert_close(got, plain(x), rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------- compiled step and its fusions


def _losses_and_weights(name, kwargs, execution, precision, clips, labels, device=CPU, steps=2):
    torch.manual_seed(0)
    model = zoo.create_model(name, num_classes=5, dropout=0.0, **kwargs)
    step, _, _ = zoo_step(model, device, 5, precision, "auto", execution=execution)
    losses = [float(step(clips, labels)) for _ in range(steps)]
    return losses, {k: v.detach().float().cpu() for k, v in model.state_dict().items()}


# (model, builder kwargs, input shape): bf16 runs a 2-D net, as a CPU without bf16 instructions
# (this VM's) computes compiled bf16 conv3d layers in PyTorch's slow reference kernel. fp32 on
# the CPU runs a 3-D bottleneck net of one block per stage: compiling the tiny SlowFast's
# forward and backward takes inductor 170 s on 2 cores with an empty cache (a CI machine's), this
# net 80 s; the CUDA runs keep the SlowFast.
TINY_SLOWFAST = ("slowfast_tiny_resnet18", {"width": 8}, (2, 3, 8, 32, 32))
TINY_R2PLUS1D = ("r2plus1d_resnet50", {"width": 8, "layers": (1, 1, 1, 1)}, (2, 3, 8, 32, 32))
TINY_RESNET = ("resnet18", {"base_width": 8, "layers": (1, 1, 1, 1)}, (2, 3, 32, 32))


@pytest.mark.slow
@pytest.mark.parametrize("net,precision,mode,rtol,device", [
    (TINY_R2PLUS1D, "fp32", "default", 1e-4, "cpu"),
    pytest.param(TINY_SLOWFAST, "fp32", "reduce-overhead", 1e-3, "cuda", marks=pytest.mark.cuda),
])
def test_compiled_step_equals_eager(net, precision, mode, rtol, device):
    name, kwargs, shape = net
    g = torch.Generator().manual_seed(1)
    clips = torch.randn(shape, generator=g)
    labels = torch.randint(0, 5, (2,), generator=g)
    dev = torch.device(device)
    want, w_want = _losses_and_weights(name, kwargs, Execution(), precision, clips, labels, dev)
    got, w_got = _losses_and_weights(name, kwargs, Execution(compile=True, compile_mode=mode),
                                     precision, clips, labels, dev)
    for a, b in zip(got, want):
        assert abs(a - b) <= rtol * (1 + abs(b)), (got, want)
    for k, v in w_want.items():  # the weights after two SGD updates
        torch.testing.assert_close(w_got[k], v, rtol=rtol, atol=rtol, msg=k)


@pytest.mark.slow
@pytest.mark.parametrize("net,shape,mode,device", [
    (TINY_RESNET, (8, 3, 64, 64), "default", "cpu"),
    pytest.param(TINY_SLOWFAST, (8, 3, 8, 64, 64), "reduce-overhead", "cuda",
                 marks=pytest.mark.cuda),
])
def test_compiled_bf16_update_is_as_close_to_fp32_as_eager_bf16(net, shape, mode, device):
    """bf16 on the CPU: one compiled step's update is within bf16's own error of the fp32 update.

    A bf16 update is not the fp32 one (each tensor's update differs by tens of percent here, at
    initialisation), so "equal within bf16 tolerance" is measured against that error: per tensor,
    the compiled bf16 update's distance from the fp32 update, its median no more than twice the
    eager bf16 update's (a wrong gradient is ~100% off)."""
    name, kwargs, _ = net
    g = torch.Generator().manual_seed(1)
    clips = torch.randn(shape, generator=g)
    labels = torch.randint(0, 5, (shape[0],), generator=g)
    dev = torch.device(device)

    def update(execution, precision):
        _, before = _losses_and_weights(name, kwargs, Execution(), "fp32", clips, labels, dev,
                                        steps=0)
        _, after = _losses_and_weights(name, kwargs, execution, precision, clips, labels, dev,
                                       steps=1)
        return {k: after[k] - before[k] for k in before if before[k].is_floating_point()}

    exact = update(Execution(), "fp32")

    def median_error(got):
        errors = sorted(float((got[k] - v).norm() / v.norm()) for k, v in exact.items()
                        if v.norm() > 0)
        return errors[len(errors) // 2]

    eager = median_error(update(Execution(), "bf16"))
    compiled = median_error(update(Execution(compile=True, compile_mode=mode), "bf16"))
    assert 0 < eager < 1 and compiled <= 2 * eager, (compiled, eager)


@pytest.mark.slow
def test_inductor_fuses_batch_norm_relu_and_the_residual_add():
    """A bottleneck's training forward compiled: each batch norm (statistics, running-stat
    update, normalisation) and its ReLU are one kernel, and the last one takes the residual add
    and the final ReLU too; only the convolutions stay library calls (cuDNN on a GPU)."""
    from torch._inductor.utils import run_and_get_code
    from torch.utils._python_dispatch import TorchDispatchMode

    torch.manual_seed(0)
    block = Bottleneck(16, 8, 16, 3, 1).train().to(memory_format=CL3D)
    x = torch.randn(2, 16, 4, 8, 8).contiguous(memory_format=CL3D)

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.__name__)
            return func(*args, **(kwargs or {}))

    with Ops() as ops:
        copy.deepcopy(block)(x)
    eager = [n for n in ops.names if not n.startswith(("convolution", "empty"))]
    _, codes = run_and_get_code(lambda: torch.compile(block)(x))
    forward = codes[0][codes[0].index("def call("):]
    kernels = re.findall(r"^\s*(cpp_fused_\w+)\(", forward, re.M)
    assert forward.count("extern_kernels.convolution(") == 3
    # Some CPUs get a layout copy before a convolution as a kernel of its own (named after the
    # convolution it feeds); every other kernel is a batch norm with its ReLU.
    norms = [k for k in kernels if "batch_norm" in k]
    copies = [k for k in kernels if k not in norms]
    assert len(norms) == 3 and all("relu" in k for k in norms), kernels
    assert "add" in norms[-1], kernels
    assert not any(re.search("relu|add", k) for k in copies), kernels
    assert len(kernels) < len(eager), (kernels, eager)


@pytest.mark.parametrize("command", ["train", "profile", "compare"])
def test_benchmark_flags_give_the_trainer_settings(command):
    from benchmarks.commands import _execution
    from benchmarks.run import build_parser

    args = build_parser().parse_args([command])
    assert _execution(args, CPU) == Execution()  # the defaults: what the trainer runs on a CPU
    on_gpu = _execution(args, CUDA)
    assert not on_gpu.compile and on_gpu.stem_pad and on_gpu.cudnn_benchmark
    args = build_parser().parse_args([command, "--compile", "--stem-pad", "False",
                                      "--cudnn-benchmark", "False"])
    ex = _execution(args, CUDA)
    assert ex.cuda_graphs and ex.compile_mode == "reduce-overhead"
    assert not ex.stem_pad and not ex.cudnn_benchmark
    args = build_parser().parse_args([command, "--compile", "--compile-mode", "max-autotune"])
    assert _execution(args, CPU).compile_mode == "max-autotune"
