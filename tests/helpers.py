"""What several test files share: the repository root, a toy model file's source, overrides for
a tiny run on generated data, running a tool as a user would, running a function on two gloo
ranks, and a model's cross-entropy gradients (``from helpers import ...``)."""

import os
import subprocess
import sys

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

    dist.init_process_group("gloo", init_method=f"file://{out_dir}/init", rank=rank, world_size=2)
    try:
        torch.save(worker(rank), os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


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
