"""Every user error ends with exactly one ``error:`` line and a non-zero exit, in every launch mode.

The tools run as a user runs them (a subprocess; the console is what it prints). Launch modes: one
process (DDP_CONFIG.DISTRIBUTED False), two gloo processes spawned by zoo's launcher, torchrun,
and a Slurm job step (its environment, two tasks). Tracebacks belong in the rank's log file
(BASE_PATH/EXP_NAME/log_rank{N}.txt), never on the console.
"""

import os
import socket
import subprocess
import sys

import pytest
from helpers import ROOT, TOY_MODEL, run_tool
from videos_for_tests import ramp_frames, write

BUGGY_MODEL = '''
import torch.nn as nn
from zoo.models import MODEL_REGISTRY


class Buggy(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.fc = nn.Linear(3, num_classes)

    def forward(self, x):
        # A plain KeyError (only a registry's KeyError is a user error), raised in the user's code.
        return self.fc(x.mean(dim=(2, 3, 4))) + {}["no such key"]


@MODEL_REGISTRY.register()
def toy_buggy(num_classes=10, **kwargs):
    return Buggy(num_classes)
'''

NUM_VIDEOS = 6


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Six 8-frame videos of three classes, their list, and the user model files."""
    root = tmp_path_factory.mktemp("user_errors")
    videos = root / "videos"
    videos.mkdir()
    frames = ramp_frames(8)
    lines = []
    for i in range(NUM_VIDEOS):
        write(str(videos / f"v{i}.mp4"), frames)
        lines.append(f"v{i}.mp4 8 {i % 3}")
    (root / "train.txt").write_text("\n".join(lines) + "\n")
    (root / "toy.py").write_text(TOY_MODEL)
    (root / "buggy.py").write_text(BUGGY_MODEL)
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_mode(mode: str):
    if mode == "one":
        return ["DDP_CONFIG.DISTRIBUTED", "False"]
    return ["DDP_CONFIG.NUM_CPU_PROCS", "2",
            "DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{free_port()}"]


def args_for(data, out, train_list=None, data_path=None, model="toy_conv3d", module="toy.py"):
    train_list = str(train_list or data / "train.txt")
    data_path = str(data_path or data / "videos")
    return [
        "--extra-modules", str(data / module), "MODEL.NAME", model,
        "DATA.TRAIN_ANNO_PATH", train_list, "DATA.TRAIN_DATA_PATH", data_path,
        "DATA.VAL_ANNO_PATH", train_list, "DATA.VAL_DATA_PATH", data_path,
        "DATA.NUM_CLASSES", "3", "DATA.CLIP_LEN", "4", "DATA.FRAME_RATE", "1",
        "DATA.CROP_SIZE", "28", "DATA.SHORT_SIDE_SIZE", "32",
        "DATA.TRAIN_SHORT_SIDE_RANGE", "[32, 36]", "DATA.NUM_WORKERS", "0",
        "DATA.TEST_NUM_SEGMENT", "1", "DATA.TEST_NUM_CROP", "1",
        "TRAIN.BATCH_SIZE", "2", "VAL.BATCH_SIZE", "2", "TEST.BATCH_SIZE", "2",
        "TRAIN.EPOCH_NUM", "1", "LOG.BASE_PATH", str(out), "LOG.EXP_NAME", "run",
    ]


def assert_one_error_line(r, *needles) -> str:
    """Exactly one console line starts with ``error:``, it contains ``needles``, no traceback is
    printed and the exit code is non-zero; returns the line."""
    console = r.stdout + r.stderr
    errors = [ln for ln in console.splitlines() if ln.startswith("error:")]
    assert r.returncode != 0, console
    assert len(errors) == 1, console
    assert "Traceback" not in console, console
    for needle in needles:
        assert needle in errors[0], console
    return errors[0]


def rank_log(out, rank=0) -> str:
    return (out / "run" / f"log_rank{rank}.txt").read_text()


# --------------------------------------------------------------- data errors caught by preflight
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["one", "two"])
def test_missing_data_path(data, tmp_path, mode):
    r = run_tool("train_ddp.py", [*args_for(data, tmp_path, data_path=tmp_path / "nowhere"),
                                  *launch_mode(mode)])
    assert_one_error_line(r, "CONFIG.DATA.TRAIN_DATA_PATH", "nowhere", "does not exist")
    # Found before any worker started: no worker wrote a log.
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_list_whose_videos_are_not_in_the_data_folder(data, tmp_path):
    other = tmp_path / "empty_folder"
    other.mkdir()
    r = run_tool("train_ddp.py", [*args_for(data, tmp_path, data_path=other),
                                  *launch_mode("one")])
    assert_one_error_line(r, "CONFIG.DATA.TRAIN_DATA_PATH", "v0.mp4")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["one", "two"])
def test_empty_list(data, tmp_path, mode):
    empty = tmp_path / "empty.txt"
    empty.write_text("# no videos yet\n")
    r = run_tool("train_ddp.py", [*args_for(data, tmp_path, train_list=empty), *launch_mode(mode)])
    assert_one_error_line(r, "empty.txt", "no videos")


@pytest.mark.slow
def test_missing_list(data, tmp_path):
    r = run_tool("train_ddp.py", [*args_for(data, tmp_path, train_list=tmp_path / "gone.txt"),
                                  *launch_mode("one")])
    assert_one_error_line(r, "gone.txt", "does not exist")


@pytest.mark.slow
def test_header_line(data, tmp_path):
    lst = tmp_path / "with_header.txt"
    lst.write_text("path num_frames label\n" + (data / "train.txt").read_text())
    r = run_tool("train_ddp.py", [*args_for(data, tmp_path, train_list=lst), *launch_mode("one")])
    # A list reader may recognise the header (LIST_FORMAT auto) or name it; never a traceback.
    if r.returncode != 0:
        assert_one_error_line(r, "with_header.txt")
    else:
        assert "Traceback" not in r.stdout + r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("mode,batch,per_process", [("one", 7, 6), ("two", 4, 3)])
def test_batch_size_larger_than_the_videos_per_process(data, tmp_path, mode, batch, per_process):
    r = run_tool("train_ddp.py", [*args_for(data, tmp_path), *launch_mode(mode),
                                  "TRAIN.BATCH_SIZE", str(batch)])
    assert_one_error_line(r, f"CONFIG.TRAIN.BATCH_SIZE = {batch}", f"the {per_process} training")
    assert not (tmp_path / "run").exists()


def test_batch_size_check_agrees_with_torchs_sampler_and_drop_last():
    """The preflight refuses exactly the settings where rank 0's DataLoader (DistributedSampler
    without drop_last, DataLoader with drop_last, as zoo.data.build_loader uses them) yields no
    batch; checked against torch's own classes."""
    from torch.utils.data import DataLoader, DistributedSampler

    from zoo.cli.data_preflight import check_batch_size
    from zoo.config import ConfigError, load_config

    configs = {b: load_config(None, ["TRAIN.BATCH_SIZE", str(b)], validate=False)
               for b in range(1, 7)}
    for videos in range(1, 9):
        for processes in range(1, 4):
            for batch, cfg in configs.items():
                sampler = DistributedSampler(range(videos), num_replicas=processes, rank=0,
                                             shuffle=False, drop_last=False)
                loader = DataLoader(range(videos), batch_size=batch, sampler=sampler,
                                    drop_last=True)
                try:
                    check_batch_size(cfg, videos, processes)
                    refused = False
                except ConfigError:
                    refused = True
                assert refused == (len(loader) == 0), (videos, processes, batch)


@pytest.mark.slow
def test_label_above_num_classes(data, tmp_path):
    r = run_tool("train_ddp.py", [*args_for(data, tmp_path), *launch_mode("one"),
                                  "DATA.NUM_CLASSES", "2"])
    assert_one_error_line(r, "labels up to 2", "CONFIG.DATA.NUM_CLASSES = 2")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["one", "two"])
def test_validation_classes_named_otherwise_than_training(data, tmp_path, mode):
    for split, names in (("train", "a\nb\nc\n"), ("val", "a\nc\nb\n")):
        (tmp_path / split).mkdir()
        (tmp_path / split / "list.txt").write_text((data / "train.txt").read_text())
        (tmp_path / split / "classes.txt").write_text(names)
    args = args_for(data, tmp_path, train_list=tmp_path / "train" / "list.txt")
    args[args.index("DATA.VAL_ANNO_PATH") + 1] = str(tmp_path / "val" / "list.txt")
    r = run_tool("train_ddp.py", [*args, *launch_mode(mode)])
    assert_one_error_line(r, "CONFIG.DATA.VAL_ANNO_PATH", "class 1 is 'c' there but 'b'")
    assert not (tmp_path / "run").exists()  # found before any worker started


# ------------------------------------------------------ errors inside the workers: log has them
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["one", "two"])
def test_error_in_a_worker_is_one_line_with_the_traceback_in_the_rank_log(data, tmp_path, mode):
    # Nothing trained: test_ddp.py finds no checkpoint inside the worker.
    r = run_tool("test_ddp.py", [*args_for(data, tmp_path), *launch_mode(mode)])
    assert_one_error_line(r, "no checkpoint in")
    log = rank_log(tmp_path)
    assert "Traceback" in log and "FileNotFoundError" in log


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["one", "two"])
def test_an_error_of_the_users_code_says_where_it_was_raised_and_where_its_traceback_is(
        data, tmp_path, mode):
    temp = tmp_path / "temp"  # the job's temporary folder: what it leaves there is seen
    temp.mkdir()
    r = run_tool("train_ddp.py", [*args_for(data, tmp_path, model="toy_buggy", module="buggy.py"),
                                  *launch_mode(mode)], env={"TMPDIR": str(temp)})
    line = assert_one_error_line(r, f"KeyError: no such key raised in {data / 'buggy.py'}:",
                                 "(your code, not zoo's; full traceback in")
    assert "unexpected" not in line and "internal error" not in line
    log_path = line.split("full traceback in ")[1].rstrip(")")
    assert os.path.dirname(log_path) == str(tmp_path / "run")
    with open(log_path) as f:
        log = f.read()
    assert "Traceback" in log and "in forward" in log
    # torch hands each spawned worker a file to write its traceback to; the launcher, which
    # reported it, removes it.
    assert [p.name for p in temp.iterdir() if p.name.startswith("pytorch-errorfile-")] == []


# --------------------------------------------------------------- torchrun and Slurm job steps
def _torchrun(args, timeout=180):
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_port", str(free_port()), os.path.join(ROOT, "tools", args[0]), *args[1:]],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _zoo_frames(console: str):
    """Traceback lines of zoo's own code (torchrun prints a traceback of its agent, not ours)."""
    return [ln for ln in console.splitlines()
            if ln.strip().startswith("File ") and os.path.join(ROOT, "zoo") in ln]


def _assert_one_error_under_a_launcher(r, *needles):
    console = r.stdout + r.stderr
    errors = [ln for ln in console.splitlines() if ln.startswith("error:")]
    assert r.returncode != 0, console
    assert len(errors) == 1, console
    assert not _zoo_frames(console), console
    for needle in needles:
        assert needle in errors[0], console


@pytest.mark.slow
def test_torchrun_preflight_error(data, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    r = _torchrun(["train_ddp.py", *args_for(data, tmp_path, train_list=empty)])
    _assert_one_error_under_a_launcher(r, "empty.txt", "no videos")


@pytest.mark.slow
def test_torchrun_worker_error(data, tmp_path):
    r = _torchrun(["test_ddp.py", *args_for(data, tmp_path)])
    _assert_one_error_under_a_launcher(r, "rank 0 of 2", "no checkpoint in")
    for rank in (0, 1):
        assert "FileNotFoundError" in rank_log(tmp_path, rank)


@pytest.mark.slow
def test_slurm_job_step_worker_error(data, tmp_path):
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, PYTHONUNBUFFERED="1", SLURM_PROCID=str(rank),
                   SLURM_LOCALID=str(rank), SLURM_NTASKS="2", SLURM_NNODES="1",
                   SLURM_NODEID="0", SLURM_STEP_ID="0",
                   SLURM_JOB_NODELIST="localhost", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
            env.pop(key, None)
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tools", "test_ddp.py"), *args_for(data, tmp_path)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=180)[0] for p in procs]
    console = "".join(outputs)
    errors = [ln for ln in console.splitlines() if ln.startswith("error:")]
    assert all(p.returncode != 0 for p in procs), console
    assert len(errors) == 1 and "no checkpoint in" in errors[0], console
    assert "Traceback" not in console, console
    assert "FileNotFoundError" in rank_log(tmp_path, 1)


def test_what_is_a_user_error():
    from zoo.config import ConfigError
    from zoo.data.lists.annotations import AnnotationError
    from zoo.models import MODEL_REGISTRY
    from zoo.utils.errors import is_user_error, one_line

    with pytest.raises(KeyError) as miss:
        MODEL_REGISTRY.get("no_such_model_anywhere")
    assert is_user_error(miss.value)
    assert one_line(miss.value).startswith("No object named 'no_such_model_anywhere'")
    assert is_user_error(ConfigError("x")) and is_user_error(AnnotationError("x"))
    assert is_user_error(FileNotFoundError("x"))
    from zoo.models.weights import WeightsError  # an offline download, a file of unknown format

    assert is_user_error(WeightsError("x"))
    # A KeyError that is not a registry's, and other exceptions, are bugs.
    assert not is_user_error(KeyError("weight"))
    assert not is_user_error(ValueError("x")) and not is_user_error(RuntimeError("x"))


def test_every_user_error_is_a_user_error_and_keeps_its_builtin_base():
    from zoo.config import ConfigError
    from zoo.data.decode.base import DecodeError, DecoderLibraryError
    from zoo.data.lists.annotations import AnnotationError
    from zoo.data.robust import TooManyBadVideos
    from zoo.infer.export import ExportError
    from zoo.launch.topology import LaunchError
    from zoo.models.weights import WeightsError
    from zoo.models.weights.convert.common import ConversionError
    from zoo.utils.checkpoint_io import CheckpointError, CheckpointWriteError
    from zoo.utils.errors import (
        NonFiniteLoss,
        UsageError,
        UserError,
        exit_code,
        is_user_error,
    )
    from zoo.utils.registry import Registry, RegistryError

    builtin = {ConfigError: ValueError, AnnotationError: ValueError, UsageError: ValueError,
               DecodeError: RuntimeError, DecoderLibraryError: RuntimeError,
               TooManyBadVideos: RuntimeError, CheckpointError: RuntimeError,
               CheckpointWriteError: RuntimeError, LaunchError: RuntimeError,
               ConversionError: RuntimeError, WeightsError: RuntimeError,
               NonFiniteLoss: RuntimeError, ExportError: RuntimeError, RegistryError: KeyError}
    for cls, base in builtin.items():
        assert issubclass(cls, UserError) and issubclass(cls, base), cls
        assert is_user_error(cls("x"))
        assert exit_code(cls("x")) == (2 if cls in (ConfigError, UsageError) else 1), cls
    with pytest.raises(RegistryError, match="No object named 'b'") as miss:
        Registry("THING").get("b")
    assert isinstance(miss.value, KeyError)  # `except KeyError` in user code still catches it
    assert exit_code(RuntimeError("x")) == 1 and exit_code(FileNotFoundError("x")) == 1


def test_the_errors_module_is_a_leaf():
    # In a fresh interpreter: importing it loads no other part of zoo (but its logger).
    code = ("import sys, zoo.utils.errors; print(' '.join(sorted(m for m in sys.modules if "
            "m.startswith('zoo.') and m not in ('zoo.utils', 'zoo.utils.errors', "
            "'zoo.utils.logger', 'zoo.utils.moved', 'zoo.utils.lazy'))) or 'none')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "none", r.stdout + r.stderr


@pytest.mark.parametrize("local_rank, waits", [("0", False), ("1", True)])
def test_a_quiet_failed_rank_leaves_the_console_rank_time(monkeypatch, tmp_path, capsys,
                                                          local_rank, waits):
    # torchrun ends the job as soon as one process fails: a rank that does not print the error
    # line must not end before the node's first process, which prints it, had time to.
    from zoo.cli import job as cli

    slept = []
    monkeypatch.setenv("LOCAL_RANK", local_rank)
    monkeypatch.setattr(cli.time, "sleep", slept.append)
    code = cli.run(lambda cfg: None, "test", argv=["--config-file", str(tmp_path / "no.yaml")])
    assert code != 0
    assert slept == ([cli.CONSOLE_GRACE_S] if waits else [])
    assert ("error:" in capsys.readouterr().err) is not waits


def test_output_cut_short_by_its_reader_ends_quietly():
    """``zoo-list-models --weights | head -1``: the closed pipe is not reported as a bug. The pipe
    holds one page, so the command is still writing when its reader goes away."""
    import fcntl

    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "tools", "list_models.py"),
                             "--weights", "--markdown"], stdout=write_end,
                            stderr=subprocess.PIPE)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        first = reader.readline()
    # the reader is gone, as after `head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert first.startswith(b"| model |") and err == ""


@pytest.mark.parametrize("message, says", [
    ("DataLoader worker (pid 4242) is killed by signal: Killed. ",
     "data-loader worker (pid 4242) was killed by signal Killed, from outside zoo: most often "
     "the kernel's out-of-memory killer (see dmesg)"),
    ("DataLoader worker (pid 77) is killed by signal: Bus error. It is possible that dataloader's "
     "workers are out of shared memory.", "shared memory (/dev/shm) ran out"),
    ("DataLoader worker (pid(s) 12, 13) exited unexpectedly", "(pid 12, 13) exited unexpectedly"),
])
def test_a_loader_worker_killed_from_outside_is_not_called_a_bug(message, says, capsys):
    """The kernel's OOM killer (or a full /dev/shm) ending a loader worker was reported as
    'unexpected RuntimeError ... an internal error, please report it'."""
    from zoo.utils.errors import report_failure

    assert report_failure(RuntimeError(message)) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: data-loader worker") and says in err
    assert "internal error" not in err and err.count("\n") == 1


USER_CODE = '''
class Boom:  # a hook passed to zoo.train
    def after_epoch(self):
        raise RuntimeError("boom from my hook\\nmore about it")


def forward(x):
    import torch

    return torch.zeros(2, 3) @ x  # the library's error, where the user's code called it
'''


def _user_module(tmp_path):
    import importlib.util

    path = tmp_path / "my_code.py"
    path.write_text(USER_CODE)
    spec = importlib.util.spec_from_file_location("zoo_test_my_code", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


def test_an_error_of_the_users_code_is_not_called_a_bug_and_names_the_hook(tmp_path, capsys):
    import torch

    from zoo.train.trainer import Trainer
    from zoo.utils.errors import report_failure

    path, module = _user_module(tmp_path)
    trainer = Trainer.__new__(Trainer)  # only its hooks
    trainer.hooks = [module.Boom()]
    with pytest.raises(RuntimeError) as e:
        trainer._call("after_epoch")
    assert report_failure(e.value, console=True) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]  # after the traceback (no log)
    assert line == (f"error: RuntimeError: boom from my hook raised in {path}:4 (your code in "
                    "hook Boom.after_epoch, not zoo's; traceback above)")
    with pytest.raises(RuntimeError) as e:
        module.forward(torch.zeros(4, 1))
    report_failure(e.value, console=True)
    assert f"raised in {path}:10 (your code, not zoo's" in capsys.readouterr().err


def test_an_error_of_zoos_code_is_still_called_a_bug(capsys):
    from zoo.launch.launch import _error_line
    from zoo.utils.errors import report_failure

    with pytest.raises(AttributeError) as e:
        _error_line(None)  # raised inside zoo
    report_failure(e.value, console=True)
    err = capsys.readouterr().err
    assert "error: unexpected AttributeError" in err and "an internal error, please report" in err
