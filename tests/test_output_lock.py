"""One training job per output folder: global rank 0 holds ``BASE_PATH/EXP_NAME`` for the run;
a second job on it stops with one line naming the folder, the holder and what to do."""

import errno
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from helpers import ROOT, error_line, finish_processes, start_process, tool_command, toy_args

from zoo.launch import output_lock
from zoo.launch.output_lock import OutputFolderBusy, acquire, release

HOLD = """
import sys, time
from zoo.launch.output_lock import acquire
acquire(sys.argv[1])
print("held", flush=True)
time.sleep(600)
"""


def _holder(folder):
    """A process that holds ``folder``'s lock until it is killed (started once it holds it)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _kill(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_a_second_job_is_refused_naming_the_folder_the_holder_and_the_fix(tmp_path):
    folder = tmp_path / "runs" / "job"
    holder = _holder(folder)
    try:
        with pytest.raises(OutputFolderBusy) as refused:
            acquire(str(folder))
    finally:
        _kill(holder)
    line = str(refused.value)
    assert "\n" not in line
    assert f"the output folder {folder} " in line and "in use by another training job" in line
    assert f"pid {holder.pid} on host {socket.gethostname()}" in line, line
    assert "CONFIG.LOG.EXP_NAME" in line and "wait for it to end or stop it" in line


def test_the_lock_goes_with_a_killed_holder_and_the_next_job_takes_it(tmp_path):
    folder = tmp_path / "job"
    _kill(_holder(folder))
    fd = acquire(str(folder))  # the kernel freed the dead holder's lock
    assert fd is not None
    assert f"pid {os.getpid()} " in (folder / output_lock.LOCK_NAME).read_text()
    release(fd)
    release(acquire(str(folder)))  # released: taken again


def test_a_forked_child_does_not_keep_the_lock(tmp_path):
    """A DataLoader worker forked from rank 0 must not hold the folder after rank 0 is gone."""
    folder = tmp_path / "job"
    fd = acquire(str(folder))
    ready, told = os.pipe()
    child = os.fork()
    if child == 0:  # the child (its fork handlers have run) sleeps with what it kept
        os.write(told, b"x")
        time.sleep(30)
        os._exit(0)
    try:
        assert os.read(ready, 1) == b"x"
        release(fd)  # as rank 0's death would
        release(acquire(str(folder)))
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os.close(ready)
        os.close(told)


def test_a_checkpoint_folder_of_its_own_is_held_too(tmp_path):
    """Two runs of their own EXP_NAME given one CONFIG.LOG.CHECKPOINT_DIR would overwrite each
    other's checkpoints: the second is refused naming that key, and holds nothing after."""
    shared = tmp_path / "ckpts"
    with output_lock.training_folder(str(tmp_path / "a"), str(shared), "CONFIG.LOG.CHECKPOINT_DIR"):
        with pytest.raises(OutputFolderBusy) as refused:
            with output_lock.training_folder(str(tmp_path / "b"), str(shared),
                                             "CONFIG.LOG.CHECKPOINT_DIR"):
                pass
        line = str(refused.value)
        assert f"the checkpoint folder {shared} (CONFIG.LOG.CHECKPOINT_DIR) is in use" in line
        assert "its own CONFIG.LOG.CHECKPOINT_DIR" in line and "\n" not in line
        release(acquire(str(tmp_path / "b")))  # the refused run let its output folder go
    # A checkpoint folder inside the output folder is held by the output folder's lock alone.
    with output_lock.training_folder(str(tmp_path / "c"), str(tmp_path / "c" / "checkpoints")):
        assert not (tmp_path / "c" / "checkpoints").exists()
    release(acquire(str(shared)))  # released at the end of the block


def test_a_file_system_without_locks_warns_once_and_goes_on(tmp_path, monkeypatch, caplog):
    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(output_lock.fcntl, "flock", no_locks)
    with caplog.at_level(logging.WARNING, logger="zoo"):
        with output_lock.training_folder(str(tmp_path / "job")):
            pass
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "could not lock the output folder" in record.getMessage()
    assert "No locks available" in record.getMessage()


@pytest.mark.slow
def test_train_on_a_held_folder_stops_with_one_line_and_writes_nothing(tmp_path, synth_root):
    """tools/train_ddp.py on a folder another training job holds: one error line, a non-zero
    exit, and nothing of its own in the folder; once the holder is gone, the same command
    trains."""
    args = toy_args(tmp_path, synth_root)
    folder = tmp_path / "runs" / "job"
    holder = _holder(folder)
    try:
        [(rc, out)] = finish_processes([start_process(tool_command("train_ddp.py", args))],
                                       timeout=180)
    finally:
        _kill(holder)
    assert rc != 0
    line = error_line(out)
    assert f"output folder {folder} " in line and f"pid {holder.pid}" in line, line
    assert sorted(os.listdir(folder)) == [output_lock.LOCK_NAME], os.listdir(folder)
    [(rc, out)] = finish_processes([start_process(tool_command("train_ddp.py", args))],
                                   timeout=240)
    assert rc == 0, out
    epochs = [json.loads(ln).get("epoch") for ln in
              (folder / "metrics.jsonl").read_text().splitlines()]
    assert 1 in epochs
