"""Evaluation through collectives: 2 ranks on an odd number of videos count each video once and
give exactly the 1-rank metrics; metric helpers clip top-k and compute mean class accuracy."""

import csv
import json

import pytest
import torch
from helpers import TINY_DATA, run_tool

from zoo.infer.metrics import classification_metrics, topk_correct
from zoo.infer.plots import confusion_matrix


@pytest.mark.slow
def test_two_rank_evaluation_equals_one_rank_on_an_odd_dataset(tmp_path, synth_root,
                                                               toy_model_file):
    common = ["--extra-modules", toy_model_file, "MODEL.NAME", "toy_conv3d", *TINY_DATA,
              "DATA.NUM_CLASSES", "3", "DATA.SYNTHETIC.VAL_PER_CLASS", "3",  # 9 videos
              "DATA.SYNTHETIC.ROOT", synth_root, "LOG.BASE_PATH", str(tmp_path)]
    train = run_tool("train_ddp.py", [*common, "LOG.EXP_NAME", "run", "TRAIN.EPOCH_NUM", "1",
                                      "DDP_CONFIG.DISTRIBUTED", "False"])
    assert train.returncode == 0, train.stdout[-3000:]
    ckpt = str(tmp_path / "run" / "checkpoints" / "epoch_1.pth")
    results = {}
    for name, ddp in (("one", ["DDP_CONFIG.DISTRIBUTED", "False"]),
                      ("two", ["DDP_CONFIG.NUM_CPU_PROCS", "2"])):
        r = run_tool("test_ddp.py", [*common, *ddp, "LOG.EXP_NAME", name,
                                     "TEST.CHECKPOINT", ckpt, "TEST.BATCH_SIZE", "2"])
        assert r.returncode == 0, r.stdout[-3000:]
        metrics = json.loads((tmp_path / name / "test_metrics.json").read_text())
        with open(tmp_path / name / "predictions.csv") as f:
            rows = list(csv.DictReader(f))
        results[name] = (metrics, rows)
    one, two = results["one"], results["two"]
    assert one[0]["num_videos"] == two[0]["num_videos"] == 9
    videos = [r["video"] for r in two[1]]
    assert len(videos) == len(set(videos)) == 9  # the padded duplicate was dropped
    for key in ("top1", "top5", "mean_class_acc", "loss"):
        assert one[0][key] == pytest.approx(two[0][key], abs=1e-6), key
    assert [r["pred"] for r in one[1]] == [r["pred"] for r in two[1]]
    assert (tmp_path / "two" / "confusion_matrix.csv").is_file()
    assert (tmp_path / "two" / "confusion_matrix.png").stat().st_size > 1000


def test_topk_is_clipped_to_the_class_count():
    scores = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
    labels = torch.tensor([1, 1, 1])
    assert topk_correct(scores, labels, (1, 5)) == {1: 2, 5: 3}
    m = classification_metrics(scores, labels)
    assert m["top1"] == pytest.approx(200 / 3) and m["top5"] == 100.0


def test_mean_class_accuracy_weights_classes_equally():
    scores = torch.eye(3)[[0, 0, 0, 0, 1, 0]]  # predictions 0,0,0,0,1,0
    labels = torch.tensor([0, 0, 0, 0, 1, 1])
    m = classification_metrics(scores, labels)
    assert m["top1"] == pytest.approx(500 / 6)
    assert m["mean_class_acc"] == pytest.approx(75.0)  # class 0: 4/4, class 1: 1/2
    cm = confusion_matrix(scores.argmax(1), labels, 3)
    assert cm.tolist() == [[4, 0, 0], [1, 1, 0], [0, 0, 0]]


def test_predictions_csv_gives_each_top_k_class_its_own_column(tmp_path):
    """Kinetics-style names hold spaces: joined in one field, they could not be split back."""
    import csv
    import types

    from zoo.infer.tester import write_predictions

    dataset = types.SimpleNamespace(paths=["a.mp4", "b.mp4"],
                                    classes=["air drumming", "playing guitar", "abseiling"])
    raw = {"index": torch.tensor([0, 1]), "labels": torch.tensor([1, 2]),
           "probs": torch.tensor([[0.2, 0.7, 0.1], [0.5, 0.1, 0.4]])}
    write_predictions(str(tmp_path / "p.csv"), dataset, raw)
    with open(tmp_path / "p.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["pred_name"] for r in rows] == ["playing guitar", "air drumming"]
    assert [(r["top1"], r["top2"], r["top3"]) for r in rows] == [
        ("playing guitar", "air drumming", "abseiling"),
        ("air drumming", "abseiling", "playing guitar")]
