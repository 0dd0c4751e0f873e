"""What several test files share: the repository root, a toy model file's source, overrides for
a tiny run on generated data, running a tool as a user would, running a function on two gloo
ranks, a model's cross-entropy gradients, reference checkpoint key schemes (SlowFast's tensors in
PySlowFast's / MMAction2's / gluoncv's layouts, a Hugging Face VideoMAE's in MMAction2's),
gluoncv's config names, and starting and finishing
launcher processes (``from helpers import ...``). Shared fixtures are in conftest.py."""

import os
import re
import socket
import subprocess
import sys
from typing import Iterator, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A toy video model defined OUTSIDE zoo/, registered through CONFIG.EXTRA_MODULES.
TOY_MODEL = '''
import torch.nn as nn
from zoo.models import MODEL_REGISTRY


@MODEL_REGISTRY.register()
def toy_conv3d(num_classes=10, width=8, **kwargs):
    return nn.Sequential(
        nn.Conv3d(3, width, kernel_size=3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(width, num_classes),
    )
'''

# Overrides for a small, fast run on generated data (seconds, not minutes).
TINY_DATA = [
    "DATA.SYNTHETIC.ENABLE", "True",
    "DATA.SYNTHETIC.TRAIN_PER_CLASS", "4",
    "DATA.SYNTHETIC.VAL_PER_CLASS", "3",
    "DATA.SYNTHETIC.NUM_FRAMES", "8",
    "DATA.SYNTHETIC.SIZE", "32",
    "DATA.NUM_CLASSES", "2",
    "DATA.CLIP_LEN", "4",
    "DATA.FRAME_RATE", "2",
    "DATA.CROP_SIZE", "28",
    "DATA.SHORT_SIDE_SIZE", "32",
    "DATA.TRAIN_SHORT_SIDE_RANGE", "[32, 36]",
    "DATA.TEST_NUM_SEGMENT", "2",
    "DATA.TEST_NUM_CROP", "3",
    "DATA.NUM_WORKERS", "0",
    "TRAIN.BATCH_SIZE", "2",
    "VAL.BATCH_SIZE", "2",
    "TEST.BATCH_SIZE", "2",
    "LOG.DISPLAY_FREQ", "1",
]



def run_tool(tool: str, args, timeout: float = 240, env=None):
    """Run ``python tools/<tool> args`` from the repository root; returns CompletedProcess."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", tool), *args],
        cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout,
    )


def fast_sample(values, keep: int = 3):
    """Parameters of a test repeated over many models: ``keep`` of them, spread over the list, run
    in the fast tier (``pytest -m "not slow"``); the others are marked ``slow``."""
    import pytest

    values = list(values)
    step = max(1, len(values) // keep)
    fast = set(range(0, len(values), step)[:keep])
    return [pytest.param(*(v if isinstance(v, tuple) else (v,)),
                         marks=() if i in fast else pytest.mark.slow)
            for i, v in enumerate(values)]


def mini_clip_cfg(mini: dict, *extra: str):
    """A config reading the generated 2-class "mini" set (``zoo.data.synthetic.generate`` with
    16-frame 32x32 videos): 8-frame clips at stride 2, 28x28 crops, no loader workers."""
    from zoo.config import load_config

    return load_config(None, [
        "DATA.NUM_CLASSES", "2", "DATA.CLIP_LEN", "8", "DATA.FRAME_RATE", "2",
        "DATA.CROP_SIZE", "28", "DATA.SHORT_SIDE_SIZE", "32",
        "DATA.TRAIN_SHORT_SIDE_RANGE", "[32, 36]", "DATA.NUM_WORKERS", "0",
        "DATA.TRAIN_ANNO_PATH", mini["train_list"], "DATA.TRAIN_DATA_PATH", mini["root"],
        "DATA.VAL_ANNO_PATH", mini["val_list"], "DATA.VAL_DATA_PATH", mini["root"], *extra,
    ])


def _gloo_rank(rank, worker, out_dir):
    import torch
    import torch.distributed as dist

    from zoo.utils import comm

    dist.init_process_group("gloo", init_method=f"file://{out_dir}/init", rank=rank, world_size=2)
    try:
        torch.save(worker(rank), os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        comm.leave_process_group()


def on_two_gloo_ranks(worker, out_dir):
    """``[worker(0), worker(1)]``, each called in its own spawned process inside a two-rank gloo
    process group (``worker`` must be a module-level function returning what torch.save takes)."""
    import torch
    import torch.multiprocessing as mp

    mp.start_processes(_gloo_rank, args=(worker, str(out_dir)), nprocs=2, start_method="spawn")
    return [torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=True) for r in range(2)]


def cross_entropy_grads(model, x, y):
    """Copies of ``model``'s parameter gradients after one cross-entropy backward pass on
    ``(x, y)`` (the gradients are zeroed first)."""
    import torch

    model.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


# ----------------------------------------- checkpoint key schemes (test_convert, test_weights)
BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
PATHS = ("slow", "fast")
# One tensor of the architecture: (what, pathway, stage 0..3, block, part, param) -> shape.
Entry = Tuple[str, int, int, int, str, str]


def slowfast_entries(depth: int = 50, alpha: int = 4, k: int = 7, width: int = 64,
                     beta: int = 8, ratio: int = 2, classes: int = 400,
                     temp_blocks: Optional[Sequence[int]] = None,
                     ) -> Iterator[Tuple[Entry, Tuple[int, ...]]]:
    """Every tensor of a PySlowFast SlowFast, with its shape, from the paper's layer table."""
    blocks = {18: (2, 2, 2, 2), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}[depth]
    widths = (width, width // beta)
    stem_kt, stage_kt = (1, 5), ((1, 3), (1, 3), (3, 3), (3, 3))

    def conv_bn(what, p, i, j, part, conv_shape, bn=True):
        yield (what, p, i, j, part, "conv.weight"), conv_shape
        for param in BN if bn else ():
            yield (what, p, i, j, part, f"bn.{param}"), (conv_shape[0],) if param[0] != "n" else ()

    for p in (0, 1):
        yield from conv_bn("stem", p, -1, -1, "", (widths[p], 3, stem_kt[p], 7, 7))
    yield from conv_bn("fuse", -1, 0, -1, "", (ratio * widths[1], widths[1], k, 1, 1))
    c_in = [widths[0] + ratio * widths[1], widths[1]]
    for i, n in enumerate(blocks):
        for p in (0, 1):
            inner = widths[p] * 2**i
            for j in range(n):
                kt = stage_kt[i][p] if temp_blocks is None or j < temp_blocks[i] else 1
                cin = c_in[p] if j == 0 else 4 * inner
                yield from conv_bn("block", p, i, j, "a", (inner, cin, kt, 1, 1))
                yield from conv_bn("block", p, i, j, "b", (inner, inner, 1, 3, 3))
                yield from conv_bn("block", p, i, j, "c", (4 * inner, inner, 1, 1, 1))
                if j == 0:
                    yield from conv_bn("block", p, i, j, "short", (4 * inner, cin, 1, 1, 1))
        c_in = [4 * widths[0] * 2**i, 4 * widths[1] * 2**i]
        if i < 3:
            yield from conv_bn("fuse", -1, i + 1, -1, "", (ratio * c_in[1], c_in[1], k, 1, 1))
            c_in[0] += ratio * c_in[1]
    yield ("head", -1, -1, -1, "", "weight"), (classes, c_in[0] + c_in[1])
    yield ("head", -1, -1, -1, "", "bias"), (classes,)


def mmaction2_key(e: Entry) -> Optional[str]:
    """MMAction2's key, or None for the lateral BNs MMAction2 does not have."""
    what, p, i, j, part, param = e
    path = f"backbone.{PATHS[p]}_path"
    if what == "stem":
        return f"{path}.conv1.{param}"
    if what == "fuse":
        lateral = "conv1_lateral" if i == 0 else f"layer{i}_lateral"
        return f"backbone.slow_path.{lateral}.{param}" if param.startswith("conv.") else None
    if what == "block":
        name = {"a": "conv1", "b": "conv2", "c": "conv3", "short": "downsample"}[part]
        return f"{path}.layer{i + 1}.{j}.{name}.{param}"
    return f"cls_head.fc_cls.{param}"


def mmaction2_swin_key(key: str, final_norm: str = "norm3") -> str:
    """A torchvision / zoo Video Swin key as MMAction2's ``SwinTransformer3D`` + ``I3DHead`` name
    it (mmaction/models/backbones/swin.py): ``features.{2N}`` blocks are ``layers.N.blocks``, the
    patch merging ``features.{2N+1}`` is ``layers.N.downsample``, the MLP's ``0`` / ``3`` are
    ``fc1`` / ``fc2``; the final norm is ``norm3`` (``norm`` in the original Video Swin repo)."""
    m = re.match(r"^features\.(\d+)\.(.*)$", key)
    if m:
        n, rest = int(m.group(1)), m.group(2)
        if n % 2:
            return f"backbone.layers.{n // 2}.downsample.{rest}"
        rest = re.sub(r"^(\d+)\.mlp\.0\.", r"\1.mlp.fc1.", rest)
        rest = re.sub(r"^(\d+)\.mlp\.3\.", r"\1.mlp.fc2.", rest)
        return f"backbone.layers.{n // 2}.blocks.{rest}"
    if key.startswith("head."):
        return "cls_head.fc_cls." + key[len("head."):]
    if key.startswith("norm."):
        return f"backbone.{final_norm}." + key[len("norm."):]
    return "backbone." + key


def single_pathway_key(scheme: str, key: str) -> str:
    """A zoo Slow/I3D key written in PySlowFast's or MMAction2's documented scheme."""
    sub = {"conv_a": "a", "conv_b": "b", "conv_c": "c", "shortcut.conv": "short"}
    m = re.match(r"^(stem|res(\d)\.(\d+))\.(.+)\.(\w+)$", key)
    if key.startswith("head.proj."):
        return key.replace("head.proj", {"pyslowfast": "head.projection",
                                         "mmaction2": "cls_head.fc_cls"}[scheme])
    part, param = m.group(4), m.group(5)
    if scheme == "pyslowfast":
        if m.group(1) == "stem":
            return f"s1.pathway0_stem.{part}.{param}"
        bn = part.startswith("bn") or part == "shortcut.bn"
        bns = {"bn_a": "a", "bn_b": "b", "bn_c": "c", "shortcut.bn": "short"}
        base = bns.get(part) or sub[part]
        name = "branch1" if base == "short" else f"branch2.{base}"
        return f"s{m.group(2)}.pathway0_res{m.group(3)}.{name}{'_bn' if bn else ''}.{param}"
    if m.group(1) == "stem":
        return f"backbone.conv1.{part}.{param}"
    mm = {"conv_a": "conv1.conv", "bn_a": "conv1.bn", "conv_b": "conv2.conv", "bn_b": "conv2.bn",
          "conv_c": "conv3.conv", "bn_c": "conv3.bn", "shortcut.conv": "downsample.conv",
          "shortcut.bn": "downsample.bn"}[part]
    return f"backbone.layer{int(m.group(2)) - 1}.{m.group(3)}.{mm}.{param}"


def calibrated(model, x):
    """Random BN affine params and running stats from one batch, so logits are O(1) and every
    residual branch contributes (a fresh net's zero-init gammas would hide mapping errors)."""
    import torch
    import torch.nn as nn

    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm3d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.momentum = 1.0
        model.train()(list(x) if isinstance(x, list) else x)
    return model.eval()


# ----------------------------------------------------------------------------- gluoncv's layout
_BLOCK = {"conv_a": "conv1", "bn_a": "bn1", "conv_b": "conv2", "bn_b": "bn2", "conv_c": "conv3",
          "bn_c": "bn3", "shortcut.conv": "downsample.0", "shortcut.bn": "downsample.1"}
_TPN = {
    "neck.spatial.conv": "TPN_neck.spatial_modulation.spatial_modulation.0.0.conv",
    "neck.spatial.bn": "TPN_neck.spatial_modulation.spatial_modulation.0.0.bn",
    "neck.pyramid_fusion.conv": "TPN_neck.pyramid_fusion_op.0",
    "neck.pyramid_fusion.bn": "TPN_neck.pyramid_fusion_op.1",
    "aux_head.0.conv": "TPN_neck.aux_head.convs.conv",
    "aux_head.0.bn": "TPN_neck.aux_head.convs.bn",
    "aux_head.1": "TPN_neck.aux_head.fc",
    "head.proj": "fc",
}
for _i in range(2):
    _TPN[f"neck.temporal.{_i}.0"] = f"TPN_neck.temporal_modulation_ops.{_i}.conv"
    _TPN[f"neck.downsample.{_i}"] = f"TPN_neck.downsampling_ops.{_i}.conv"
    for _zoo, _gcv in (("bottom_up_fusion", "level_fusion_op"),
                       ("top_down_fusion", "level_fusion_op2")):
        _TPN[f"neck.{_zoo}.convs.{_i}.0"] = f"TPN_neck.{_gcv}.ops.{_i}.conv"
        _TPN[f"neck.{_zoo}.convs.{_i}.1"] = f"TPN_neck.{_gcv}.ops.{_i}.norm"
        _TPN[f"neck.{_zoo}.fuse.conv"] = f"TPN_neck.{_gcv}.fusion_conv.0"
        _TPN[f"neck.{_zoo}.fuse.bn"] = f"TPN_neck.{_gcv}.fusion_conv.1"


def gluoncv_family(name: str) -> str:
    for prefix, family in (("i3d_slow_", "slow"), ("tpn_", "slow"), ("i3d_", "i3d"),
                           ("slowfast_", "slowfast"), ("r2plus1d_v1_", "r2plus1d_v1")):
        if name.startswith(prefix):
            return family
    return "same"  # ircsn_v2, r2plus1d_v2, resnet*_v1b: zoo has gluoncv's names


def _resnet_block(rest: str) -> str:
    """``j.conv_a.weight`` -> ``j.conv1.weight`` (non-local tensors keep their names)."""
    block, module_param = rest.split(".", 1)
    module, param = module_param.rsplit(".", 1)
    return f"{block}.{_BLOCK.get(module, module)}.{param}"


def _one_key(family: str, key: str) -> str:
    module, param = key.rsplit(".", 1)
    if family == "same":
        return key
    if family == "r2plus1d_v1":
        stem = {"stem.0": "conv1", "stem.1": "bn1", "stem.3": "conv2", "stem.4": "bn2"}
        if module in stem:
            return f"{stem[module]}.{param}"
        m = re.match(r"^(layer\d\.\d+)\.conv(\d)\.(0\.[013]|0|1)$", module)
        if m:
            part = {"0.0": f"conv{m[2]}.conv1", "0.1": f"conv{m[2]}.bn1",
                    "0.3": f"conv{m[2]}.conv2", "0": f"conv{m[2]}", "1": f"bn{m[2]}"}[m[3]]
            return f"{m[1]}.{part}.{param}"
        return key  # downsample, fc
    if module in _TPN:
        return f"{_TPN[module]}.{param}"
    if family == "slowfast":
        for zoo_name, gcv in (("slow_stem.conv", "slow_conv1"), ("slow_stem.bn", "slow_bn1"),
                              ("fast_stem.conv", "fast_conv1"), ("fast_stem.bn", "fast_bn1"),
                              ("fuse_stem.conv", "lateral_p1.0"), ("fuse_stem.bn", "lateral_p1.1")):
            if module == zoo_name:
                return f"{gcv}.{param}"
        m = re.match(r"^fuse_res(\d)\.(conv|bn)$", module)
        if m:
            return f"lateral_res{m[1]}.{0 if m[2] == 'conv' else 1}.{param}"
        m = re.match(r"^(slow|fast)_res(\d)\.(.+)$", key)
        return f"{m[1]}_res{m[2]}.{_resnet_block(m[3])}"
    stem = ({"stem.conv": "first_stage.0", "stem.bn": "first_stage.1"} if family == "i3d"
            else {"stem.conv": "conv1", "stem.bn": "bn1"})
    if module in stem:
        return f"{stem[module]}.{param}"
    m = re.match(r"^res(\d)\.(.+)$", key)
    stage = int(m[1])
    where = f"res_layers.{stage - 2}" if family == "i3d" else f"layer{stage - 1}"
    return f"{where}.{_resnet_block(m[2])}"


def gluoncv_layout(name: str, state: dict) -> dict:
    """A zoo state dict of the model ``name`` renamed to gluoncv's keys, with gluoncv's second
    copies (I3D's ``head.1`` = ``fc``, non-local ``W_bn.0/1`` = ``W`` / ``bn``)."""
    family = gluoncv_family(name)
    out = {}
    for key, value in state.items():
        gkey = _one_key(family, key)
        out[gkey] = value
        if family == "i3d" and gkey.startswith("fc."):
            out["head.1." + gkey[3:]] = value
        m = re.match(r"^(.*nonlocal_block)\.(W|bn)\.(.+)$", gkey)
        if m:
            out[f"{m[1]}.W_bn.{0 if m[2] == 'W' else 1}.{m[3]}"] = value
    return out


# ----------------------------------------- gluoncv configs (test_gluoncv_models and _weights)
# name: (NUM_CLASSES, CLIP_LEN or NUM_SEGMENT, FRAME_RATE (None = TSN segments), CROP_SIZE)
CONFIG_NAMES = {
    "i3d_nl10_resnet101_v1_kinetics400": (400, 32, 2, 224),
    "i3d_nl10_resnet50_v1_kinetics400": (400, 32, 2, 224),
    "i3d_nl5_resnet101_v1_kinetics400": (400, 32, 2, 224),
    "i3d_nl5_resnet50_v1_kinetics400": (400, 32, 2, 224),
    "i3d_resnet101_v1_kinetics400": (400, 32, 2, 224),
    "i3d_resnet50_v1_custom": (174, 32, 2, 224),
    "i3d_resnet50_v1_kinetics400": (400, 32, 2, 224),
    "i3d_resnet50_v1_sthsthv2": (174, 16, 2, 224),
    "i3d_slow_resnet101_f16s4_kinetics400": (400, 16, 4, 224),
    "i3d_slow_resnet101_f16s4_kinetics700": (700, 16, 4, 224),
    "i3d_slow_resnet101_f32s2_kinetics400": (400, 32, 2, 224),
    "i3d_slow_resnet101_f8s8_kinetics400": (400, 8, 8, 224),
    "i3d_slow_resnet50_f16s4_kinetics400": (400, 16, 4, 224),
    "i3d_slow_resnet50_f32s2_custom": (174, 32, 2, 224),
    "i3d_slow_resnet50_f32s2_kinetics400": (400, 32, 2, 224),
    "i3d_slow_resnet50_f8s8_kinetics400": (400, 8, 8, 224),
    "ircsn_v2_resnet152_f32s2_kinetics400": (400, 32, 2, 224),
    "r2plus1d_v1_resnet18_kinetics400": (400, 16, 2, 112),
    "r2plus1d_v1_resnet34_kinetics400": (400, 16, 2, 112),
    "r2plus1d_v1_resnet50_custom": (174, 16, 2, 112),
    "r2plus1d_v1_resnet50_kinetics400": (400, 16, 2, 112),
    "r2plus1d_v2_resnet152_kinetics400": (400, 32, 2, 112),
    "resnet101_v1b_kinetics400": (400, 7, None, 224),
    "resnet152_v1b_kinetics400": (400, 7, None, 224),
    "resnet18_v1b_kinetics400": (400, 7, None, 224),
    "resnet34_v1b_kinetics400": (400, 7, None, 224),
    "resnet50_v1b_custom": (174, 7, None, 224),
    "resnet50_v1b_kinetics400": (400, 7, None, 224),
    "resnet50_v1b_sthsthv2": (174, 8, None, 224),
    "slowfast_16x8_resnet50_sthsthv2": (174, 64, 2, 224),
    "slowfast_4x16_resnet50_custom": (174, 32, 2, 224),
    "slowfast_4x16_resnet50_kinetics400": (400, 32, 2, 224),
    "slowfast_8x8_resnet101_kinetics400": (400, 32, 2, 224),
    "slowfast_8x8_resnet50_kinetics400": (400, 32, 2, 224),
    "tpn_resnet101_f16s4_kinetics400": (400, 16, 4, 224),
    "tpn_resnet101_f32s2_kinetics400": (400, 32, 2, 224),
    "tpn_resnet101_f8s8_kinetics400": (400, 8, 8, 224),
    "tpn_resnet50_f16s4_kinetics400": (400, 16, 4, 224),
    "tpn_resnet50_f32s2_custom": (400, 32, 2, 224),
    "tpn_resnet50_f32s2_kinetics400": (400, 32, 2, 224),
    "tpn_resnet50_f8s8_kinetics400": (400, 8, 8, 224),
}


def videomae_as_mmaction2(hf_state: dict, table) -> dict:
    """A Hugging Face VideoMAE's tensors under MMAction2's VideoMAE names (mmaction2's
    ``vit_mae.py`` VisionTransformer, mmcv's FFN, TimeSformerHead's ``fc_cls``), with ``table``
    as the persistent ``backbone.pos_embed`` buffer MMAction2 saves."""
    import torch

    out = {"backbone.pos_embed": table}
    qkv = {}
    for key, value in hf_state.items():
        m = re.match(r"videomae\.encoder\.layer\.(\d+)\.(.+)$", key)
        if m:
            i, rest = m.groups()
            b = f"backbone.blocks.{i}."
            m2 = re.match(r"attention\.attention\.(query|key|value)\.weight$", rest)
            if m2:
                qkv.setdefault(i, {})[m2.group(1)] = value
                continue
            rest = re.sub(r"^attention\.attention\.(q|v)_bias$", r"attn.\1_bias", rest)
            rest = re.sub(r"^attention\.attention\.(query|value)\.bias$",
                          lambda m3: f"attn.{m3.group(1)[0]}_bias", rest)
            for hf_name, mm_name in (("attention.output.dense.", "attn.proj."),
                                     ("layernorm_before.", "norm1."),
                                     ("layernorm_after.", "norm2."),
                                     ("intermediate.dense.", "mlp.layers.0.0."),
                                     ("output.dense.", "mlp.layers.1.")):
                if rest.startswith(hf_name):
                    rest = mm_name + rest[len(hf_name):]
                    break
            out[b + rest] = value
            continue
        key = key.replace("videomae.embeddings.patch_embeddings.projection.",
                          "backbone.patch_embed.projection.")
        key = key.replace("fc_norm.", "backbone.fc_norm.").replace("classifier.",
                                                                  "cls_head.fc_cls.")
        out[key] = value
    for i, parts in qkv.items():
        out[f"backbone.blocks.{i}.attn.qkv.weight"] = torch.cat(
            [parts["query"], parts["key"], parts["value"]])
    return out


def file_bytes(obj, tmp_path, name="w.pth") -> bytes:
    """The bytes of ``obj`` saved with torch.save (as a published weights file is)."""
    import torch

    path = tmp_path / name
    torch.save(obj, path)
    return path.read_bytes()


# --------------------------------- launcher processes (test_multinode, test_hang, test_restarts)
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tool_command(tool, args, netns=None):
    cmd = [sys.executable, os.path.join(ROOT, "tools", tool), *args]
    return ["ip", "netns", "exec", netns, *cmd] if netns else cmd


def start_process(cmd, env=None):
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "ZOO_NODE_RANK"):
        if var not in (env or {}):
            full_env.pop(var, None)
    return subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def finish_processes(procs, timeout=240):
    """Wait for all; returns [(returncode, output)]."""
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out += "\n<killed by the test: timeout>"
        results.append((p.returncode, out))
    return results


def error_line(out: str) -> str:
    """The single 'error:' line of a failed run (asserts there is exactly one)."""
    lines = [ln for ln in out.splitlines() if "error:" in ln]
    assert len(lines) == 1, out
    return lines[0]


def two_nodes_here(extra, port, node_args=((), ())):
    """Start node 0 and node 1 of a 2-node job on this host; returns the Popen objects."""
    common = ["DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_URLS", "['127.0.0.1', '127.0.0.1']",
              "DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{port}", *extra]
    return [start_process(tool_command("train_ddp.py", [*common, *node_args[k]]),
                          env={"ZOO_NODE_RANK": str(k)})
            for k in (0, 1)]


def toy_args(tmp_path, synth_root, model="toy_conv3d", model_src=TOY_MODEL, epochs=1, procs=1):
    path = tmp_path / f"{model}.py"
    path.write_text(model_src)
    return ["CONFIG.EXTRA_MODULES", repr([str(path)]), "MODEL.NAME", model,
            "TRAIN.EPOCH_NUM", str(epochs), "DDP_CONFIG.NUM_CPU_PROCS", str(procs),
            "DDP_CONFIG.INIT_TIMEOUT", "20", "DATA.SYNTHETIC.ROOT", synth_root,
            "LOG.BASE_PATH", str(tmp_path / "runs"), "LOG.EXP_NAME", "job", *TINY_DATA]


# PyTorchVideo's X3D keys -> PySlowFast's (slowfast/models/video_model_builder.py X3D, stem_helper
# X3DStem, resnet_helper X3DTransform, head_helper X3DHead): how the two projects name each layer.
_PTV_TO_PYSLOWFAST = [
    (r"^blocks\.0\.conv\.conv_t\.", "s1.pathway0_stem.conv_xy."),   # PTV's names are swapped
    (r"^blocks\.0\.conv\.conv_xy\.", "s1.pathway0_stem.conv."),
    (r"^blocks\.0\.norm\.", "s1.pathway0_stem.bn."),
    (r"^blocks\.(\d)\.res_blocks\.(\d+)\.branch1_conv\.", "s{s}.pathway0_res{j}.branch1."),
    (r"^blocks\.(\d)\.res_blocks\.(\d+)\.branch1_norm\.", "s{s}.pathway0_res{j}.branch1_bn."),
    (r"^blocks\.(\d)\.res_blocks\.(\d+)\.branch2\.conv_([abc])\.",
     "s{s}.pathway0_res{j}.branch2.{x}."),
    (r"^blocks\.(\d)\.res_blocks\.(\d+)\.branch2\.norm_([ac])\.",
     "s{s}.pathway0_res{j}.branch2.{x}_bn."),
    (r"^blocks\.(\d)\.res_blocks\.(\d+)\.branch2\.norm_b\.0\.",
     "s{s}.pathway0_res{j}.branch2.b_bn."),
    (r"^blocks\.(\d)\.res_blocks\.(\d+)\.branch2\.norm_b\.1\.block\.0\.",
     "s{s}.pathway0_res{j}.branch2.se.fc1."),
    (r"^blocks\.(\d)\.res_blocks\.(\d+)\.branch2\.norm_b\.1\.block\.2\.",
     "s{s}.pathway0_res{j}.branch2.se.fc2."),
    (r"^blocks\.5\.pool\.pre_conv\.", "head.conv_5."),
    (r"^blocks\.5\.pool\.pre_norm\.", "head.conv_5_bn."),
    (r"^blocks\.5\.pool\.post_conv\.", "head.lin_5."),
    (r"^blocks\.5\.proj\.", "head.projection."),
]


def as_pyslowfast_x3d(ptv_state):
    """A PyTorchVideo X3D state dict under PySlowFast's names, as PySlowFast's .pyth holds it."""
    import re

    import torch

    out = {}
    for key, value in ptv_state.items():
        for pattern, target in _PTV_TO_PYSLOWFAST:
            m = re.match(pattern, key)
            if m:
                groups = m.groups()
                name = target.format(s=int(groups[0]) + 1 if groups else 0,
                                     j=groups[1] if len(groups) > 1 else 0,
                                     x=groups[2] if len(groups) > 2 else "")
                out[name + key[m.end():]] = value
                break
        else:
            raise AssertionError(f"no PySlowFast name for {key}")
    # PySlowFast's stage-2 shortcut has a BN (PyTorchVideo's none): an identity one.
    width = out["s2.pathway0_res0.branch1.weight"].shape[0]
    bn = "s2.pathway0_res0.branch1_bn."
    out.update({bn + "weight": torch.ones(width), bn + "bias": torch.zeros(width),
                bn + "running_mean": torch.zeros(width),
                bn + "running_var": torch.full((width,), 1 - 1e-5),
                bn + "num_batches_tracked": torch.zeros((), dtype=torch.long)})
    return out


# A test-only hook (CONFIG.TRAIN.HOOKS): rank 0 SIGKILLs its process group after step KILL_AT.
KILL_HOOK = """
import os
import signal

from zoo.train.hooks import HookBase
from zoo.utils import comm

KILL_AT = {kill_at}


class KillAt(HookBase):
    def after_step(self):
        if self.trainer.iteration == KILL_AT and comm.is_main_process():
            # The kill comes once the checkpoint write in flight (if any) is on disk, so that
            # the run always resumes from the same checkpoint; a write cut short by the kill is
            # tested apart.
            self.trainer.checkpoint_writes.wait()
            os.killpg(os.getpgrp(), signal.SIGKILL)
"""


def train_killed_at(tmp_path, args, kill_at: int, exp: str = "killed", timeout: float = 240):
    """Run ``tools/train_ddp.py ARGS LOG.EXP_NAME exp`` (LOG.BASE_PATH = ``tmp_path`` in ARGS)
    and SIGKILL the launcher and its workers after optimizer step ``kill_at`` and the checkpoint
    write in flight then, from a hook; the job runs in its own session, so the kill reaches it
    and nothing else. Returns the run's folder."""
    import signal

    hook_file = tmp_path / "kill_hook.py"
    hook_file.write_text(KILL_HOOK.format(kill_at=kill_at))
    cmd = [sys.executable, os.path.join(ROOT, "tools", "train_ddp.py"), *args,
           "LOG.EXP_NAME", exp, "TRAIN.HOOKS", f"['{hook_file}:KillAt']"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        assert proc.wait(timeout=timeout) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return tmp_path / exp
