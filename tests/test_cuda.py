"""The GPU path end to end: a 1-process NCCL job through the DDP_CONFIG launcher and under
torchrun, the pinned-memory loader, checkpoints moving between the GPU and the CPU, and test,
predict and export of a model trained on the GPU. Tests marked ``cuda`` skip without a GPU; the
``cpu`` parametrizations run the same bodies here. A process is put on the CPU by hiding the GPUs
(``CUDA_VISIBLE_DEVICES=""``), as a user would."""

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import ROOT, TINY_DATA, run_tool

from benchmarks.link import free_port

QUICKSTART_TINY = os.path.join(ROOT, "configs", "quickstart", "slowfast_tiny_motion.yaml")
CUDA = pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.slow])
CPU = pytest.param("cpu", marks=pytest.mark.slow)
# The environment that puts a tool on one GPU, or on the CPU.
DEVICE_ENV = {"cuda": {"CUDA_VISIBLE_DEVICES": "0"}, "cpu": {"CUDA_VISIBLE_DEVICES": ""}}
DEVICE_NAME = {"cuda": "cuda:0", "cpu": "cpu"}


def _train_args(out, name, synth_root, *extra):
    return ["--config-file", QUICKSTART_TINY, *TINY_DATA, "DATA.SYNTHETIC.ROOT", synth_root,
            "TRAIN.EPOCH_NUM", "1", "VAL.FREQ", "1", "LOG.PROGRESS_BAR", "False",
            "LOG.BASE_PATH", str(out), "LOG.EXP_NAME", name,
            "DDP_CONFIG.NUM_CPU_PROCS", "1",
            "DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{free_port()}", *extra]


def _records(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _ok(result):
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def _trained_on(run_dir, device):
    """The run's rank-0 log says it computed on ``device`` and its validation ran."""
    assert f"rank 0/1 on {DEVICE_NAME[device]}" in (run_dir / "log_rank0.txt").read_text()
    assert [r["epoch"] for r in _records(run_dir) if r.get("split") == "val"] == [1]


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory, synth_root):
    """One epoch of the tiny quick start through tools/train_ddp.py on GPU 0, DIST_BACKEND nccl
    (one GPU -> one process in a 1-rank NCCL group)."""
    out = tmp_path_factory.mktemp("gpu_run")
    r = run_tool("train_ddp.py", _train_args(out, "nccl", synth_root,
                                             "DDP_CONFIG.DIST_BACKEND", "nccl"),
                 env=DEVICE_ENV["cuda"])
    return out / "nccl", _ok(r)


@pytest.mark.cuda
@pytest.mark.slow
def test_one_process_nccl_job_through_the_ddp_config_launcher(gpu_run):
    run_dir, text = gpu_run
    assert "1 GPU process(es)" in text and "backend nccl" in text, text[-3000:]
    _trained_on(run_dir, "cuda")
    assert "execution: bf16 (PRECISION auto)" in (run_dir / "log_rank0.txt").read_text()
    assert (run_dir / "checkpoints" / "epoch_1.pth").is_file()


@pytest.mark.parametrize("device", [CUDA, CPU])
def test_one_process_job_under_torchrun(tmp_path, synth_root, device):
    # torchrun's module under this interpreter (a torchrun found on PATH may be another
    # environment's); its log folder in tmp_path, not a new torchelastic_* folder in /tmp
    launcher = [sys.executable, "-m", "torch.distributed.run", "--log-dir",
                str(tmp_path / "torchrun_logs")]
    args = _train_args(tmp_path, "torchrun", synth_root)
    args.remove("--config-file")
    env = {**os.environ, **DEVICE_ENV[device], "PYTHONUNBUFFERED": "1"}
    r = subprocess.run([*launcher, "--standalone", "--nproc_per_node", "1",
                        os.path.join(ROOT, "tools", "train_ddp.py"), "--config-file", *args],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    text = _ok(r)
    assert "torchrun started this process as rank 0 of 1" in text
    assert "process(es), global ranks" not in text  # nothing spawned again
    _trained_on(tmp_path / "torchrun", device)


@pytest.mark.parametrize("device", [pytest.param("cuda", marks=pytest.mark.cuda), "cpu"])
@pytest.mark.parametrize("workers", [0, 2])
def test_training_batches_arrive_pinned_and_go_to_the_device(synth_root, device, workers):
    from zoo.config import load_config
    from zoo.data import build_loader, normalization, prepare_synthetic
    from zoo.train.step import TrainStep

    cfg = prepare_synthetic(load_config(QUICKSTART_TINY, [
        *TINY_DATA, "DATA.SYNTHETIC.ROOT", synth_root, "DATA.NUM_WORKERS", str(workers)]))
    loader = build_loader(cfg, "train")
    clips, labels, indices, bad = next(iter(loader))
    # Pinned where a GPU is, so the trainer's non_blocking copy overlaps compute.
    assert clips.is_pinned() == torch.cuda.is_available()
    assert clips.dtype == torch.uint8 and clips.shape[0] == cfg.CONFIG.TRAIN.BATCH_SIZE
    model = torch.nn.Conv3d(3, 2, 1)
    dev = torch.device(DEVICE_NAME[device])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = TrainStep(model.to(dev), opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0),
                     dev, 2, normalization=normalization(cfg))
    ready = step.prepare(clips)
    assert ready.device == dev and ready.dtype == torch.float32
    mean, std = normalization(cfg)
    want = (clips[:, 0].float() / 255 - mean[0]) / std[0]
    torch.testing.assert_close(ready[:, 0].cpu(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("first,then", [
    pytest.param("cuda", "cpu", marks=[pytest.mark.cuda, pytest.mark.slow], id="gpu-to-cpu"),
    pytest.param("cpu", "cuda", marks=[pytest.mark.cuda, pytest.mark.slow], id="cpu-to-gpu"),
    pytest.param("cpu", "cpu", marks=pytest.mark.slow, id="cpu-to-cpu"),
])
def test_a_checkpoint_resumes_on_the_other_device(tmp_path, synth_root, first, then):
    args = _train_args(tmp_path, "moved", synth_root)
    _ok(run_tool("train_ddp.py", args, env=DEVICE_ENV[first]))
    run_dir = tmp_path / "moved"
    _trained_on(run_dir, first)
    args[args.index("TRAIN.EPOCH_NUM") + 1] = "2"
    _ok(run_tool("train_ddp.py", [*args, "TRAIN.AUTO_RESUME", "True"], env=DEVICE_ENV[then]))
    log = (run_dir / "log_rank0.txt").read_text()
    assert "resumed from" in log and "continuing at epoch 2" in log, log[-3000:]
    assert log.count(f"rank 0/1 on {DEVICE_NAME[then]}") >= 1
    records = _records(run_dir)
    assert [r["epoch"] for r in records if r.get("split") == "val"] == [1, 2]
    assert all(r["loss"] == r["loss"] for r in records if r.get("split") == "train_epoch")
    ckpt = torch.load(run_dir / "checkpoints" / "epoch_2.pth", map_location="cpu",
                      weights_only=True)
    assert ckpt["epoch"] == 2


@pytest.mark.cuda
@pytest.mark.slow
def test_test_predict_and_export_on_the_gpu(gpu_run, tmp_path):
    from zoo.config import load_config
    from zoo.data import prepare_synthetic
    from zoo.infer.export import export_model
    from zoo.infer.predictor import Predictor

    run_dir, _ = gpu_run
    ckpt = str(run_dir / "checkpoints" / "epoch_1.pth")
    cfg_path = str(run_dir / "config.yaml")

    # tools/test_ddp.py on the GPU tests every validation video with every view.
    _ok(run_tool("test_ddp.py", ["--config-file", cfg_path, "LOG.PROGRESS_BAR", "False"],
                 env=DEVICE_ENV["cuda"]))
    test = json.loads((run_dir / "test_metrics.json").read_text())
    val = [r for r in _records(run_dir) if r.get("split") == "val"][-1]
    assert test["num_videos"] == val["num_videos"] and test["views"] == 6, test
    assert 0 <= test["top1"] <= 100
    assert (run_dir / "log_rank0.txt").read_text().count("rank 0/1 on cuda:0") >= 2

    # Predictor on the GPU: the CPU's probabilities, to TF32 convolution precision.
    cfg = prepare_synthetic(load_config(cfg_path, []))
    root = cfg.CONFIG.DATA.VAL_DATA_PATH
    videos = [os.path.join(root, line.rsplit(maxsplit=2)[0])
              for line in open(cfg.CONFIG.DATA.VAL_ANNO_PATH).readlines()[:2]]
    on_gpu = Predictor(cfg, ckpt, device="cuda")
    assert next(on_gpu.model.parameters()).is_cuda
    got, want = on_gpu.predict(videos, 2), Predictor(cfg, ckpt).predict(videos, 2)
    for g, w in zip(got, want):
        g_probs = {t["name"]: t["prob"] for t in g["top"]}
        w_probs = {t["name"]: t["prob"] for t in w["top"]}
        assert g_probs.keys() == w_probs.keys(), (g, w)
        assert all(abs(g_probs[k] - w_probs[k]) <= 1e-2 for k in w_probs), (g, w)

    # The command: --device cuda runs the same model on the GPU.
    done = run_tool("predict.py", ["--config-file", cfg_path, "--checkpoint", ckpt, "--json",
                                   "--device", "cuda", *videos])
    _ok(done)
    printed = json.loads(done.stdout)
    assert [r["top"][0]["name"] for r in printed] == [r["top"][0]["name"] for r in got], printed

    # Export of the GPU-trained checkpoint; the TorchScript file runs on the GPU like eager.
    shape = (1, 3, cfg.CONFIG.DATA.CLIP_LEN, 28, 28)
    res = export_model(cfg.CONFIG.MODEL.NAME, str(tmp_path), ["torchscript"], num_classes=2,
                       pretrained=ckpt, input_shape=shape,
                       model_kwargs=dict(zip(cfg.CONFIG.MODEL.KWARGS[0::2],
                                             cfg.CONFIG.MODEL.KWARGS[1::2])))
    scripted = torch.jit.load(res["torchscript"]["path"], map_location="cuda")
    eager = on_gpu.model.eval()
    x = torch.randn(shape, device="cuda")
    with torch.no_grad():
        torch.testing.assert_close(scripted(x).float(), eager(x).float(), rtol=1e-2, atol=1e-2)
