"""A full disk or a read-only output folder: one-line stops, previous checkpoints intact."""

import os
import subprocess

import pytest
import torch
from helpers import TINY_DATA, run_tool

from zoo.train.checkpoint import CheckpointWriteError, atomic_save


@pytest.fixture()
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs mounted on a temp folder (unmounted afterwards); skips where mount is
    refused (no root / no CAP_SYS_ADMIN)."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(folder):
    """Write zeros into ``folder`` until the disk is full (unbuffered: every write hits it)."""
    fd = os.open(os.path.join(folder, "filler"), os.O_WRONLY | os.O_CREAT)
    try:
        for size in (65536, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    assert os.statvfs(folder).f_bavail == 0


def _error_lines(r):
    return [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("error:")]


def test_atomic_save_on_a_full_disk_keeps_the_old_file_and_removes_the_temp(small_tmpfs):
    path = small_tmpfs / "epoch_1.pth"
    old = {"w": torch.arange(10.0)}
    atomic_save(old, str(path))
    _fill(small_tmpfs)
    with pytest.raises(CheckpointWriteError, match=r"epoch_1\.pth .*0 B free"):
        atomic_save({"w": torch.zeros(100_000)}, str(path))
    assert sorted(os.listdir(small_tmpfs)) == ["epoch_1.pth", "filler"]  # no .tmp left
    assert torch.equal(torch.load(path, weights_only=True)["w"], old["w"])


def test_a_checkpoint_larger_than_the_free_space_is_named_a_full_disk(small_tmpfs):
    # The disk has room, but not for this file: torch's zip writer says "unexpected pos N vs M",
    # and once the partial file is removed the disk looks empty again.
    with pytest.raises(CheckpointWriteError) as e:
        atomic_save({"w": torch.zeros(1_000_000)}, str(small_tmpfs / "epoch_1.pth"))  # 4 MB
    msg = str(e.value)
    assert "No space left on device" in msg and "unexpected pos" not in msg, msg
    assert "no earlier checkpoint is there" in msg and "intact" not in msg, msg
    assert os.listdir(small_tmpfs) == []


def _train(tmp_path, synth_root, toy_model_file, save_dir, epochs, base=None):
    return run_tool("train_ddp.py", [
        "--extra-modules", toy_model_file,
        "DDP_CONFIG.DISTRIBUTED", "False",
        "MODEL.NAME", "toy_conv3d", "TRAIN.EPOCH_NUM", str(epochs),
        "TRAIN.AUTO_RESUME", "True",
        "DATA.SYNTHETIC.ROOT", synth_root,
        "LOG.BASE_PATH", str(base or tmp_path / "runs"), "LOG.EXP_NAME", "disk",
        "LOG.SAVE_DIR", str(save_dir),  # absolute: os.path.join keeps it as it is
        *TINY_DATA,
    ], timeout=180)


@pytest.mark.slow  # two training runs, ~20 s
def test_a_full_checkpoint_disk_stops_in_one_line(tmp_path, synth_root, toy_model_file,
                                                  small_tmpfs):
    r = _train(tmp_path, synth_root, toy_model_file, small_tmpfs, epochs=1)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (small_tmpfs / "epoch_1.pth").is_file()
    _fill(small_tmpfs)
    r = _train(tmp_path, synth_root, toy_model_file, small_tmpfs, epochs=2)
    assert r.returncode != 0, r.stdout + r.stderr
    lines = _error_lines(r)
    assert len(lines) == 1, r.stdout + r.stderr
    assert f"could not write checkpoint {small_tmpfs / 'epoch_2.pth'}" in lines[0], lines[0]
    assert "No space left on device" in lines[0] and "0 B free" in lines[0], lines[0]
    assert "internal error" not in lines[0]
    leftovers = sorted(n for n in os.listdir(small_tmpfs) if n != "filler")
    # No epoch_2, no .tmp (training.lock: the run holds its checkpoint folder).
    assert leftovers == ["best.pth", "epoch_1.pth", "training.lock"], leftovers
    state = torch.load(small_tmpfs / "epoch_1.pth", weights_only=True)
    assert state["epoch"] == 1 and state["model"]


@pytest.mark.slow
def test_a_read_only_output_folder_is_caught_before_training(tmp_path, synth_root,
                                                             toy_model_file):
    ro = tmp_path / "ro"
    ro.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here ({r.stderr.strip() or r.returncode})")
    try:
        t = _train(tmp_path, synth_root, toy_model_file, "checkpoints", epochs=1, base=ro)
    finally:
        subprocess.run(["umount", "-l", str(ro)], check=False)
    assert t.returncode != 0
    lines = _error_lines(t)
    assert len(lines) == 1, t.stdout + t.stderr
    assert f"output folder {str(ro / 'disk')!r} is not writable" in lines[0], lines[0]
    assert "Read-only file system" in lines[0] and "CONFIG.LOG.BASE_PATH" in lines[0]
    assert "epoch 1" not in t.stdout + t.stderr  # stopped before any worker trained


@pytest.mark.slow
def test_an_output_folder_under_a_regular_file_is_caught(tmp_path, synth_root, toy_model_file):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    t = _train(tmp_path, synth_root, toy_model_file, "checkpoints", epochs=1,
               base=blocker / "runs")
    assert t.returncode != 0
    lines = _error_lines(t)
    assert len(lines) == 1, t.stdout + t.stderr
    assert f"{str(blocker)!r} is not a folder" in lines[0], lines[0]
