"""A checkpoint trained on images is scored by zoo-predict as tools/test_ddp.py scores it: the
"image" decoder and TEST_NUM_CROP views (not a video reader and TEST_NUM_SEGMENT x TEST_NUM_CROP
views of a one-frame video), and a folder of images is what it predicts."""

import csv
import json

import numpy as np
import pytest
import torch
import torch.nn as nn
from PIL import Image

import zoo
from zoo.config import cfg_to_yaml, load_config
from zoo.data import build_dataset
from zoo.models import MODEL_REGISTRY


def image_test_toy(num_classes=2, **kwargs):
    return nn.Sequential(nn.Conv3d(3, 4, (1, 3, 3), padding=(0, 1, 1)),
                         nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(4, num_classes))


@pytest.fixture
def image_run(tmp_path):
    """An ImageFolderDataset run's checkpoint (its config recorded, as training writes it) and
    its class folder of noisy JPEGs (a JPEG read through a video reader's YUV gives other
    pixels). Returns (cfg, checkpoint path, image folder)."""
    MODEL_REGISTRY.register(image_test_toy)
    rng = np.random.default_rng(0)
    images = tmp_path / "images"
    for cls in ("cat", "dog"):
        (images / cls).mkdir(parents=True)
        for i in range(2):
            pixels = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(images / cls / f"{i}.jpg", quality=90)
    cfg = load_config(None, [
        "MODEL.NAME", "image_test_toy", "DATA.DATASET", "ImageFolderDataset",
        "DATA.NUM_CLASSES", "2", "DATA.CROP_SIZE", "28", "DATA.SHORT_SIDE_SIZE", "32",
        "DATA.TEST_NUM_SEGMENT", "10", "DATA.TEST_NUM_CROP", "3", "DATA.NUM_WORKERS", "0",
        "TEST.BATCH_SIZE", "2", "DATA.TRAIN_ANNO_PATH", str(images),
        "DATA.VAL_ANNO_PATH", str(images), "DDP_CONFIG.DISTRIBUTED", "False",
        "LOG.BASE_PATH", str(tmp_path), "LOG.EXP_NAME", "run"])
    torch.manual_seed(0)
    ckpt = tmp_path / "epoch_1.pth"
    torch.save({"model": image_test_toy().state_dict(), "cfg": cfg_to_yaml(cfg),
                "classes": ["cat", "dog"]}, ckpt)
    yield cfg, str(ckpt), images
    MODEL_REGISTRY._obj_map.pop("image_test_toy", None)


def test_the_test_reports_the_views_an_image_gives(image_run):
    cfg, ckpt, images = image_run
    metrics = zoo.test(cfg, overrides=["TEST.CHECKPOINT", ckpt])
    assert metrics["views"] == 3  # TEST_NUM_CROP: an image has no temporal views
    run = images.parent / "run"
    assert json.loads((run / "test_metrics.json").read_text())["views"] == 3


def test_predict_scores_an_image_as_the_test_does(image_run):
    from zoo.infer.predictor import Predictor

    cfg, ckpt, images = image_run
    zoo.test(cfg, overrides=["TEST.CHECKPOINT", ckpt])
    run = images.parent / "run"
    with open(run / "predictions.csv", encoding="utf-8") as f:
        tested = {row["video"]: row for row in csv.DictReader(f)}
    predictor = Predictor(cfg, ckpt)
    image = str(images / "dog" / "1.jpg")
    test_set = build_dataset(cfg, "test")
    tested_views = test_set[test_set.paths.index(image)][0]
    assert tested_views.shape[0] == 3 and torch.equal(predictor._views(image), tested_views)
    [result] = predictor.predict([image], topk=1)
    row = tested[image]
    assert result["top"][0]["name"] == row["pred_name"]
    assert f"{result['top'][0]['prob']:.4f}" == row["prob"]


def test_predict_reads_a_folder_of_images_for_an_image_checkpoint(image_run, capsys):
    from zoo.cli import predict

    cfg, ckpt, images = image_run
    (images / "notes.txt").write_text("not an image")
    assert predict.main(["--checkpoint", ckpt, "--device", "cpu", "--json", str(images)]) == 0
    out = capsys.readouterr()
    results = json.loads(out.out)
    assert [r["video"] for r in results] == [str(images / c / f"{i}.jpg")
                                             for c in ("cat", "dog") for i in range(2)]
    assert all(len(r["top"]) == 2 for r in results)
    assert "1 file(s) passed over, not of an image extension (e.g. notes.txt)" in out.err


def test_an_image_checkpoint_refuses_windows_and_videos_in_one_line(image_run, tmp_path):
    from zoo.infer.predictor import Predictor
    from zoo.utils.errors import UsageError

    cfg, ckpt, images = image_run
    predictor = Predictor(cfg, ckpt)
    with pytest.raises(UsageError) as e:
        predictor.predict([str(images / "cat" / "0.jpg")], window=2.0)
    assert "\n" not in str(e.value) and "leave out --window" in str(e.value)
    video = tmp_path / "clip.mp4"
    video.write_bytes(b"")
    [result] = predictor.predict([str(video)])
    assert "not an image" in result["error"] and "ImageFolderDataset" in result["error"]
