"""The four extension examples of docs/architecture.md, cut out of the page and run.

Each ``python`` block there that starts with ``# file: NAME`` is written to ``NAME`` in a
temporary folder and loaded the way a user's file is (``CONFIG.EXTRA_MODULES`` /
``CONFIG.TRAIN.HOOKS``); the tests then use what it registered and check the result against
values computed here, not by zoo.
"""

import csv
import json
import os
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import ROOT

from zoo.config import get_cfg
from zoo.data.build import build_dataset
from zoo.data.decode.base import DecodeError
from zoo.data.decode.registry import get_decoder
from zoo.models import create_model, model_facts
from zoo.train.hooks import user_hook_class
from zoo.utils.env import load_user_module

PAGE = os.path.join(ROOT, "docs", "architecture.md")


def _examples():
    text = open(PAGE, encoding="utf-8").read()
    return dict(re.findall(r"```python\n# file: (\S+)\n(.*?)```", text, flags=re.S))


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """The example files, written once and loaded once per test session (they register names)."""
    folder = tmp_path_factory.mktemp("architecture_examples")
    found = _examples()
    assert sorted(found) == ["my_dataset.py", "my_decoder.py", "my_hooks.py", "my_model.py"]
    paths = {}
    for name, code in found.items():
        paths[name] = str(folder / name)
        with open(paths[name], "w", encoding="utf-8") as f:
            f.write(code)
    for name in ("my_model.py", "my_dataset.py", "my_decoder.py"):
        load_user_module(paths[name])
    return paths


def test_model_example_builds_with_its_facts_and_head(examples):
    model = create_model("tiny_video_net", num_classes=5)
    assert model.get_classifier() is model.head and model.head.out_features == 5
    assert model.body[0].out_channels == 8  # the width the registration fixed
    assert create_model("tiny_video_net", num_classes=5, width=4).body[0].out_channels == 4
    assert model(torch.zeros(2, 3, 8, 32, 32)).shape == (2, 5)
    model.reset_classifier(3)
    assert model(torch.zeros(1, 3, 8, 32, 32)).shape == (1, 3)
    facts = model_facts("tiny_video_net")
    assert (facts["input_frames"], facts["sampling_stride"], facts["crop_size"]) == (8, 2, 64)


def _npy_clips(folder, values):
    """One 12-frame clip per value: frame t of clip k is filled with values[k] + t."""
    names = []
    for k, value in enumerate(values):
        frames = (value + np.arange(12, dtype=np.uint8)[:, None, None, None]) * np.ones(
            (1, 24, 32, 3), dtype=np.uint8)
        names.append(f"clip{k}.npy")
        np.save(os.path.join(folder, names[-1]), frames)
    return names


def test_decoder_example_returns_the_saved_frames_and_refuses_junk(examples, tmp_path):
    [name] = _npy_clips(tmp_path, [100])
    saved = np.load(tmp_path / name)
    with get_decoder("npy")(str(tmp_path / name)) as reader:
        assert reader.num_frames == 12
        out = reader.decode_array([3, 0, 11, 3])
    assert out.dtype == np.uint8 and np.array_equal(out, saved[[3, 0, 11, 3]])
    (tmp_path / "junk.npy").write_bytes(b"not numpy at all")
    with pytest.raises(DecodeError):
        get_decoder("npy")(str(tmp_path / "junk.npy"))


def test_dataset_example_reads_its_csv_through_the_decoder_example(examples, tmp_path):
    names = _npy_clips(tmp_path, [10, 60, 110])
    labels = ["walk", "run", "walk"]
    with open(tmp_path / "train.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["video", "label_name"])
        writer.writerows(zip(names, labels))
    cfg = get_cfg()
    cfg.merge_from_list([
        "CONFIG.DATA.DATASET", "CsvClips", "CONFIG.DATA.DECODER", "npy",
        "CONFIG.DATA.TRAIN_ANNO_PATH", str(tmp_path / "train.csv"),
        "CONFIG.DATA.TRAIN_DATA_PATH", str(tmp_path), "CONFIG.DATA.NUM_CLASSES", "2",
        "CONFIG.DATA.CLIP_LEN", "4", "CONFIG.DATA.FRAME_RATE", "1",
        "CONFIG.DATA.CROP_SIZE", "16", "CONFIG.DATA.SHORT_SIDE_SIZE", "24",
        "CONFIG.DATA.TRAIN_SHORT_SIDE_RANGE", "[24, 24]", "CONFIG.DATA.RANDOM_FLIP", "False",
        "CONFIG.DATA.MEAN", "[0.0, 0.0, 0.0]", "CONFIG.DATA.STD", "[1.0, 1.0, 1.0]",
    ])
    dataset = build_dataset(cfg, "train")
    assert len(dataset) == 3
    classes = sorted(set(labels))  # what the example's provider promises: sorted names
    for k in range(3):
        clip, label, index, n_bad = dataset[k]
        assert (label, index, n_bad) == (classes.index(labels[k]), k, 0)
        # Frames are constant images valued 10 + 50k + t; 4 consecutive frames were taken.
        values = sorted({round(float(v) * 255) for v in clip.flatten()})
        assert len(values) == 4 and values == list(range(values[0], values[0] + 4))
        assert 10 + 50 * k <= values[0] <= 10 + 50 * k + 8


def test_hook_example_loads_by_name_and_writes_its_trace(examples, tmp_path):
    hook = user_hook_class(f"{examples['my_hooks.py']}:LossTrace")()
    hook.trainer = SimpleNamespace(out_dir=str(tmp_path), iteration=0, loss=None)
    for iteration in range(1, 31):
        hook.trainer.iteration, hook.trainer.loss = iteration, torch.tensor(iteration / 4)
        hook.after_step()
    lines = (tmp_path / "loss_trace.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"iter": i, "loss": i / 4} for i in (10, 20, 30)]
