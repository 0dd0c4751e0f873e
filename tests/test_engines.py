"""Engines that start zoo's processes themselves (docs/multi_node.md, "Engines"): the checkpoint
folder (CONFIG.LOG.CHECKPOINT_DIR, SageMaker's), zoo.train / zoo.test inside a process group the
caller made, and the environment contracts of Kubeflow's PyTorchJob, SageMaker and AzureML
reproduced variable for variable, each with real processes."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers import (
    ROOT,
    TINY_DATA,
    finish_processes,
    free_port,
    on_two_gloo_ranks,
    tool_command,
    toy_args,
    train_killed_at,
)

from zoo.config import load_config
from zoo.launch import setup
from zoo.launch.job import resolve_job
from zoo.train.hooks import HookBase
from zoo.utils import comm

# Variables that would make a process one rank of a job: a test sets exactly those it means.
_JOB_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE", "ZOO_NODE_RANK")
_JOB_PREFIXES = ("TORCHELASTIC_", "PET_", "SM_", "SLURM_", "AZUREML_", "AZ_BATCH")


def _only(env):
    """A process environment holding ``env`` and none of the job variables of the test's own."""
    clean = {k: v for k, v in os.environ.items()
             if k not in _JOB_VARS and not k.startswith(_JOB_PREFIXES)}
    clean.update(env)
    return clean


def _start(cmd, env):
    """Start ``cmd`` (in the checkout) with exactly the job variables ``env``."""
    return subprocess.Popen(cmd, cwd=ROOT, env=_only(env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _cfg(*opts):
    return load_config(None, list(opts))


# ------------------------------------------------------------------- the checkpoint folder
def test_checkpoint_dir_default_config_and_sagemaker():
    cfg = _cfg("LOG.BASE_PATH", "/runs", "LOG.EXP_NAME", "e")
    assert setup.checkpoint_dir(cfg, env={}) == (os.path.join("/runs", "e", "checkpoints"), "")
    sm = {"SM_CURRENT_HOST": "algo-1", "SM_HOSTS": '["algo-1"]'}
    folder, source = setup.checkpoint_dir(cfg, env=sm)
    assert folder == setup.SAGEMAKER_CHECKPOINT_DIR == "/opt/ml/checkpoints"
    assert "SageMaker" in source
    mine = _cfg("LOG.CHECKPOINT_DIR", "/ckpt/run1")
    assert setup.checkpoint_dir(mine, env=sm) == ("/ckpt/run1", "CONFIG.LOG.CHECKPOINT_DIR")


def test_an_unwritable_checkpoint_dir_is_caught_before_training(tmp_path):
    from zoo.cli.output_preflight import check_output_writable
    from zoo.config import ConfigError

    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    cfg = _cfg("LOG.BASE_PATH", str(tmp_path / "runs"), "LOG.CHECKPOINT_DIR",
               str(blocker / "ckpt"))
    with pytest.raises(ConfigError, match="checkpoint folder .* is not a folder; set CONFIG.LOG."
                                          "CHECKPOINT_DIR"):
        check_output_writable(cfg)
    check_output_writable(_cfg("LOG.BASE_PATH", str(tmp_path / "runs"),
                               "LOG.CHECKPOINT_DIR", str(tmp_path / "ckpt")))


# ---------------------------------------------------------- environment contracts, resolved
def _pytorchjob_env(rank, pods, port):
    """What Kubeflow's training operator (PyTorchJob v1) sets in pod ``rank`` of a job of
    ``pods`` pods (one Master, pods - 1 Workers; nprocPerNode unset): the master's service name
    and port, WORLD_SIZE = pods x processes per pod, RANK = 0 for the Master, 1 + index for each
    Worker, and the PET_* variables torchrun reads."""
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(pods),
            "RANK": str(rank), "PET_NNODES": str(pods), "PET_NODE_RANK": str(rank),
            "PET_NPROC_PER_NODE": "auto", "PYTHONUNBUFFERED": "0"}


def _sagemaker_env(hosts=("algo-1",), gpus=0, cpus=2):
    """What SageMaker's training toolkit sets for the entry point (besides torchrun's own), less
    the data channel and output folder (the test's data are generated; its logs stay in
    LOG.BASE_PATH)."""
    return {"SM_CURRENT_HOST": hosts[0], "SM_HOSTS": json.dumps(list(hosts)),
            "SM_NUM_GPUS": str(gpus), "SM_NUM_CPUS": str(cpus), "SM_MODEL_DIR": "/opt/ml/model",
            "SM_CHANNELS": '["training"]', "SM_NUM_NEURONS": "0"}


def _azureml_env(rank, local_rank, world, node_rank, port):
    """What AzureML sets per process for a command job with ``distribution: type: pytorch``."""
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
            "RANK": str(rank), "LOCAL_RANK": str(local_rank), "NODE_RANK": str(node_rank),
            "AZUREML_RUN_ID": "run_1", "AZ_BATCH_MASTER_NODE": f"127.0.0.1:{port}"}


def test_pytorchjob_pods_resolve_to_their_ranks():
    cfg = _cfg()
    for rank in range(3):
        spec = resolve_job(cfg, env=_pytorchjob_env(rank, 3, 23456))
        assert (spec.rank, spec.world_size, spec.local_rank) == (rank, 3, 0)
        assert spec.dist_url == "env://" and spec.num_nodes == 3


def test_azureml_processes_resolve_to_their_ranks():
    cfg = _cfg()
    spec = resolve_job(cfg, env=_azureml_env(rank=3, local_rank=1, world=4, node_rank=1,
                                             port=6105))
    assert (spec.rank, spec.local_rank, spec.world_size) == (3, 1, 4)
    assert spec.dist_url == "env://" and spec.assigned


# ------------------------------------------------------------ environment contracts, for real
@pytest.mark.slow
@pytest.mark.multinode
def test_pytorchjob_two_pods_train_into_the_volume_and_resume_after_a_restart(tmp_path,
                                                                              synth_root):
    """Two "pods" (a Master and a Worker) with exactly the operator's variables run
    tools/train_ddp.py; checkpoints go to the volume's folder; restarted pods resume there."""
    ckpt = tmp_path / "pvc" / "ckpt" / "job"
    port = free_port()

    def pods(epochs):
        args = [*toy_args(tmp_path, synth_root, epochs=epochs), "LOG.CHECKPOINT_DIR", str(ckpt),
                "TRAIN.AUTO_RESUME", "True"]
        procs = [_start(tool_command("train_ddp.py", args),
                               _pytorchjob_env(rank, 2, port)) for rank in (0, 1)]
        results = finish_processes(procs, timeout=180)
        for rc, out in results:
            assert rc == 0, out[-3000:]
        return results

    (_, out0), _ = pods(1)
    assert "environment (RANK/WORLD_SIZE) started this process as rank 0 of 2" in out0
    run = tmp_path / "runs" / "job"
    assert "rank 1/2" in (run / "log_rank1.txt").read_text()
    log0 = (run / "log_rank0.txt").read_text()
    assert f"checkpoints go to and resume from {ckpt} (CONFIG.LOG.CHECKPOINT_DIR)" in log0
    assert sorted(os.listdir(ckpt)) == ["best.pth", "epoch_1.pth", "training.lock"]
    assert not (run / "checkpoints").exists() and (run / "metrics.jsonl").is_file()

    pods(2)  # the operator restarts the pods (here: a longer schedule, same folder)
    log0 = (run / "log_rank0.txt").read_text()
    assert f"resumed from {ckpt / 'epoch_1.pth'}: continuing at epoch 2" in log0
    assert "epoch_2.pth" in os.listdir(ckpt) and not (run / "checkpoints").exists()


# examples/sagemaker/train_entry.py (what the estimator runs), with the container's
# /opt/ml/checkpoints moved for the test.
SAGEMAKER_ENTRY = """
import runpy
import sys

import zoo.launch.setup

zoo.launch.setup.SAGEMAKER_CHECKPOINT_DIR = sys.argv.pop(1)
runpy.run_path({entry!r}, run_name="__main__")
"""


@pytest.mark.slow
@pytest.mark.multinode
def test_sagemaker_torchrun_ranks_and_checkpoint_folder(tmp_path, synth_root):
    """SageMaker's torch_distributed launch: torchrun --nnodes N --nproc_per_node P
    --master_addr algo-1 --master_port 7777 --node_rank i entry.py, with the SM_* variables;
    checkpoints go to /opt/ml/checkpoints (which SageMaker syncs to S3 and copies back on a spot
    restart), and a restart resumes from there."""
    sm_ckpt = tmp_path / "opt_ml_checkpoints"
    entry = tmp_path / "entry.py"
    entry.write_text(SAGEMAKER_ENTRY.format(
        entry=os.path.join(ROOT, "examples", "sagemaker", "train_entry.py")))
    torchrun = shutil.which("torchrun")
    launcher = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]

    def job(epochs):
        cmd = [*launcher, "--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
               "--master_port", str(free_port()), "--node_rank", "0", str(entry), str(sm_ckpt),
               *toy_args(tmp_path, synth_root, epochs=epochs)]  # the entry adds AUTO_RESUME
        [(rc, out)] = finish_processes([_start(cmd, _sagemaker_env())],
                                       timeout=180)
        assert rc == 0, out[-3000:]
        return out

    out = job(1)
    assert "torchrun started this process as rank 0 of 2" in out
    run = tmp_path / "runs" / "job"
    log0 = (run / "log_rank0.txt").read_text()
    assert "rank 1/2" in (run / "log_rank1.txt").read_text()
    assert (f"checkpoints go to and resume from {sm_ckpt} (SageMaker (SM_CURRENT_HOST is set))"
            in log0)
    assert sorted(os.listdir(sm_ckpt)) == ["best.pth", "epoch_1.pth", "training.lock"]
    assert not (run / "checkpoints").exists()
    job(2)  # a spot restart: SageMaker put the checkpoints back; the same command resumes
    assert f"resumed from {sm_ckpt / 'epoch_1.pth'}" in (run / "log_rank0.txt").read_text()


@pytest.mark.slow
@pytest.mark.multinode
def test_azureml_per_process_variables_form_one_job():
    """AzureML's per-process launch (process_count_per_instance 2 on one instance): each process
    gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, NODE_RANK and is one rank."""
    port = free_port()
    args = ["DDP_CONFIG.DIST_BACKEND", "gloo", "DDP_CONFIG.INIT_TIMEOUT", "20"]
    procs = [_start(tool_command("doctor.py", args),
                           _azureml_env(rank, rank, 2, 0, port)) for rank in (0, 1)]
    (rc0, out0), (rc1, out1) = finish_processes(procs, timeout=120)
    assert rc0 == 0 and rc1 == 0, out0 + out1
    assert "rank 1 of 2" in out1 and "nothing is spawned" in out1
    assert "all_reduce over 2 ranks gave 2" in out0


# --------------------------------------------- CHECKPOINT_DIR: train, SIGKILL, run again
@pytest.mark.slow
def test_sigkill_then_auto_resume_from_a_second_folder(tmp_path, synth_root, toy_model_file):
    ckpt = tmp_path / "elsewhere" / "ckpt"
    args = ["--extra-modules", toy_model_file, "DDP_CONFIG.NUM_CPU_PROCS", "2",
            "MODEL.NAME", "toy_conv3d", "TRAIN.EPOCH_NUM", "2", "TRAIN.AUTO_RESUME", "True",
            *TINY_DATA, "DATA.SYNTHETIC.TRAIN_PER_CLASS", "16", "TRAIN.BATCH_SIZE", "8",
            "DATA.SYNTHETIC.ROOT", synth_root,
            "LOG.BASE_PATH", str(tmp_path / "runs"), "LOG.CHECKPOINT_DIR", str(ckpt)]
    # 32 videos, 2 ranks x batch 8: 2 steps per epoch; killed after step 3 (mid-epoch 2).
    train_killed_at(tmp_path, args, kill_at=3, exp="job")
    run = tmp_path / "runs" / "job"
    assert sorted(os.listdir(ckpt)) == ["best.pth", "epoch_1.pth", "training.lock"]
    # What a kill during a checkpoint write leaves: the next run removes it and says so.
    (ckpt / "epoch_2.pth.tmp.4242").write_bytes(bytes(1000))
    from helpers import run_tool

    r = run_tool("train_ddp.py", [*args, "LOG.EXP_NAME", "job"])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    log = (run / "log_rank0.txt").read_text()
    assert (f"removed epoch_2.pth.tmp.4242 (1000 B) from {ckpt}: a checkpoint write cut short "
            "when an earlier run of this job was killed") in log
    assert f"resumed from {ckpt / 'epoch_1.pth'}: continuing at epoch 2" in log
    assert sorted(os.listdir(ckpt)) == ["best.pth", "epoch_1.pth", "epoch_2.pth", "training.lock"]
    # The logs, metrics and config stay in BASE_PATH/EXP_NAME; no checkpoint is written there.
    assert {"config.yaml", "metrics.jsonl", "log_rank0.txt", "log_rank1.txt"} <= set(
        os.listdir(run))
    assert not (run / "checkpoints").exists()
    # tools/test_ddp.py finds the checkpoint in the same folder.
    t = run_tool("test_ddp.py", [*args, "LOG.EXP_NAME", "job"])
    assert t.returncode == 0, t.stdout[-3000:] + t.stderr[-3000:]
    result = json.loads((run / "test_metrics.json").read_text())
    assert result["checkpoint"] == str(ckpt / "epoch_2.pth")


# ------------------------------------------ zoo.train / zoo.test in the caller's process group
class Recorder:
    """A hook that does not subclass HookBase: zoo.train accepts it and calls what it has."""

    def __init__(self):
        self.events = []

    def after_validation(self, metrics):
        self.events.append(("val", metrics["epoch"], round(metrics["top1"], 4)))

    def after_checkpoint(self, path):
        self.events.append(("ckpt", os.path.basename(path) if path else None))


def _train_in_my_group(rank):
    """Run in a 2-rank gloo group made by on_two_gloo_ranks (the caller's own group)."""
    import zoo
    from zoo.utils import comm

    base = os.environ["ZOO_TEST_ENGINES_BASE"]
    cfg = os.path.join(base, "job.yaml")
    rec = Recorder()
    out = zoo.train(cfg, hooks=[rec], overrides=["TRAIN.EPOCH_NUM", "2"])
    tested = zoo.test(cfg, overrides=["TRAIN.EPOCH_NUM", "2"])
    return {"events": rec.events, "rank": comm.get_rank(), "world": comm.get_world_size(),
            "top1": out["val"]["top1"], "iteration": out["iteration"],
            "test_top1": tested["top1"], "checkpoint_dir": out["checkpoint_dir"]}


def _write_job(tmp_path, synth_root, toy_model_file, monkeypatch):
    """job.yaml in ``tmp_path``: the toy model on the tiny synthetic data, outputs in
    ``tmp_path`` (runs/mine, ckpt); its folder is what the ranks' functions read."""
    import yaml

    tree = {"EXTRA_MODULES": [toy_model_file], "MODEL": {"NAME": "toy_conv3d"}}
    opts = [*TINY_DATA, "DATA.SYNTHETIC.ROOT", synth_root, "LOG.BASE_PATH",
            str(tmp_path / "runs"), "LOG.EXP_NAME", "mine", "LOG.CHECKPOINT_DIR",
            str(tmp_path / "ckpt"), "LOG.PROGRESS_BAR", "False"]
    for key, value in zip(opts[0::2], opts[1::2]):  # "A.B.C v" -> {"A": {"B": {"C": v}}}
        *path, last = key.split(".")
        node = tree
        for part in path:
            node = node.setdefault(part, {})
        node[last] = yaml.safe_load(value)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({"CONFIG": tree}))
    monkeypatch.setenv("ZOO_TEST_ENGINES_BASE", str(tmp_path))


@pytest.mark.slow
def test_zoo_train_and_test_inside_a_process_group_the_caller_made(tmp_path, synth_root,
                                                                  toy_model_file, monkeypatch):
    _write_job(tmp_path, synth_root, toy_model_file, monkeypatch)
    r0, r1 = on_two_gloo_ranks(_train_in_my_group, tmp_path)
    assert (r0["rank"], r0["world"], r1["rank"], r1["world"]) == (0, 2, 1, 2)
    # after_validation on every rank with the same numbers; the checkpoint path on rank 0 only.
    assert [e for e in r0["events"] if e[0] == "val"] == [e for e in r1["events"] if e[0] ==
                                                           "val"]
    assert [e for e in r0["events"] if e[0] == "ckpt"] == [("ckpt", "epoch_1.pth"),
                                                           ("ckpt", "epoch_2.pth")]
    assert [e for e in r1["events"] if e[0] == "ckpt"] == [("ckpt", None), ("ckpt", None)]
    assert r0["events"][0][0] == "val"  # validation comes before the epoch's checkpoint
    assert r0["iteration"] == r1["iteration"] > 0 and r0["top1"] == r1["top1"]
    assert r0["checkpoint_dir"] == str(tmp_path / "ckpt")
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["best.pth", "epoch_1.pth", "epoch_2.pth",
                                                    "training.lock"]
    assert r0["test_top1"] == r1["test_top1"]
    run = tmp_path / "runs" / "mine"
    assert "GPU_WORLD_SIZE: 2" in (run / "config.yaml").read_text()
    assert json.loads((run / "test_metrics.json").read_text())["top1"] == r0["test_top1"]


class AskToStopOnRankOne(HookBase):
    """Asks, on rank 1 only, to stop after the first validation."""

    def after_validation(self, metrics):
        if comm.get_rank() == 1:
            self.trainer.request_stop("rank 1's hook asked")


def _stop_on_one_rank_then_resume(rank):
    """Run in a 2-rank gloo group: a 3-epoch run that one rank's hook stops after epoch 1, then
    the same job resumed without the hook."""
    import zoo

    cfg = os.path.join(os.environ["ZOO_TEST_ENGINES_BASE"], "job.yaml")
    stopped = zoo.train(cfg, hooks=[AskToStopOnRankOne()], overrides=["TRAIN.EPOCH_NUM", "3"])
    resumed = zoo.train(cfg, overrides=["TRAIN.EPOCH_NUM", "3", "TRAIN.AUTO_RESUME", "True"])
    return {"stopped": (stopped["epochs"], stopped["iteration"]),
            "resumed": (resumed["epochs"], resumed["iteration"])}


@pytest.mark.slow
def test_a_stop_one_rank_asks_for_ends_every_rank_after_the_same_checkpointed_epoch(
        tmp_path, synth_root, toy_model_file, monkeypatch):
    _write_job(tmp_path, synth_root, toy_model_file, monkeypatch)
    r0, r1 = on_two_gloo_ranks(_stop_on_one_rank_then_resume, tmp_path)
    assert r0 == r1
    epochs, steps = r0["stopped"]
    assert epochs == 1 and steps > 0
    assert r0["resumed"] == (3, 3 * steps)  # the resumed run trained epochs 2 and 3
    assert sorted(n for n in os.listdir(tmp_path / "ckpt") if n.startswith("epoch_")) == [
        "epoch_1.pth", "epoch_2.pth", "epoch_3.pth"]
    log = (tmp_path / "runs" / "mine" / "log_rank0.txt").read_text()
    assert "stopping after epoch 1 of 3: rank 1's hook asked" in log


def test_zoo_train_without_the_process_group_the_environment_promises(monkeypatch):
    from zoo.launch.topology import LaunchError

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(LaunchError, match="no process group: call torch.distributed"):
        with setup.this_process(_cfg()):
            pass


@pytest.mark.slow  # a fresh interpreter
def test_zoo_train_is_the_package_and_import_zoo_stays_torch_free():
    code = ("import sys, zoo; assert 'torch' not in sys.modules; f = zoo.train; "
            "assert callable(f) and f is sys.modules['zoo.train']; assert 'torch' not in "
            "sys.modules; import zoo.train.hooks; assert zoo.train is f; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


# ------------------------------------------------------------------------------ the examples
def _overrides(words):
    """``--config-file FILE KEY VALUE ...`` of a command line -> (FILE, [KEY, VALUE, ...])."""
    i = words.index("--config-file")
    return words[i + 1], words[i + 2:]


def test_pytorchjob_example_matches_the_operator_and_zoo():
    import yaml

    job = yaml.safe_load(open(os.path.join(ROOT, "examples", "kubernetes", "pytorchjob.yaml")))
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] >= 1
    for spec in replicas.values():
        pod = spec["template"]["spec"]
        [container] = pod["containers"]
        assert container["name"] == "pytorch"  # the name the operator sets the variables in
        assert [p["name"] for p in container["ports"]] == ["pytorchjob-port"]
        config_file, opts = _overrides(container["command"])
        cfg = load_config(os.path.join(ROOT, config_file), opts)
        assert cfg.CONFIG.LOG.CHECKPOINT_DIR.startswith("/ckpt/")
        assert cfg.CONFIG.TRAIN.AUTO_RESUME is True
        # SIGTERM -> checkpoint within PREEMPT_GRACE, before Kubernetes' SIGKILL
        assert pod["terminationGracePeriodSeconds"] == cfg.CONFIG.TRAIN.PREEMPT_GRACE + 30
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert "/ckpt" in mounts and "/data" in mounts
        assert spec["restartPolicy"] == "OnFailure"  # exit 75 must be restarted


def test_azureml_example_is_a_pytorch_command_job_zoo_accepts():
    import yaml

    job = yaml.safe_load(open(os.path.join(ROOT, "examples", "azureml", "job.yaml")))
    assert job["type"] == "command" and job["distribution"]["type"] == "pytorch"
    assert job["distribution"]["process_count_per_instance"] >= 1
    assert job["resources"]["instance_count"] >= 1
    words = job["command"].split()
    config_file, opts = _overrides(words)
    opts = [w.replace("${{inputs.data}}", "/mnt/data").replace("${{outputs.checkpoints}}",
                                                               "/mnt/ckpt") for w in opts]
    cfg = load_config(os.path.join(ROOT, config_file), opts)
    assert cfg.CONFIG.LOG.CHECKPOINT_DIR == "/mnt/ckpt" and cfg.CONFIG.TRAIN.AUTO_RESUME
    assert job["outputs"]["checkpoints"]["mode"] == "rw_mount"


def test_sagemaker_example_asks_for_torchrun_and_the_checkpoint_sync():
    import ast

    source = open(os.path.join(ROOT, "examples", "sagemaker", "estimator.py")).read()
    call = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)
                and getattr(n.func, "id", "") == "PyTorch")
    kw = {k.arg: k.value for k in call.keywords}
    assert ast.literal_eval(kw["distribution"]) == {"torch_distributed": {"enabled": True}}
    assert ast.literal_eval(kw["checkpoint_local_path"]) == setup.SAGEMAKER_CHECKPOINT_DIR
    assert ast.literal_eval(kw["use_spot_instances"]) is True and "checkpoint_s3_uri" in kw
    entry = ast.literal_eval(kw["entry_point"])
    assert os.path.isfile(os.path.join(ROOT, entry))


# ------------------------------------------- zoo.integrations.ray without Ray (a stand-in)
class _FakeCheckpoint:
    def __init__(self, path):
        self.path = path

    @classmethod
    def from_directory(cls, path):
        return cls(path)

    def as_directory(self):
        import contextlib

        return contextlib.nullcontext(self.path)


class _FakeRayTrain:
    Checkpoint = _FakeCheckpoint

    def __init__(self, given=None):
        self.reports, self.given = [], given

    def report(self, metrics, checkpoint=None):
        # What Ray would persist: the folder's files, read while report runs.
        files = sorted(os.listdir(checkpoint.path)) if checkpoint else None
        self.reports.append((dict(metrics), files))

    def get_checkpoint(self):
        return self.given


def test_ray_report_sends_each_checkpoint_with_the_last_validation(tmp_path, monkeypatch):
    import types

    from zoo.integrations import ray as zray

    fake = _FakeRayTrain()
    monkeypatch.setattr(zray, "_ray_train", lambda: fake)
    ckpt = tmp_path / "epoch_1.pth"
    ckpt.write_bytes(b"weights")
    hook = zray.RayReport()
    hook.trainer = types.SimpleNamespace(epoch=0, iteration=4)
    hook.after_validation({"split": "val", "epoch": 1, "top1": 50.0, "loss": 0.7})
    hook.after_checkpoint(str(ckpt))  # rank 0
    hook.after_epoch()  # nothing left to report
    hook.trainer.epoch, hook.trainer.iteration = 1, 8
    hook.after_validation({"split": "val", "epoch": 2, "top1": 75.0, "loss": 0.5})
    hook.after_epoch()  # validated, no checkpoint this epoch (SAVE_FREQ > 1)
    hook.after_checkpoint(None)  # another rank: the same report, no checkpoint
    assert fake.reports == [
        ({"epoch": 1, "iteration": 4, "top1": 50.0, "loss": 0.7}, ["epoch_1.pth"]),
        ({"epoch": 2, "iteration": 8, "top1": 75.0, "loss": 0.5}, None),
        ({"epoch": 2, "iteration": 8}, None),
    ]
    assert ckpt.read_bytes() == b"weights"  # reported through a link or copy, left in place


def test_ray_checkpoint_config_resumes_from_the_handed_back_checkpoint(tmp_path, monkeypatch):
    from zoo.integrations import ray as zray

    given = tmp_path / "ray_storage" / "checkpoint_000001"
    given.mkdir(parents=True)
    (given / "epoch_3.pth").write_bytes(b"3")
    (given / "notes.txt").write_text("not a checkpoint")
    monkeypatch.setattr(zray, "_ray_train", lambda: _FakeRayTrain(_FakeCheckpoint(str(given))))
    cfg, resumed = zray.checkpoint_config(_cfg("TRAIN.AUTO_RESUME", "False"),
                                          folder=str(tmp_path / "local"))
    assert cfg.CONFIG.LOG.CHECKPOINT_DIR == str(tmp_path / "local")
    assert cfg.CONFIG.TRAIN.AUTO_RESUME is True and cfg.CONFIG.TRAIN.RESUME_EPOCH == -1
    assert os.listdir(tmp_path / "local") == ["epoch_3.pth"]
    assert resumed == f"{given} (epoch_3.pth)"
    monkeypatch.setattr(zray, "_ray_train", lambda: _FakeRayTrain(None))
    fresh, resumed = zray.checkpoint_config(_cfg("TRAIN.AUTO_RESUME", "False"),
                                            folder=str(tmp_path / "fresh"))
    assert resumed is None and fresh.CONFIG.TRAIN.AUTO_RESUME is False


def test_ray_missing_says_how_to_install_it(monkeypatch):
    import builtins

    from zoo.integrations import ray as zray
    from zoo.utils.errors import UserError

    real = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray.train" or name.startswith("ray"):
            raise ImportError("No module named 'ray'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(UserError, match=r"pip install 'zoo\[ray\]'"):
        zray._ray_train()
