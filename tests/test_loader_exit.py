"""A script that leaves a loop over a training loader early exits at once: its loader workers are
stopped the DataLoader's way at exit (zoo.data.robust), not sent SIGTERM, which they would take for
a scheduler's preemption signal and outlive by TRAIN.PREEMPT_GRACE + 5 s."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
from helpers import TINY_DATA

_SCRIPT = textwrap.dedent("""
    import sys
    from zoo.config import load_config
    from zoo.data import build_loader

    loader = build_loader(load_config(None, sys.argv[1:]), "train")
    loader.sampler.set_epoch(0)
    for batch in loader:
        break
    print("leaving", flush=True)
""")


@pytest.mark.parametrize("bad_fraction", ["0.1", "1.0"])  # with and without the guard's generator
def test_a_script_that_breaks_out_of_a_loader_loop_exits_at_once(synth_root, bad_fraction):
    opts = [*TINY_DATA, "DATA.SYNTHETIC.ROOT", synth_root, "DATA.NUM_WORKERS", "2",
            "DATA.MAX_BAD_FRACTION", bad_fraction, "TRAIN.PREEMPT_GRACE", "60"]
    start = time.monotonic()
    try:
        r = subprocess.run([sys.executable, "-c", _SCRIPT, *opts], capture_output=True,
                           text=True, timeout=40)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the script was still running {time.monotonic() - start:.0f} s after it "
                    f"started (its workers outlive SIGTERM by 65 s): {e.stdout!r}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "leaving"
