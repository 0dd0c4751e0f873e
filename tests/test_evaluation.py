"""Evaluation through collectives: 2 ranks on an odd number of videos count each video (and each
unreadable one) once and give exactly the 1-rank metrics; metric helpers clip top-k and compute
mean class accuracy; a test's outputs name the list tested and never outlive a later test that
stopped."""

import csv
import json
import math
import os

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


@pytest.mark.slow
def test_a_broken_video_the_sampler_repeats_is_skipped_once_on_two_ranks(tmp_path,
                                                                       toy_model_file):
    """5 videos on 2 ranks: DistributedSampler pads them to 6 with video 0 again, here a 0-byte
    file. Both ranks skip it, and the test counts it once, as 1 rank does."""
    import torch.nn as nn
    from videos_for_tests import ramp_frames, write

    videos = tmp_path / "videos"
    videos.mkdir()
    (videos / "empty.mp4").write_bytes(b"")
    for name in ("a", "b", "c", "d"):
        write(str(videos / f"{name}.mp4"), ramp_frames(8))
    listing = tmp_path / "test.txt"
    listing.write_text("empty.mp4 -1 0\na.mp4 -1 0\nb.mp4 -1 1\nc.mp4 -1 0\nd.mp4 -1 1\n")
    torch.manual_seed(0)
    toy = nn.Sequential(nn.Conv3d(3, 8, kernel_size=3, padding=1), nn.ReLU(),
                        nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(8, 2))  # toy_conv3d
    ckpt = tmp_path / "epoch_1.pth"
    torch.save({"model": toy.state_dict()}, ckpt)
    common = ["--extra-modules", toy_model_file, "MODEL.NAME", "toy_conv3d", *TINY_DATA,
              "DATA.SYNTHETIC.ENABLE", "False", "DATA.TEST_ANNO_PATH", str(listing),
              "DATA.TEST_DATA_PATH", str(videos), "DATA.MAX_BAD_FRACTION", "0.5",
              "DATA.TEST_NUM_CROP", "1", "TEST.CHECKPOINT", str(ckpt),
              "LOG.BASE_PATH", str(tmp_path)]
    results = {}
    for name, ddp in (("one", ["DDP_CONFIG.DISTRIBUTED", "False"]),
                      ("two", ["DDP_CONFIG.NUM_CPU_PROCS", "2"])):
        r = run_tool("test_ddp.py", [*common, *ddp, "LOG.EXP_NAME", name])
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        results[name] = json.loads((tmp_path / name / "test_metrics.json").read_text())
    counts = {name: (m["listed_videos"], m["num_videos"], m["skipped_videos"])
              for name, m in results.items()}
    assert counts == {"one": (5, 4, 1), "two": (5, 4, 1)}
    assert results["one"]["top1"] == pytest.approx(results["two"]["top1"], abs=1e-6)


def _scored(batches):
    """evaluate() of a model whose logits are its input: a batch of logits (B, V, K) is one of
    V views per video, (B, K) one clip per video."""
    from zoo.infer.evaluator import evaluate

    loader = [(logits.view(*logits.shape, 1, 1, 1), torch.tensor(labels),
               torch.arange(start, start + len(labels)), torch.zeros(len(labels)))
              for start, (logits, labels) in batches]
    return evaluate(torch.nn.Flatten(), loader, torch.device("cpu"))


def test_validation_loss_is_the_cross_entropy_of_the_logits_without_a_cap():
    """A diverged run's wrong videos score their real cross-entropy (thousands), not the
    -log(1e-12) = 27.63 a clamped softmax probability gives whatever the logits."""
    # Video 0: two views that both miss class 0 by 3000 and 5000; the log of their mean
    # probability is -3000 - log 2. Video 1: two views, right by a wide margin (loss ~0).
    logits = torch.tensor([[[0.0, 3000.0, 0.0], [0.0, 0.0, 5000.0]],
                           [[900.0, 0.0, 0.0], [800.0, 0.0, 0.0]]])
    m = _scored([(0, (logits, [0, 0]))])
    assert m["loss"] == pytest.approx((3000 + math.log(2)) / 2, rel=1e-6)
    assert m["top1"] == 50.0
    worse = _scored([(0, (logits * 8, [0, 0]))])  # the same errors, larger: a larger loss
    assert worse["loss"] == pytest.approx((24000 + math.log(2)) / 2, rel=1e-6)
    # Where nothing underflows it is -log of the view-averaged probability (what the metrics
    # rank), and for one view the cross-entropy of its logits.
    torch.manual_seed(0)
    mild = torch.randn(4, 3, 5)
    labels = [1, 4, 0, 2]
    want = -torch.log(mild.softmax(2).mean(1)[torch.arange(4), labels]).mean()
    assert _scored([(0, (mild, labels))])["loss"] == pytest.approx(float(want), rel=1e-5)
    want = torch.nn.functional.cross_entropy(mild[:, 0], torch.tensor(labels))
    assert _scored([(0, (mild[:, 0], labels))])["loss"] == pytest.approx(float(want), rel=1e-5)


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


def test_a_test_names_its_list_and_leaves_no_earlier_outputs_when_it_stops(tmp_path):
    """test_metrics.json says which list it scored and how many videos; a test that stops (too
    many unreadable videos) leaves none of an earlier test's files to be read as its results:
    they are moved into earlier_test_<time>/."""
    import torch.nn as nn
    from videos_for_tests import ramp_frames, write

    import zoo
    from zoo.config import cfg_to_yaml, load_config
    from zoo.data.robust import TooManyBadVideos
    from zoo.models import MODEL_REGISTRY

    def eval_test_toy(num_classes=2, **kwargs):
        return nn.Sequential(nn.Conv3d(3, 4, 3, padding=1), nn.AdaptiveAvgPool3d(1),
                             nn.Flatten(), nn.Linear(4, num_classes))

    videos = tmp_path / "videos"
    videos.mkdir()
    for name in ("a", "b", "c"):
        write(str(videos / f"{name}.mp4"), ramp_frames(8))
        (videos / f"{name}_broken.mp4").write_text("not a video")  # 2 of 3: too many
    (tmp_path / "good.txt").write_text("a.mp4 -1 0\nb.mp4 -1 1\nc.mp4 -1 1\n")
    (tmp_path / "broken.txt").write_text("a.mp4 -1 0\nb_broken.mp4 -1 1\nc_broken.mp4 -1 1\n")
    MODEL_REGISTRY.register(eval_test_toy)
    try:
        cfg = load_config(None, [
            "MODEL.NAME", "eval_test_toy", "DATA.NUM_CLASSES", "2", "DATA.CLIP_LEN", "2",
            "DATA.CROP_SIZE", "28", "DATA.SHORT_SIDE_SIZE", "32", "DATA.NUM_WORKERS", "0",
            "DATA.TEST_NUM_SEGMENT", "1", "DATA.TEST_NUM_CROP", "1", "TEST.BATCH_SIZE", "2",
            "DATA.TEST_ANNO_PATH", str(tmp_path / "good.txt"),
            "DATA.TEST_DATA_PATH", str(videos), "DDP_CONFIG.DISTRIBUTED", "False",
            "LOG.BASE_PATH", str(tmp_path), "LOG.EXP_NAME", "run"])
        ckpt = tmp_path / "epoch_1.pth"
        torch.save({"model": eval_test_toy().state_dict(), "cfg": cfg_to_yaml(cfg)}, ckpt)
        zoo.test(cfg, overrides=["TEST.CHECKPOINT", str(ckpt)])
        run = tmp_path / "run"
        metrics = json.loads((run / "test_metrics.json").read_text())
        assert metrics["list"] == str(tmp_path / "good.txt")
        assert (metrics["listed_videos"], metrics["num_videos"]) == (3, 3)
        written = ["test_metrics.json", "predictions.csv", "confusion_matrix.csv"]
        assert all((run / name).is_file() for name in written)
        with pytest.raises(TooManyBadVideos):
            zoo.test(cfg, overrides=["TEST.CHECKPOINT", str(ckpt),
                                     "DATA.TEST_ANNO_PATH", str(tmp_path / "broken.txt")])
        assert not [name for name in written if (run / name).exists()]
        [aside] = [p for p in run.iterdir() if p.name.startswith("earlier_test_")]
        assert json.loads((aside / "test_metrics.json").read_text()) == metrics  # kept
    finally:
        MODEL_REGISTRY._obj_map.pop("eval_test_toy", None)


def test_zoo_test_stopped_by_its_data_check_leaves_no_earlier_outputs(tmp_path, capsys):
    """zoo-test moves an earlier test's files aside before it checks the data, so a test that
    stops there (a list whose videos are not in the data folder) leaves none of them either."""
    from zoo.cli.test import main

    run = tmp_path / "run"
    run.mkdir()
    for name in ("test_metrics.json", "predictions.csv", "confusion_matrix.csv",
                 "confusion_matrix.png"):
        (run / name).write_text("an earlier test's")
    (tmp_path / "test.txt").write_text("missing.mp4 -1 0\nalso_missing.mp4 -1 1\n")
    code = main(["DATA.TEST_ANNO_PATH", str(tmp_path / "test.txt"), "DATA.TEST_DATA_PATH",
                 str(tmp_path), "DATA.NUM_CLASSES", "2", "DDP_CONFIG.DISTRIBUTED", "False",
                 "LOG.BASE_PATH", str(tmp_path), "LOG.EXP_NAME", "run"])
    assert code != 0
    assert "error: none of the first 2 videos of the test list" in capsys.readouterr().err
    [aside] = os.listdir(run)  # moved aside, not deleted
    assert aside.startswith("earlier_test_") and len(os.listdir(run / aside)) == 4


def test_evaluation_leaves_a_datasets_extra_fields_aside_as_training_does():
    from zoo.infer.evaluator import evaluate

    logits = torch.tensor([[5.0, 0.0], [0.0, 5.0]])
    loader = [(logits.view(2, 2, 1, 1, 1), torch.tensor([0, 0]), torch.arange(2),
               torch.zeros(2), torch.tensor([0.5, 1.0]))]  # a per-video weight of the dataset's
    m = evaluate(torch.nn.Flatten(), loader, torch.device("cpu"))
    assert (m["top1"], m["num_videos"]) == (50.0, 2)
