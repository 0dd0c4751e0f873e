"""A Hugging Face folder's ``preprocessor_config.json``: the pixels zoo normalises with its values
are transformers' own ``VideoMAEImageProcessor``'s (mean/std 0.5 by default, ImageNet's in the
published files, another rescale factor, normalisation off); empty ``DATA.MEAN`` / ``STD`` take
them for training, testing and prediction, set values that differ get a warning, and a converted
checkpoint records them."""

import argparse
import json
import logging

import numpy as np
import pytest
import torch

from zoo.data.transforms import normalize
from zoo.models.weights import WeightsError
from zoo.models.weights.preprocessor import find_processor_file, read_processor

transformers = pytest.importorskip("transformers")

IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
# A one-block VideoMAE for 8 frames of 32x32 that builds in milliseconds.
TINY = {"embed_dim": 24, "depth": 1, "num_heads": 3, "frames": 8, "crop_size": 32}
TINY_KWARGS = str([x for pair in TINY.items() for x in pair])  # as MODEL.KWARGS


def _frames(seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(4, 12, 12, 3), dtype=np.uint8)  # (T, H, W, C)


def _save(folder, **kwargs):
    """transformers' processor with these settings, saved as save_pretrained writes it; no
    resize or crop, so that only the pixel arithmetic is compared."""
    processor = transformers.VideoMAEImageProcessor(do_resize=False, do_center_crop=False,
                                                    **kwargs)
    processor.save_pretrained(folder)
    return folder / "preprocessor_config.json"


def _theirs(folder, frames):
    processor = transformers.VideoMAEImageProcessor.from_pretrained(folder)
    out = processor(list(frames), return_tensors="pt").pixel_values[0]  # (T, C, H, W)
    return out.permute(1, 0, 2, 3)  # (C, T, H, W), zoo's


def _ours(folder, frames):
    found = read_processor(find_processor_file(str(folder)))
    return normalize(torch.from_numpy(frames).permute(0, 3, 1, 2), found.mean, found.std)


@pytest.mark.parametrize("settings", [
    {},  # the class defaults: mean and std 0.5
    {"image_mean": IMAGENET[0], "image_std": IMAGENET[1]},  # the published VideoMAE files'
    {"rescale_factor": 1 / 127.5, "image_mean": [1.0, 1.0, 1.0], "image_std": [1.0, 1.0, 1.0]},
    {"do_normalize": False},
    {"do_rescale": False, "image_mean": [120.0, 110.0, 100.0], "image_std": [60.0, 58.0, 57.0]},
], ids=["defaults", "imagenet", "rescale-127.5", "no-normalize", "no-rescale"])
def test_normalised_pixels_are_transformers_own(tmp_path, settings):
    _save(tmp_path, **settings)
    frames = _frames()
    theirs, ours = _theirs(tmp_path, frames), _ours(tmp_path, frames)
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_keys_left_out_are_the_processor_classes_defaults(tmp_path):
    path = _save(tmp_path, image_mean=IMAGENET[0], image_std=IMAGENET[1])
    config = json.loads(path.read_text())
    del config["image_mean"], config["image_std"], config["rescale_factor"]
    path.write_text(json.dumps(config))
    frames = _frames(1)
    torch.testing.assert_close(_ours(tmp_path, frames), _theirs(tmp_path, frames), atol=1e-5,
                               rtol=1e-5)
    assert read_processor(str(path)).mean == [0.5, 0.5, 0.5]


@pytest.mark.parametrize("content, said", [
    ("{not json", "not a readable JSON file"),
    ("[1, 2]", "holds list, not a JSON object"),
    ('{"image_mean": [0.5, 0.5], "image_std": 0.5}', "image_mean is [0.5, 0.5], not 3 numbers"),
    ('{"image_mean": 0.5, "image_std": [0.5, 0, 0.5]}', "every channel's must be positive"),
    ('{"image_processor_type": "SomeOtherProcessor"}',
     "no image_mean / image_std and processor type SomeOtherProcessor"),
    ('{"image_mean": 0.5, "image_std": 0.5, "rescale_factor": 0}', "rescale_factor is 0.0"),
])
def test_a_bad_processor_file_is_one_line_naming_it(tmp_path, content, said):
    path = tmp_path / "preprocessor_config.json"
    path.write_text(content)
    with pytest.raises(WeightsError) as err:
        read_processor(str(path))
    line = str(err.value)
    assert "\n" not in line and line.startswith(str(path)) and said in line, line


def _hub_folder(tmp_path, **processor):
    """A VideoMAE folder as save_pretrained writes it, with its processor file."""
    folder = tmp_path / "hub"
    config = transformers.VideoMAEConfig(hidden_size=24, num_hidden_layers=1,
                                         num_attention_heads=3, intermediate_size=96,
                                         num_frames=8, image_size=32, num_labels=2,
                                         layer_norm_eps=1e-6)
    transformers.VideoMAEForVideoClassification(config).save_pretrained(folder)
    _save(folder, **processor)
    return folder


def _setup_file(path, *opts):
    """The config the command line runs with."""
    from zoo.cli.configure import setup_cfg

    return setup_cfg(argparse.Namespace(config_file=path, opts=list(opts), extra_modules=[]))


def _setup(*opts):
    return _setup_file("", *opts)


def test_empty_mean_and_std_take_the_pretrained_folders_and_set_ones_are_kept(tmp_path, caplog):
    folder = _hub_folder(tmp_path)  # mean / std 0.5
    base = ["MODEL.NAME", "videomae_vit_b", "MODEL.KWARGS", TINY_KWARGS, "MODEL.PRETRAINED",
            str(folder)]
    with caplog.at_level(logging.INFO, logger="zoo"):
        cfg = _setup(*base)
    assert list(cfg.CONFIG.DATA.MEAN) == [0.5] * 3 and list(cfg.CONFIG.DATA.STD) == [0.5] * 3
    assert f"DATA.MEAN / STD from {folder / 'preprocessor_config.json'}" in caplog.text
    # Without the file, the model's own (ImageNet's, for VideoMAE).
    (folder / "preprocessor_config.json").unlink()
    assert list(_setup(*base).CONFIG.DATA.MEAN) == IMAGENET[0]
    # Values the config sets are used, with a warning when they differ from the file's.
    _save(folder)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="zoo"):
        cfg = _setup(*base, "DATA.MEAN", str(IMAGENET[0]))
    assert list(cfg.CONFIG.DATA.MEAN) == IMAGENET[0] and list(cfg.CONFIG.DATA.STD) == [0.5] * 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "mean [0.5, 0.5, 0.5]" in warnings[0]
    assert f"DATA.MEAN {IMAGENET[0]}" in warnings[0] and "DATA.STD" not in warnings[0]


def test_a_converted_folder_records_its_normalisation_and_predict_uses_it(tmp_path, caplog):
    from zoo.cli.predict import recorded_config
    from zoo.infer.checkpoint_model import warn_input_differences
    from zoo.infer.predictor import Predictor
    from zoo.models.weights.convert import convert_checkpoint
    from zoo.utils.checkpoint_io import load_checkpoint

    folder = _hub_folder(tmp_path, image_mean=[0.4, 0.5, 0.6], image_std=[0.2, 0.3, 0.25])
    out = str(tmp_path / "zoo.pth")
    convert_checkpoint(str(folder), out, "huggingface", "videomae_vit_b", dict(TINY))
    state = load_checkpoint(out)
    # zoo-predict without --config-file runs with the checkpoint's recorded config.
    cfg = _setup_file(recorded_config(out, str(tmp_path), state))
    predictor = Predictor(cfg, out, state=state)
    assert list(predictor.cfg.CONFIG.DATA.MEAN) == [0.4, 0.5, 0.6]
    assert list(predictor.cfg.CONFIG.DATA.STD) == [0.2, 0.3, 0.25]
    # A config of the model's own values (ImageNet's) is named as testing on other clips.
    with caplog.at_level(logging.WARNING, logger="zoo"):
        differ = warn_input_differences(_setup("MODEL.NAME", "videomae_vit_b", "DATA.CLIP_LEN", "8",
                                               "DATA.CROP_SIZE", "32"), state, out)
    assert differ == ["CONFIG.DATA.MEAN", "CONFIG.DATA.STD"]
    assert "MEAN [0.485, 0.456, 0.406] (trained: [0.4, 0.5, 0.6])" in caplog.text


def test_the_python_api_fills_them_from_the_folder_too(tmp_path):
    """zoo.train / zoo.test's config (:func:`job_config`) is filled as the command line's."""
    from zoo.config import load_config
    from zoo.launch.setup import job_config

    folder = _hub_folder(tmp_path)
    cfg = load_config(None, ["MODEL.NAME", "videomae_vit_b", "MODEL.KWARGS", TINY_KWARGS,
                             "MODEL.PRETRAINED", str(folder)])
    assert list(job_config(cfg).CONFIG.DATA.STD) == [0.5] * 3


@pytest.mark.slow
def test_the_command_line_says_it_once_for_a_two_process_job(tmp_path):
    """The launcher logs the file's values and the warning about set ones; its two workers,
    which run with the config it filled, do not say them again."""
    from helpers import run_tool

    from zoo.data.synthetic import generate

    folder = _hub_folder(tmp_path)  # mean / std 0.5
    data = generate(str(tmp_path / "mine"), num_classes=2, train_per_class=2, val_per_class=1,
                    num_frames=8, size=36, seed=7, workers=1)
    r = run_tool("train_ddp.py", [
        "MODEL.NAME", "videomae_vit_b", "MODEL.KWARGS", TINY_KWARGS, "MODEL.PRETRAINED",
        str(folder), "DATA.MEAN", str(IMAGENET[0]), "DATA.NUM_CLASSES", "2",
        "DATA.TRAIN_ANNO_PATH", data["train_list"], "DATA.TRAIN_DATA_PATH", data["root"],
        "DATA.VAL_ANNO_PATH", data["val_list"], "DATA.VAL_DATA_PATH", data["root"],
        "DATA.CLIP_LEN", "8", "DATA.FRAME_RATE", "1", "DATA.CROP_SIZE", "32",
        "DATA.SHORT_SIDE_SIZE", "32", "DATA.TRAIN_SHORT_SIDE_RANGE", "[32, 36]",
        "DATA.TEST_NUM_SEGMENT", "1", "DATA.TEST_NUM_CROP", "1", "DATA.NUM_WORKERS", "0",
        "TRAIN.BATCH_SIZE", "2", "VAL.BATCH_SIZE", "2", "TRAIN.EPOCH_NUM", "1",
        "DDP_CONFIG.NUM_CPU_PROCS", "2", "LOG.BASE_PATH", str(tmp_path), "LOG.EXP_NAME", "ft"])
    console = r.stdout + r.stderr
    assert r.returncode == 0, console[-3000:]
    processor = str(folder / "preprocessor_config.json")
    assert console.count("the pretrained weights were trained with") == 1, console[-3000:]
    assert console.count(f"DATA.STD from {processor}") == 1, console[-3000:]


def test_only_each_nodes_first_process_says_it(tmp_path, caplog, monkeypatch):
    """torchrun / Slurm run the command line in every process: ranks other than each node's
    first fill the config the same and say nothing."""
    from zoo.config import load_config
    from zoo.launch.setup import job_config

    folder = _hub_folder(tmp_path)
    opts = ["MODEL.NAME", "videomae_vit_b", "MODEL.KWARGS", TINY_KWARGS, "MODEL.PRETRAINED",
            str(folder), "DATA.MEAN", str(IMAGENET[0])]
    said = f"DATA.STD from {folder / 'preprocessor_config.json'}"
    for local_rank, speaks in (("1", False), ("0", True)):
        monkeypatch.setenv("LOCAL_RANK", local_rank)
        for make in (lambda: _setup(*opts), lambda: job_config(load_config(None, opts))):
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="zoo"):
                cfg = make()
            assert list(cfg.CONFIG.DATA.STD) == [0.5] * 3
            warned = [r for r in caplog.records if r.levelno == logging.WARNING]
            assert (said in caplog.text, len(warned)) == ((True, 1) if speaks else (False, 0))
