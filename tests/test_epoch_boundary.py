"""No idle time at epoch boundaries: a training run whose loader is slower per batch than a step,
timed step by step. The boundary between two epochs (with a checkpoint written at every epoch's
end) must cost no more than a step, because the loader's workers make the next epoch's first
batches while the current one ends (zoo/data/epoch_stream.py) and the checkpoint is written in a
thread (zoo/train/checkpoint_writer.py). Also: the validation loader keeps its workers."""

from __future__ import annotations

import json
import statistics

import pytest
from helpers import TINY_DATA, TOY_MODEL, run_tool

# A dataset that "decodes" for DECODE_S seconds per item, and a "device step" of STEP_S seconds
# (a hook sleeps in each step). A batch of 2 costs a worker 2 x DECODE_S = 1 s, 5 steps; 8 workers
# make 8 batches a second, more than the steps take, so inside an epoch the loop finds its next
# batch ready. A loader that starts an epoch's batches only when the loop asks for them leaves
# the loop waiting a whole batch's decode (1 s, 5 steps) at every boundary. Sleeping costs no
# CPU, so these times hold on a loaded machine.
TIMELINE_MODULE = TOY_MODEL + '''
import json
import os
import time

import torch
from torch.utils.data import Dataset

from zoo.data import DATASET_REGISTRY
from zoo.train.hooks import HookBase
from zoo.utils import comm

DECODE_S, STEP_S = 0.5, 0.2


@DATASET_REGISTRY.register()
class SlowClips(Dataset):
    """Constant clips, DECODE_S seconds each."""

    def __init__(self, clip_len, crop_size, **kwargs):
        self.shape = (3, clip_len, crop_size, crop_size)
        self.num_classes_found = 2

    def __len__(self):
        return 32

    def __getitem__(self, key):
        epoch, index = key
        time.sleep(DECODE_S)
        return torch.full(self.shape, float(index % 2)), index % 2, index, 0


class StepTimes(HookBase):
    """Sleeps STEP_S in each step (the device's time) and records when each step began and
    ended (its ``before_step`` and ``after_step``, after those of the built-in hooks)."""

    def before_train(self):
        self.times = []

    def before_step(self):
        self.start = time.perf_counter()
        time.sleep(STEP_S)

    def after_step(self):
        t = self.trainer
        self.times.append([t.epoch, t.inner_iter, self.start, time.perf_counter()])

    def after_train(self):
        if comm.is_main_process():
            with open(os.path.join(self.trainer.out_dir, "step_times.json"), "w") as f:
                json.dump(self.times, f)
'''


def timeline(times):
    """``(idle at each boundary, idle inside epochs, step durations)`` in seconds from the
    ``[epoch, batch, start, end]`` rows: idle is the time from the end of one step to the start
    of the next, at a boundary from the last step of epoch e to the first of e + 1."""
    boundaries, inside = [], []
    for (e0, _, _, end), (e1, _, start, _) in zip(times, times[1:]):
        (boundaries if e1 != e0 else inside).append(start - end)
    return boundaries, inside, [end - start for _, _, start, end in times]


@pytest.mark.slow  # one training run of 3 epochs, ~20 s on 2 cores
def test_an_epoch_boundary_costs_no_more_than_a_step(tmp_path):
    module = tmp_path / "timeline.py"
    module.write_text(TIMELINE_MODULE)
    anno = tmp_path / "unused_list.txt"  # the list paths must exist; SlowClips reads none
    anno.write_text("")
    r = run_tool("train_ddp.py", [
        "--extra-modules", str(module),
        "DDP_CONFIG.DISTRIBUTED", "False",
        "MODEL.NAME", "toy_conv3d", "DATA.DATASET", "SlowClips",
        "DATA.TRAIN_ANNO_PATH", str(anno), "DATA.NUM_CLASSES", "2",
        "DATA.CLIP_LEN", "2", "DATA.CROP_SIZE", "16",
        "DATA.NUM_WORKERS", "8", "TRAIN.BATCH_SIZE", "2",
        "TRAIN.EPOCH_NUM", "3", "LOG.SAVE_FREQ", "1",  # a checkpoint at every boundary
        "TRAIN.HOOKS", f"['{module}:StepTimes']",
        "LOG.BASE_PATH", str(tmp_path), "LOG.EXP_NAME", "timeline",
    ], timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run = tmp_path / "timeline"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "epoch_1.pth", "epoch_2.pth", "epoch_3.pth"]
    times = json.loads((run / "step_times.json").read_text())
    assert [row[0] for row in times] == [0] * 16 + [1] * 16 + [2] * 16
    boundaries, inside, steps = timeline(times)
    step = statistics.median(steps)
    shown = (f"idle at the boundaries {[round(g, 3) for g in boundaries]} s, inside epochs "
             f"{statistics.median(inside):.3f} s (median), a step {step:.3f} s (median)")
    # The premise: inside an epoch the next batch is ready (the loader keeps up with the steps).
    assert statistics.median(inside) < 0.25 * step, shown
    # "No longer than a step": the boundary's own work (the hooks, the checkpoint's snapshot)
    # fits in one, with room for a loaded machine (0.04-0.17 s idle against 0.3-0.4 s steps at
    # a load of 10-15 on 2 cores). A loader that restarts at the boundary idles a batch's decode,
    # 1 s whatever the load: 5 unloaded steps, 2.5 such loaded ones.
    assert all(gap <= step for gap in boundaries), shown


@pytest.mark.slow  # builds the synthetic videos when no earlier test did
def test_the_validation_loader_keeps_its_workers_between_validations(synth_root):
    import torch

    from zoo.config import load_config
    from zoo.data import build_loader

    cfg = load_config(None, [*TINY_DATA, "DATA.SYNTHETIC.ROOT", synth_root,
                             "DATA.NUM_WORKERS", "1"])
    loader = build_loader(cfg, "val")
    try:
        first = torch.cat([batch[2] for batch in loader])
        workers = list(loader._iterator._workers)
        second = torch.cat([batch[2] for batch in loader])
        assert list(loader._iterator._workers) == workers  # the same processes, still running
        assert all(w.is_alive() for w in workers)
        assert torch.equal(first, second) and len(first) == 6
    finally:
        loader._iterator._shutdown_workers()
