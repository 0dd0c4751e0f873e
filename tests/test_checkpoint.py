"""Checkpoints: atomic writes survive a kill mid-write and the next run removes what it left,
unsafe pickles are refused, keep-last/best (a second name of the best epoch's file), and a
checkpoint from another config is refused naming the keys."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from zoo.config import cfg_to_yaml, load_config
from zoo.train.checkpoint import (
    CheckpointWriteError,
    atomic_link,
    atomic_save,
    config_differences,
    epoch_checkpoints,
    latest_checkpoint,
    load_checkpoint,
    remove_partial_writes,
    save_checkpoint,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_kill_during_write_leaves_previous_checkpoint_loadable(tmp_path):
    path = tmp_path / "epoch_1.pth"
    atomic_save({"model": {"w": torch.ones(3)}, "epoch": 1}, str(path))
    # A child process writes a large checkpoint to the same path; kill it mid-write.
    script = (
        "import sys, torch\n"
        f"sys.path.insert(0, {ROOT!r})\n"
        "from zoo.train.checkpoint import atomic_save\n"
        "atomic_save({'model': {'w': torch.zeros(400_000_000 // 4)}, 'epoch': 2}, sys.argv[1])\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(path)])
    deadline = time.time() + 60
    tmp_files = []
    while time.time() < deadline:
        tmp_files = [f for f in os.listdir(tmp_path) if ".tmp." in f]
        if tmp_files and os.path.getsize(tmp_path / tmp_files[0]) > 1_000_000:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert tmp_files, "the writer never started writing; nothing was tested"
    state = load_checkpoint(str(path))
    assert state["epoch"] == 1 and torch.equal(state["model"]["w"], torch.ones(3))
    # The half-written temporary file is never taken for a checkpoint...
    assert latest_checkpoint(str(tmp_path)) == str(path)
    # ...and the next run removes it (and only it).
    (tmp_path / "notes.txt.tmp.7").write_text("a user's file")
    size = os.path.getsize(tmp_path / tmp_files[0])
    assert remove_partial_writes(str(tmp_path)) == [(f"epoch_1.pth.tmp.{proc.pid}", size)]
    assert sorted(os.listdir(tmp_path)) == ["epoch_1.pth", "notes.txt.tmp.7"]


class _Exploit:
    def __reduce__(self):
        return (os.system, (f"touch {_Exploit.marker}",))


def test_checkpoint_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    _Exploit.marker = str(marker)
    bad = tmp_path / "evil.pth"
    torch.save({"model": {}, "payload": _Exploit()}, str(bad))
    with pytest.raises(RuntimeError) as e:
        load_checkpoint(str(bad))
    msg = str(e.value)
    assert "refused to load" in msg and "weights_only" in msg and "\n" not in msg
    assert "system" in msg  # the cause torch names, not only its paragraph about the default
    assert not marker.exists(), "the pickle's code ran"


def test_what_is_not_a_checkpoint_is_named(tmp_path):
    """A folder, a file cut short and a file of something else each say what they are."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    good = run / "checkpoints" / "epoch_1.pth"
    torch.save({"model": {"w": torch.zeros(64, 64)}}, str(good))
    with pytest.raises(FileNotFoundError, match=rf"is a folder: .* its newest, '{good}'"):
        load_checkpoint(str(run))
    cut = tmp_path / "cut.pth"
    cut.write_bytes(good.read_bytes()[:2000])
    with pytest.raises(RuntimeError, match="cut short or damaged"):
        load_checkpoint(str(cut))
    text = tmp_path / "notes.pth"
    text.write_text("not a checkpoint")
    with pytest.raises(RuntimeError, match="not a PyTorch checkpoint"):
        load_checkpoint(str(text))
    from zoo.models.weights.load import read_state_dict  # MODEL.PRETRAINED's reader alike

    with pytest.raises(RuntimeError, match="cut short or damaged"):
        read_state_dict(str(cut))


def test_a_damaged_checkpoint_of_the_run_names_the_way_back(tmp_path):
    """Resuming from the run's own damaged checkpoint: nothing to download again; the line says
    to move it aside (the one before it is taken) or name an earlier epoch."""
    from zoo.train.checkpoint import load_training_state

    good = tmp_path / "epoch_3.pth"
    torch.save({"model": {"w": torch.zeros(64, 64)}}, str(good))
    good.write_bytes(good.read_bytes()[:2000])
    model = torch.nn.Linear(2, 2)
    with pytest.raises(RuntimeError) as e:
        load_training_state(str(good), load_config(None, []), model, None, None)
    assert f"move it out of {tmp_path} to resume from the one before it" in str(e.value)
    assert "CONFIG.TRAIN.RESUME_EPOCH" in str(e.value) and "download" not in str(e.value)


def test_keep_last_and_best(tmp_path):
    for epoch in range(1, 6):
        save_checkpoint(str(tmp_path), {"epoch": epoch}, epoch, keep_last=2, is_best=epoch == 2)
    names = [os.path.basename(p) for p in epoch_checkpoints(str(tmp_path))]
    assert names == ["epoch_4.pth", "epoch_5.pth"]
    assert load_checkpoint(str(tmp_path / "best.pth"))["epoch"] == 2


def test_best_is_a_second_name_of_the_epoch_file_and_outlives_it(tmp_path):
    save_checkpoint(str(tmp_path), {"epoch": 1}, 1, is_best=True)
    assert os.path.samefile(tmp_path / "epoch_1.pth", tmp_path / "best.pth")  # written once
    save_checkpoint(str(tmp_path), {"epoch": 2}, 2, is_best=False)
    save_checkpoint(str(tmp_path), {"epoch": 3}, 3, is_best=True)
    assert os.path.samefile(tmp_path / "epoch_3.pth", tmp_path / "best.pth")
    atomic_save({"epoch": 30}, str(tmp_path / "epoch_3.pth"))  # a new file: best.pth keeps 3
    os.remove(tmp_path / "epoch_3.pth")
    assert load_checkpoint(str(tmp_path / "best.pth"))["epoch"] == 3
    assert sorted(os.listdir(tmp_path)) == ["best.pth", "epoch_1.pth", "epoch_2.pth"]


def test_best_is_copied_where_the_filesystem_has_no_hard_links(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    save_checkpoint(str(tmp_path), {"epoch": 1}, 1, is_best=True)
    assert not os.path.samefile(tmp_path / "epoch_1.pth", tmp_path / "best.pth")
    assert load_checkpoint(str(tmp_path / "best.pth"))["epoch"] == 1
    assert sorted(os.listdir(tmp_path)) == ["best.pth", "epoch_1.pth"]


def test_a_failed_link_names_the_file_and_keeps_the_previous_best(tmp_path):
    atomic_save({"epoch": 1}, str(tmp_path / "best.pth"))
    with pytest.raises(CheckpointWriteError) as e:
        atomic_link(str(tmp_path / "epoch_9.pth"), str(tmp_path / "best.pth"))  # no such file
    msg = str(e.value)
    assert f"could not write checkpoint {tmp_path / 'best.pth'}" in msg and "\n" not in msg
    assert "the previous best.pth is intact" in msg
    assert load_checkpoint(str(tmp_path / "best.pth"))["epoch"] == 1
    assert os.listdir(tmp_path) == ["best.pth"]


def test_a_full_disk_is_named_as_one_though_torch_says_unexpected_pos(tmp_path, monkeypatch):
    """torch's zip writer reports a full disk as "unexpected pos": the message says the disk
    filled up, how much was written, and what there is to resume from."""
    import zoo.utils.checkpoint_io as io

    def fill_up(obj, f):
        f.write(b"x" * 3000)
        raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 3000 vs "
                           "2900")

    monkeypatch.setattr(torch, "save", fill_up)
    monkeypatch.setattr(io, "_free_bytes", lambda folder: 0)
    with pytest.raises(CheckpointWriteError) as e:
        atomic_save({"epoch": 1}, str(tmp_path / "epoch_1.pth"))
    msg = str(e.value)
    assert "(No space left on device: the disk filled up after 2.9 KiB of it;" in msg
    assert "unexpected pos" not in msg and "no earlier checkpoint is there" in msg
    (tmp_path / "epoch_1.pth").write_bytes(b"complete")
    with pytest.raises(CheckpointWriteError) as e:
        atomic_save({"epoch": 2}, str(tmp_path / "epoch_2.pth"))
    assert "the earlier checkpoints are intact (newest: epoch_1.pth)" in str(e.value)
    assert sorted(os.listdir(tmp_path)) == ["epoch_1.pth"]  # no partial file left


def test_config_differences_name_the_keys():
    a = load_config(None, ["MODEL.NAME", "resnet18", "TRAIN.LR", "0.1"])
    b = load_config(None, ["MODEL.NAME", "resnet50", "TRAIN.LR", "0.1", "TRAIN.EPOCH_NUM", "99",
                           "LOG.EXP_NAME", "other"])
    diffs = config_differences(cfg_to_yaml(a), b)
    assert diffs == ["CONFIG.MODEL.NAME: 'resnet18' -> 'resnet50'"]


def test_a_fresh_run_sets_an_earlier_runs_checkpoints_aside(tmp_path, caplog):
    """Left in place, an earlier run's later epochs would be what test_ddp tests (the newest)
    and what AUTO_RESUME continues."""
    import logging

    from zoo.train.checkpoint import set_aside_earlier_run
    from zoo.utils.checkpoint_io import latest_checkpoint

    for name in ("epoch_1.pth", "epoch_8.pth", "best.pth", "preempt_epoch9_iter3.pth"):
        (tmp_path / name).write_bytes(name.encode())
    (tmp_path / "notes.txt").write_text("mine")
    with caplog.at_level(logging.WARNING):
        aside = set_aside_earlier_run(str(tmp_path), logging.getLogger("zoo"))
    assert os.path.dirname(aside) == str(tmp_path)
    assert sorted(os.listdir(aside)) == ["best.pth", "epoch_1.pth", "epoch_8.pth",
                                         "preempt_epoch9_iter3.pth"]
    assert (tmp_path / "notes.txt").exists() and latest_checkpoint(str(tmp_path)) is None
    [line] = [r.getMessage() for r in caplog.records]
    assert "held 4 checkpoint(s) of an earlier run" in line and aside in line
    assert set_aside_earlier_run(str(tmp_path), logging.getLogger("zoo")) is None  # none left
