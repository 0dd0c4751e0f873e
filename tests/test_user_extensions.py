"""A user's own hook and dataset, defined in one file outside zoo/ and selected by config alone
(CONFIG.EXTRA_MODULES + CONFIG.DATA.DATASET for the dataset, CONFIG.TRAIN.HOOKS for the hook),
drive a 2-process gloo training run."""

import json

import pytest
from helpers import run_tool

# The user's file. The dataset reads a list of "sample_name label" lines and makes each clip from
# its index; it appends every index it serves to a file beside the list (one file per process).
# The hook writes, per rank, what it saw: its calls and the dataset indices of every batch.
USER_FILE = '''
import json
import os

import torch
from torch.utils.data import Dataset

from zoo.data import DATASET_REGISTRY
from zoo.train.hooks import HookBase
from zoo.utils import comm


@DATASET_REGISTRY.register()
class TinyListDataset(Dataset):
    def __init__(self, anno_path, split, clip_len, crop_size, **kwargs):
        with open(anno_path) as f:
            rows = [line.split() for line in f if line.strip()]
        self.names = [r[0] for r in rows]
        self.labels = [int(r[1]) for r in rows]
        self.num_classes_found = max(self.labels) + 1
        self.shape = (3, clip_len, crop_size, crop_size)
        self.seen = os.path.join(os.path.dirname(anno_path), f"seen_{split}_{os.getpid()}.txt")

    def __len__(self):
        return len(self.names)

    def __getitem__(self, item):
        index = item[1] if isinstance(item, tuple) else item  # training passes (epoch, index)
        with open(self.seen, "a") as f:
            f.write(f"{index}\\n")
        clip = torch.full(self.shape, float(self.labels[index]) - 1.0)
        return clip, self.labels[index], index, 0


class RecordSteps(HookBase):
    def before_train(self):
        self.log = {"rank": comm.get_rank(), "world": comm.get_world_size(), "calls": [],
                    "batches": []}

    def before_epoch(self):
        self.log["calls"].append(f"before_epoch {self.trainer.epoch}")

    def after_step(self):
        self.log["batches"].append([self.trainer.epoch] + self.trainer.batch[2].tolist())

    def after_epoch(self):
        self.log["calls"].append(f"after_epoch {self.trainer.epoch}")

    def after_train(self):
        path = os.path.join(self.trainer.out_dir, f"hook_rank{comm.get_rank()}.json")
        with open(path, "w") as f:
            json.dump(self.log, f)
'''

NUM_TRAIN, NUM_VAL, EPOCHS = 12, 6, 2


def _args(tmp_path, toy_model_file, hooks):
    user = tmp_path / "my_extensions.py"
    user.write_text(USER_FILE)
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for split, n in (("train", NUM_TRAIN), ("val", NUM_VAL)):
        (data / f"{split}.txt").write_text("".join(f"{split}_{i} {i % 3}\n" for i in range(n)))
    return [
        "--extra-modules", toy_model_file, "--extra-modules", str(user),
        "DDP_CONFIG.NUM_CPU_PROCS", "2",
        "MODEL.NAME", "toy_conv3d",
        "DATA.DATASET", "TinyListDataset",
        "DATA.TRAIN_ANNO_PATH", str(data / "train.txt"),
        "DATA.VAL_ANNO_PATH", str(data / "val.txt"),
        "DATA.NUM_CLASSES", "3", "DATA.CLIP_LEN", "2", "DATA.CROP_SIZE", "8",
        "DATA.NUM_WORKERS", "0",
        "TRAIN.EPOCH_NUM", str(EPOCHS), "TRAIN.BATCH_SIZE", "2", "VAL.BATCH_SIZE", "2",
        "LOG.DISPLAY_FREQ", "1",
        "LOG.BASE_PATH", str(tmp_path / "runs"), "LOG.EXP_NAME", "ext",
        "TRAIN.HOOKS", str([f"{user}:{name}" for name in hooks]),
    ]


def _seen(data, split):
    """Every index the dataset served for ``split``, over all processes."""
    out = []
    for path in sorted(data.glob(f"seen_{split}_*.txt")):
        out += [int(x) for x in path.read_text().split()]
    return out


@pytest.mark.slow  # a 2-process training run: ~20 s idle, a minute on a loaded machine
def test_a_user_hook_and_dataset_from_one_file_drive_a_two_process_run(tmp_path,
                                                                       toy_model_file):
    r = run_tool("train_ddp.py", _args(tmp_path, toy_model_file, ["RecordSteps"]))
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir, data = tmp_path / "runs" / "ext", tmp_path / "data"
    steps = NUM_TRAIN // 2 // 2  # samples per rank / batch size
    hook_batches = {}
    for rank in (0, 1):
        log = json.loads((run_dir / f"hook_rank{rank}.json").read_text())
        assert (log["rank"], log["world"]) == (rank, 2)
        assert log["calls"] == [f"{w} {e}" for e in range(EPOCHS)
                                for w in ("before_epoch", "after_epoch")]
        assert len(log["batches"]) == EPOCHS * steps
        hook_batches[rank] = log["batches"]
    # Each epoch, the two ranks' batches cover the training list exactly once...
    for epoch in range(EPOCHS):
        indices = [i for rank in (0, 1) for b in hook_batches[rank] if b[0] == epoch
                   for i in b[1:]]
        assert sorted(indices) == list(range(NUM_TRAIN))
    # ...and they are the items the user's dataset served (the launcher's data check reads none).
    served = sorted(i for rank in (0, 1) for b in hook_batches[rank] for i in b[1:])
    assert sorted(_seen(data, "train")) == served
    # Validation went through the user's dataset too: every val item, scored once.
    assert sorted(set(_seen(data, "val"))) == list(range(NUM_VAL))
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    val = [x for x in records if x["split"] == "val"]
    assert [x["epoch"] for x in val] == [1, 2] and all(x["num_videos"] == NUM_VAL for x in val)


@pytest.mark.slow
def test_a_hook_name_the_file_lacks_fails_in_one_line(tmp_path, toy_model_file):
    r = run_tool("train_ddp.py", _args(tmp_path, toy_model_file, ["RecordStep"]))
    assert r.returncode != 0
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, r.stdout + r.stderr
    assert "CONFIG.TRAIN.HOOKS entry" in lines[0] and "my_extensions.py:RecordStep" in lines[0]
    assert "hook classes there: RecordSteps" in lines[0] and "internal error" not in lines[0]


# A script that reads the user's dataset through loader workers with Python 3.14's default start
# method (forkserver) set, as on any Python 3.14 on Linux.
_WORKER_SCRIPT = '''
import multiprocessing
import sys

multiprocessing.set_start_method("forkserver", force=True)
from zoo.config import load_config
from zoo.data import build_loader
from zoo.utils.env import import_extra_modules

cfg = load_config(None, sys.argv[1:])
import_extra_modules(cfg.CONFIG.EXTRA_MODULES)  # as every zoo process does
loader = build_loader(cfg, "val")
print(loader.multiprocessing_context.get_start_method(), sum(len(b[2]) for b in loader))
'''


@pytest.mark.parametrize("method", ["auto", "forkserver"])
def test_loader_workers_serve_a_dataset_from_a_user_file_under_python_3_14_defaults(tmp_path,
                                                                                    method):
    """"auto" starts the workers with fork on Linux whatever Python's default: a class from an
    EXTRA_MODULES file reaches them. With forkserver (3.14's default) a worker must import it
    by module name, which a file has not: the loader is not built, one line naming the key, the
    file and what to change."""
    import subprocess
    import sys

    args = _args(tmp_path, "", [])
    args = [a for a in args[args.index("DDP_CONFIG.NUM_CPU_PROCS"):] if a != "TRAIN.HOOKS"][:-1]
    args = ["CONFIG.EXTRA_MODULES", str([str(tmp_path / "my_extensions.py")]), *args,
            "DATA.NUM_WORKERS", "1", "DATA.WORKER_START_METHOD", method,
            "DATA.LOADER_TIMEOUT", "10"]
    r = subprocess.run([sys.executable, "-c", _WORKER_SCRIPT, *args], capture_output=True,
                       text=True, timeout=120)
    if method == "auto":
        assert r.returncode == 0, r.stderr[-3000:]
        assert r.stdout.split() == ["fork", str(NUM_VAL)]
    else:
        line = r.stderr.strip().splitlines()[-1]
        assert r.returncode != 0 and line.startswith("zoo.config.")
        assert ("CONFIG.DATA.WORKER_START_METHOD forkserver: each loader worker starts a new "
                "interpreter" in line)
        assert (f"{tmp_path / 'my_extensions.py'} (a CONFIG.EXTRA_MODULES file loaded from its "
                "path) has no importable name; set WORKER_START_METHOD fork" in line)
        assert f"put {tmp_path} on PYTHONPATH and name the module ('my_extensions')" in line
