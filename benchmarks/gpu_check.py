"""``zoo-benchmark gpu``: the GPU path checked in one command on a fresh machine.

Eleven steps, each but the last a child process, each with its own log under ``out``; a failed
step does not stop the others:

1. ``cuda_tests``: ``pytest -m cuda tests -v`` (the tests marked ``cuda``; cut short, the
   failures logged so far are named).
2. ``quickstart``: train and test configs/quickstart/slowfast_tiny_motion.yaml (val / test top-1).
3. ``train_step``: ``zoo-benchmark train`` of SlowFast-R50 8x8 in fp32 and bf16 (clips/s and
   percent of the device's measured matmul peak in the same precision).
4. ``stems``: ``zoo-benchmark stems`` at the step's sizes: each RGB stem conv as the padded 3-D
   conv and as the two 2-D folds the trainer can use (forward + weight gradient).
5. ``compiled_step``: on a GPU at full sizes, the bf16 step compiled as the trainer compiles it
   (``--compile``: inductor + CUDA graphs, its first step's seconds) and ``zoo-benchmark compare
   --compile`` (zoo's compiled bf16 step against PyTorchVideo's at the same settings); skipped
   on a CPU or with ``quick``, where compiling takes longer than the rest of the check.
6. ``loader``: ``zoo-benchmark data`` on the videos of the next step with its settings and
   cores - 2 workers, with the crops resized in the workers and left to the device
   (``DATA.RESIZE_ON``): the loader's clips/s alone, per worker and per CPU second, and the
   host's threads per core.
7. ``real_decoding``: SlowFast-R50 8x8 trained in bf16 on generated 10-s 340x256 H.264 videos
   (Kinetics-like, GOP 250, CRF 23) with cores - 2 loader workers, 6 epochs: clips/s after the
   first two (start-up, then the batches made ahead meanwhile), the GPU's busy percent over the
   same iterations (sampled by ``nvidia-smi`` every 200 ms), the share of those epochs the
   training loop waited for data (``data_wait_share``) and, on a GPU, the calls that made the
   host wait for the GPU there, by source line (torch's sync debug mode, counted by the hook in
   benchmarks/host_waits.py).
8. ``real_decoding_compiled``: the same run with ``TRAIN.COMPILE True`` (the first epoch holds
   the compile time); skipped where ``compiled_step`` is.
9. ``real_decoding_resize_on_device``: the compiled run with ``DATA.RESIZE_ON device`` (the
   workers decode and cut; the GPU resizes and flips); skipped where ``compiled_step`` is.
10. ``memory``: ``zoo-benchmark train --act-checkpoint-memory``: the peak memory of one fp32 step
   of SlowFast-R50 8x8 at batch 16 with and without activation checkpointing (the GPU's on a GPU).
11. ``balance``: the figures side by side: model-only clips/s (``train_step``'s bf16 step at the
   same sizes, and ``compiled_step``'s), loader-only clips/s, end-to-end clips/s, GPU busy, data
   wait, and which of model and loader is the limit.

``quick`` shrinks every size (a tiny SlowFast, a few videos, short schedules) so the whole check
runs in a minute or two on a CPU; with ``device`` "cpu" the children see no GPU
(``CUDA_VISIBLE_DEVICES=""``) and the GPU's busy percent is n/a. ``budget_s`` bounds the whole
check: a child is killed when the budget is spent, and the steps after it are skipped (each
named in the table), so a check on a machine lent for a fixed time still prints its table. Run
from the checkout (configs/ and tests/ are read from the current folder).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from zoo.infer.plots import read_metrics
from zoo.utils.env import available_cpus

from . import child_env, host_waits

QUICKSTART = "configs/quickstart/slowfast_tiny_motion.yaml"
STEPS = ("cuda_tests", "quickstart", "train_step", "stems", "compiled_step", "loader",
         "real_decoding", "real_decoding_compiled", "real_decoding_resize_on_device", "memory",
         "balance")
# Steps that start no child process: they run whatever is left of the budget.
NO_CHILD = ("balance",)
# the real-decoding runs' hook that counts the host's waits for the GPU (benchmarks/host_waits.py)
WAIT_HOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "host_waits.py") + (
    ":HostWaitCount")
# why the compiled steps skip a CPU or a ``quick`` check
NEEDS_FULL_GPU = "needs a CUDA device and full sizes (compiling takes minutes)"
# ``zoo-benchmark train`` arguments of the step benchmarks (train_step, compiled_step, memory):
# the model and sizes, then the timed steps, at full sizes and with ``quick``
STEP_SIZES = {False: ["--model", "slowfast_8x8_resnet50", "--frames", "32", "--size", "224",
                      "--batch", "16"],
              True: ["--model", "slowfast_tiny_resnet18", "--frames", "16", "--size", "64",
                     "--batch", "2"]}
STEP_TIMING = {False: ["--warmup", "3", "--runs", "10"],
               True: ["--warmup", "1", "--runs", "2", "--gemm-size", "512"]}


class Check:
    """One run of the check: where its logs go, which device, which sizes."""

    def __init__(self, out: str, device: str, quick: bool, timeout_s: float,
                 budget_s: Optional[float] = None) -> None:
        self.out, self.device, self.quick, self.timeout_s = out, device, quick, timeout_s
        # time.monotonic() at which the whole check must end; None = no bound
        self.deadline = None if budget_s is None else time.monotonic() + budget_s
        self.results: Dict[str, Dict[str, object]] = {}  # each step's figures, for "balance"
        self.env = dict(child_env(os.environ), PYTHONUNBUFFERED="1")
        if device == "cpu":
            self.env["CUDA_VISIBLE_DEVICES"] = ""

    def left_s(self) -> float:
        """Seconds left of the budget (infinite without one)."""
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def step_args(self, timed: bool = True) -> List[str]:
        """The step benchmarks' model and sizes (:data:`STEP_SIZES`) for this check's sizes, with
        the timed steps (:data:`STEP_TIMING`) when ``timed``."""
        return STEP_SIZES[self.quick] + (STEP_TIMING[self.quick] if timed else [])

    @property
    def full_gpu(self) -> bool:
        """A CUDA device at full sizes: where the compiled steps run."""
        return self.device == "cuda" and not self.quick

    def run(self, name: str, cmd: List[str], on_line: Optional[Callable] = None) -> int:
        """Run ``cmd``, its output appended to ``out/name.log``; ``on_line(t, line)`` sees each
        line as it comes. Returns the exit status (124 when it ran past the step timeout or the
        check's budget)."""
        timeout_s = max(1.0, min(self.timeout_s, self.left_s()))
        log_path = os.path.join(self.out, f"{name}.log")
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"$ {' '.join(cmd)}\n")
            log.flush()
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, env=self.env, errors="replace")
            killed: List[bool] = []

            def kill() -> None:
                killed.append(True)
                proc.kill()

            timer = threading.Timer(timeout_s, kill)
            timer.start()
            try:
                for line in proc.stdout:
                    log.write(line)
                    log.flush()
                    if on_line is not None:
                        on_line(time.time(), line)
                rc = proc.wait()
            finally:
                timer.cancel()
            if killed:
                log.write(f"killed after {timeout_s:.0f} s\n")
                return 124
            return rc


class GpuBusy:
    """``nvidia-smi --query-gpu=utilization.gpu -lms 200`` in the background, each sample
    timestamped here; :meth:`mean` averages a time window. Inactive (n/a) without nvidia-smi."""

    def __init__(self, active: bool, log_path: str) -> None:
        self.samples: List[Tuple[float, float]] = []
        self.proc = None
        if not active:
            return
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                 "-lms", "200", "--id=0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True)
        except OSError:
            return
        self.log = open(log_path, "w", encoding="utf-8")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.samples.append((time.time(), float(line.strip())))
            except ValueError:
                continue
            self.log.write(f"{self.samples[-1][0]:.3f} {line.strip()}\n")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
            self.log.close()

    def mean(self, start: float, end: float) -> Optional[float]:
        inside = [u for t, u in self.samples if start <= t <= end]
        return sum(inside) / len(inside) if inside else None


def cuda_tests(c: Check) -> Tuple[object, str]:
    """``pytest -m cuda``: passes when none fails and some ran; on the CPU they all skip. Each
    test's outcome is logged as it ends (``-v``; 4 pytest-xdist workers on a GPU where xdist is
    installed), so a run cut short by the budget still names the tests that failed."""
    if not os.path.isdir("tests"):
        return False, "tests/ not found: run from the checkout"
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "tests", "-v", "-p", "no:cacheprovider",
           "-o", "addopts=-ra"]
    if c.device == "cuda" and importlib.util.find_spec("xdist") is not None:
        cmd += ["-n", "4"]
    rc = c.run("cuda_tests", cmd)
    tail = open(os.path.join(c.out, "cuda_tests.log"), encoding="utf-8").read().splitlines()
    summary = next((ln.strip("= ") for ln in reversed(tail) if " in " in ln and (
        "passed" in ln or "skipped" in ln or "failed" in ln or "error" in ln)), None)
    if summary is None:  # cut short: the outcomes logged so far
        summary = "no summary (cut short): " + outcomes_so_far(tail)
    if rc == 0 and "passed" not in summary and c.device == "cpu":
        return "skipped", summary
    return rc == 0 and "passed" in summary, summary


def outcomes_so_far(lines: List[str], top: int = 3) -> str:
    """``"12 passed, 2 failed (tests/a.py::x, ...)"`` from ``pytest -v`` lines."""
    ends = {"PASSED": [], "FAILED": [], "ERROR": [], "SKIPPED": []}
    for line in lines:
        words = line.split()
        for word, found in ends.items():
            if word in words:
                test = next((w for w in words if "::" in w), "?")
                found.append(test)
                break
    failed = ends["FAILED"] + ends["ERROR"]
    text = f"{len(ends['PASSED'])} passed, {len(failed)} failed"
    return text + (f" ({', '.join(failed[:top])})" if failed else "")


def _train_and_test(c: Check, name: str, args: List[str]) -> int:
    rc = c.run(name, [sys.executable, "-m", "zoo.cli.train", *args])
    return rc or c.run(name, [sys.executable, "-m", "zoo.cli.test", *args])


def quickstart(c: Check) -> Tuple[bool, str]:
    """Train + test the quick start; figures: last val top-1 and test top-1."""
    run_dir = os.path.join(c.out, "quickstart")
    args = ["--config-file", QUICKSTART, "LOG.BASE_PATH", run_dir, "LOG.EXP_NAME", "run",
            "LOG.PROGRESS_BAR", "False",
            "DATA.SYNTHETIC.ROOT", os.path.join(c.out, "synthetic")]
    if c.quick:
        args += ["TRAIN.EPOCH_NUM", "2", "VAL.FREQ", "1", "DATA.SYNTHETIC.TRAIN_PER_CLASS", "6",
                 "DATA.SYNTHETIC.VAL_PER_CLASS", "2", "DDP_CONFIG.NUM_CPU_PROCS", "1"]
    rc = _train_and_test(c, "quickstart", args)
    run = os.path.join(run_dir, "run")
    vals = [r for r in _records(run) if r.get("split") == "val"]
    test = _json(os.path.join(run, "test_metrics.json"))
    figures = (f"val top-1 {vals[-1]['top1']:.1f}% (epoch {vals[-1]['epoch']})" if vals
               else "no val record")
    figures += f", test top-1 {test['top1']:.1f}%" if test else ", no test metrics"
    return rc == 0 and bool(vals) and bool(test), figures


def train_step(c: Check) -> Tuple[bool, str]:
    """``zoo-benchmark train`` of SlowFast-R50 8x8 (quick: the tiny SlowFast), fp32 and bf16."""
    out = os.path.join(c.out, "train_step")
    rc = c.run("train_step", [sys.executable, "-m", "benchmarks.run", "train", "--out", out,
                              "--device", c.device, "--precision", "fp32", "bf16",
                              *c.step_args()])
    rows = (_json(os.path.join(out, "train.json")) or {}).get("rows", [])
    parts = [f"{r['precision']} {r['clips_per_s']:.1f} clips/s ({r['peak_words']})"
             for r in rows]
    if rows:
        parts.insert(0, f"input {rows[0]['input']}")
        c.results["train_step"] = {r["precision"]: r["clips_per_s"] for r in rows}
    if rows:
        batch = rows[0]["batch"]
        parts.append(f"{rows[0]['step_gflop'] / batch:.4g} GFLOP/clip")
    return rc == 0 and len(rows) == 2, "; ".join(parts) or "no results"


def stems(c: Check) -> Tuple[bool, str]:
    """``zoo-benchmark stems`` at the step benchmarks' model and sizes: per stem, the padded 3-D
    conv's milliseconds against the faster 2-D fold's."""
    out = os.path.join(c.out, "stems")
    warmup, runs = ("1", "2") if c.quick else ("3", "10")
    rc = c.run("stems", [sys.executable, "-m", "benchmarks.run", "stems", "--out", out,
                         "--device", c.device, *c.step_args(timed=False), "--warmup", warmup,
                         "--runs", runs])
    rows = (_json(os.path.join(out, "stems.json")) or {}).get("rows", [])
    parts = []
    for stem in sorted({r["stem"] for r in rows}):
        ways = [r for r in rows if r["stem"] == stem]
        base = next(r for r in ways if r["way"] == "padded 3-D")
        best = max(ways, key=lambda r: r["speedup_vs_padded_3d"])
        parts.append(f"{base['kernel']} stem {base['ms']:.3g} ms padded 3-D, {best['ms']:.3g} ms "
                     f"{best['way']} ({best['speedup_vs_padded_3d']:.2f}x)")
    return rc == 0 and bool(rows), "; ".join(parts) or "no results"


def compiled_step(c: Check) -> Tuple[object, str]:
    """The bf16 step of ``train_step`` compiled (the trainer's GPU settings), and zoo's compiled
    step against PyTorchVideo's (``compare --compile``, batch 16). GPU and full sizes only."""
    if not c.full_gpu:
        return "skipped", NEEDS_FULL_GPU
    out = os.path.join(c.out, "train_step")
    rc = c.run("compiled_step", [sys.executable, "-m", "benchmarks.run", "train", "--out",
                                 os.path.join(out, "compiled"), "--device", c.device,
                                 "--precision", "bf16", "--compile", *c.step_args()])
    rows = (_json(os.path.join(out, "compiled", "train.json")) or {}).get("rows", [])
    parts = [f"bf16 compiled ({r['compile_mode']}) {r['clips_per_s']:.1f} clips/s "
             f"({r['peak_words']}, first step {r['first_step_s']:.0f} s)"
             for r in rows]
    if rows:
        c.results["compiled_step"] = {"bf16": rows[0]["clips_per_s"]}
    rc2 = c.run("compiled_step", [sys.executable, "-m", "benchmarks.run", "compare", "--out",
                                  os.path.join(out, "compare"), "--device", c.device, "--batch",
                                  "16", "--bf16-only", "--compile"])
    ratios = (_json(os.path.join(out, "compare", "compare.json")) or {}).get("ratios", {})
    if ratios:
        parts.append(f"compiled zoo bf16 / PyTorchVideo bf16 {ratios['zoo_bf16_vs_ptv_bf16']:.2f}x "
                     f"(loss relative difference {ratios['loss_rel_diff_bf16_vs_ptv_bf16']:.2g})")
    ok = rc == 0 and rc2 == 0 and len(rows) == 1 and bool(ratios)
    return ok, "; ".join(parts) or "no results"


def _video_list(c: Check, count: int, repeats: int, classes: int) -> Tuple[str, str]:
    """``count`` generated 10-s 340x256 videos (label i % classes), listed ``repeats`` times."""
    from . import data

    folder = os.path.join(c.out, "videos")
    data.generate(folder, count, gop=250, processes=available_cpus())
    lines = [f"clip_{i:03d}.mp4 250 {i % classes}\n" for i in range(count)] * repeats
    path = os.path.join(folder, "train_list.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return path, folder


def _real_data(c: Check) -> Dict[str, object]:
    """The real-decoding run's data and sizes, shared by ``loader`` and ``real_decoding``:
    ``workers`` (cores - 2), ``batch``, ``epochs``, ``warm`` (the first epochs, untimed),
    ``list``, and ``opts`` (config overrides: model, clip sizes, the list, workers, batch).

    Two warm epochs at full size: the first holds the start-up (workers, cuDNN's choices, the
    compile), and the second starts on the batches the workers made ahead meanwhile (up to
    workers x 2 of its 48), which a run held by its loader would otherwise count as speed."""
    workers = max(0, available_cpus() - 2)
    count, repeats, batch, epochs, warm = (4, 2, 2, 2, 1) if c.quick else (48, 16, 16, 6, 2)
    list_path, folder = _video_list(c, count, repeats, classes=8)
    model = (["MODEL.NAME", "slowfast_tiny_resnet18", "DATA.CLIP_LEN", "16", "DATA.CROP_SIZE",
              "64", "DATA.SHORT_SIDE_SIZE", "72", "DATA.TRAIN_SHORT_SIDE_RANGE", "[72, 90]"]
             if c.quick else
             ["MODEL.NAME", "slowfast_8x8_resnet50", "DATA.CLIP_LEN", "32", "DATA.CROP_SIZE",
              "224", "DATA.SHORT_SIDE_SIZE", "256", "DATA.TRAIN_SHORT_SIDE_RANGE", "[256, 320]"])
    opts = [*model, "MODEL.KWARGS", "[]", "DATA.FRAME_RATE", "2",
            "DATA.SYNTHETIC.ENABLE", "False", "DATA.NUM_CLASSES", "8",
            "DATA.TRAIN_ANNO_PATH", list_path, "DATA.TRAIN_DATA_PATH", folder,
            "DATA.VAL_ANNO_PATH", "", "DATA.NUM_WORKERS", str(workers),
            "TRAIN.BATCH_SIZE", str(batch)]
    return {"workers": workers, "batch": batch, "epochs": epochs, "warm": warm,
            "list": list_path, "opts": opts}


def loader(c: Check) -> Tuple[bool, str]:
    """The training loader alone (``zoo-benchmark data``) on the real-decoding run's videos and
    settings, with cores - 2 workers, once with the crops resized in the workers and once with
    them left to the device (``DATA.RESIZE_ON device``): clips/s, per worker, and clips per CPU
    second of the loader's processes (below clips/s per worker: the workers did not get whole
    cores)."""
    real = _real_data(c)
    workers = int(real["workers"])
    batches, warmup = (4, 1) if c.quick else (max(40, 3 * workers), max(4, workers))
    out = os.path.join(c.out, "loader")
    rc = c.run("loader", [sys.executable, "-m", "benchmarks.run", "data", "--out", out,
                          "--workers", str(workers), "--batches", str(batches), "--warmup",
                          str(warmup), "--resize-on", "loader", "device",
                          "--config-file", QUICKSTART, *real["opts"]])
    report = _json(os.path.join(out, "data.json")) or {}
    summary = {row.get("resize_on", "loader"): row for row in report.get("summary", [])}
    if not summary:
        return False, "no results"
    figures = []
    for place, name in (("loader", "loader"), ("device", "loader_resize_on_device")):
        if place not in summary:
            continue
        row = summary[place]
        speed = row["median_clips_per_s"]
        c.results[name] = {"clips_per_s": speed, "workers": workers}
        per = f", {row['per_worker']:.1f} per worker" if workers else ""
        cpu = f", {row['clips_per_cpu_s']:.1f} per CPU second" if row.get("clips_per_cpu_s") else ""
        figures.append(f"resized in the {'workers' if place == 'loader' else 'step'}: "
                       f"{speed:.1f} clips/s{per}{cpu}")
    machine = report.get("machine", {})
    threads = machine.get("threads_per_core")
    host = f"{workers} workers on {machine.get('cores', '?')} cores" + (
        f" ({threads} hardware thread{'s' if threads > 1 else ''} per core)" if threads else "")
    return rc == 0 and len(figures) == 2, host + "; " + "; ".join(figures)


def real_decoding(c: Check) -> Tuple[bool, str]:
    """SlowFast-R50 8x8 in bf16 on generated videos with cores - 2 workers: clips/s, GPU busy and
    the loop's data wait after the warm epochs (see :func:`_real_data`)."""
    return _real_decoding(c, "real_decoding", [])


def real_decoding_compiled(c: Check) -> Tuple[object, str]:
    """``real_decoding`` with the model compiled (``TRAIN.COMPILE True``, the trainer's mode for
    one GPU: inductor + CUDA graphs); the first epoch, untimed, holds the compile."""
    if not c.full_gpu:
        return "skipped", NEEDS_FULL_GPU
    return _real_decoding(c, "real_decoding_compiled", ["TRAIN.COMPILE", "True"])


def real_decoding_resize_on_device(c: Check) -> Tuple[object, str]:
    """``real_decoding_compiled`` with the crops resized and flipped on the GPU
    (``DATA.RESIZE_ON device``): the workers only decode and cut."""
    if not c.full_gpu:
        return "skipped", NEEDS_FULL_GPU
    return _real_decoding(c, "real_decoding_resize_on_device",
                          ["TRAIN.COMPILE", "True", "DATA.RESIZE_ON", "device"])


def _real_decoding(c: Check, name: str, extra: List[str]) -> Tuple[bool, str]:
    real = _real_data(c)
    workers, batch, epochs = int(real["workers"]), int(real["batch"]), int(real["epochs"])
    warm = int(real["warm"])
    list_path = str(real["list"])
    run_dir = os.path.join(c.out, name)
    args = ["--config-file", QUICKSTART, *real["opts"], "TRAIN.EPOCH_NUM", str(epochs),
            "TRAIN.PRECISION", "bf16", "DDP_CONFIG.NUM_CPU_PROCS", "1",
            "LOG.BASE_PATH", run_dir, "LOG.EXP_NAME", "run", "LOG.PROGRESS_BAR", "False",
            "LOG.DISPLAY_FREQ", "10", "TRAIN.HOOKS", f"['{WAIT_HOOK}']", *extra]
    marks: Dict[str, float] = {}
    ends: List[float] = []  # when each epoch ended

    def on_line(t: float, line: str) -> None:
        if "first iteration done" in line:
            marks.setdefault("first", t)
        if " done: mean loss" in line:  # "epoch N done: ..."
            ends.append(t)

    busy = GpuBusy(c.device == "cuda", os.path.join(c.out, f"{name}_gpu_busy.txt"))
    try:
        rc = c.run(name, [sys.executable, "-m", "zoo.cli.train", *args], on_line)
    finally:
        busy.stop()
    epochs_done = [r for r in _records(os.path.join(run_dir, "run"))
                   if r.get("split") == "train_epoch"]
    timed, since, until = _timed_epochs(epochs_done, ends, warm)
    untimed = len(epochs_done) - len(timed)
    clips = (len(open(list_path).readlines()) // batch) * batch
    figures = [f"{workers} workers, batch {batch}"]
    result: Dict[str, object] = {}
    if epochs_done:
        figures.append(f"epoch 1 {epochs_done[0]['time_s']:.1f} s")
        if untimed > 1:
            figures.append(f"epoch 2 {epochs_done[1]['time_s']:.1f} s")
    if timed:
        seconds = sum(r["time_s"] for r in timed)
        result["clips_per_s"] = speed = clips * len(timed) / seconds
        span = f"epochs {timed[0]['epoch']}-{timed[-1]['epoch']}"
        if since is not None and until > since:
            # the boundaries (and what runs there: checkpoint snapshots, the next epoch's first
            # batches) count too
            wall = clips * len(timed) / (until - since)
            result["clips_per_s"] = wall
            figures.append(f"{wall:.1f} clips/s over {span} by the wall clock ({speed:.1f} "
                           "within them)")
        else:
            figures.append(f"{speed:.1f} clips/s ({span})")
        if all("data_wait_share" in r for r in timed):
            wait = sum(r["data_wait_share"] * r["time_s"] for r in timed) / seconds
            result["data_wait"] = wait
            figures.append(f"data wait {100 * wait:.0f}%")
    start = since if since is not None else marks.get("first")
    pct = busy.mean(start, until) if start and until else None
    result["gpu_busy"] = pct
    figures.append(f"GPU busy {pct:.0f}%" if pct is not None else "GPU busy n/a")
    waits = host_waits.summary(os.path.join(run_dir, "run", "host_waits.json"))
    if waits:  # a GPU run: where the host waited for the GPU after epoch 1
        figures.append(waits)
    c.results[name] = result
    return rc == 0 and len(epochs_done) == epochs, ", ".join(figures)


def _timed_epochs(epochs_done: List[dict], ends: List[float],
                  warm: int) -> Tuple[List[dict], Optional[float], Optional[float]]:
    """The epoch records to time (those after the first ``warm``; with fewer epochs, those
    after the first, else all), and the wall-clock span they took: from the end of the last
    untimed epoch to the end of the last (``ends``: when each epoch's line was printed); ``since``
    is None when every epoch is timed or a line is missing."""
    timed = epochs_done[warm:] or epochs_done[1:] or epochs_done
    untimed = len(epochs_done) - len(timed)
    since = ends[untimed - 1] if untimed and len(ends) == len(epochs_done) else None
    return timed, since, (ends[-1] if ends else None)


def memory(c: Check) -> Tuple[bool, str]:
    """Peak memory of one fp32 training step with and without activation checkpointing
    (``zoo-benchmark train --act-checkpoint-memory``): the GPU's on a GPU, the process's RSS on
    a CPU."""
    out = os.path.join(c.out, "memory")
    rc = c.run("memory", [sys.executable, "-m", "benchmarks.run", "train", "--out", out,
                          "--device", c.device, "--act-checkpoint-memory",
                          *c.step_args(timed=False)])
    rows = (_json(os.path.join(out, "train_memory.json")) or {}).get("rows", [])
    key, where = (("step_rise_cuda_mb", "GPU") if rows and "step_rise_cuda_mb" in rows[0]
                  else ("step_rise_mb", "RSS"))
    by = {bool(r["act_checkpoint"]): r for r in rows}
    if len(by) != 2:
        return False, "no results"
    off, on = by[False][key], by[True][key]
    peak = "peak_cuda_mb" if where == "GPU" else "peak_rss_mb"
    figures = (f"one fp32 step's {where} rise {off:.0f} MB without, {on:.0f} MB with "
               f"activation checkpointing ({on / off:.2f}x); peak {by[False][peak]:.0f} / "
               f"{by[True][peak]:.0f} MB; step {by[False]['step_s']:.2f} / "
               f"{by[True]['step_s']:.2f} s (first step, untimed warm-up)")
    return rc == 0, figures


def balance(c: Check) -> Tuple[object, str]:
    """Model-only, loader-only and end-to-end clips/s side by side, with GPU busy and data wait,
    from the steps run before it; names the slower of model and loader as the limit. Of the
    end-to-end runs, the crops resized on the device when it ran (compiled), else the compiled
    run, else the eager one, each with its own loader-only and model-only figures."""
    pairs = (("real_decoding_resize_on_device", "loader_resize_on_device", "compiled_step",
              "compiled, crops resized on the device: "),
             ("real_decoding_compiled", "loader", "compiled_step", "compiled: "),
             ("real_decoding", "loader", "train_step", ""))
    run, fed, step, label = next((p for p in pairs if p[0] in c.results and p[2] in c.results),
                                 pairs[-1])
    model = c.results.get(step, {}).get("bf16")
    feed = c.results.get(fed, {}).get("clips_per_s")
    real = c.results.get(run, {})
    both = real.get("clips_per_s")
    if model is None and feed is None and both is None:
        return "skipped", "needs train_step, loader and real_decoding"

    def speed(value) -> str:
        return f"{value:.1f} clips/s" if value is not None else "n/a"

    busy, wait = real.get("gpu_busy"), real.get("data_wait")
    figures = [f"{label}model-only {speed(model)}",
               f"loader-only {speed(feed)} ({c.results.get(fed, {}).get('workers', '?')} "
               "workers)",
               f"end-to-end {speed(both)}",
               f"GPU busy {busy:.0f}%" if busy is not None else "GPU busy n/a",
               f"data wait {100 * wait:.0f}%" if wait is not None else "data wait n/a"]
    if model is not None and feed is not None:
        limit = "loader" if feed < model else "model"
        bound = min(model, feed)
        figures.append(f"limit: the {limit}" + (f" (end-to-end {100 * both / bound:.0f}% of "
                                                  f"its {bound:.1f} clips/s)" if both else ""))
    with open(os.path.join(c.out, "balance.log"), "w", encoding="utf-8") as log:
        log.write("\n".join(figures) + "\n")  # no child process: its figures are its log
    return None not in (model, feed, both), "; ".join(figures)


CHECKS = {"cuda_tests": cuda_tests, "quickstart": quickstart, "train_step": train_step,
          "stems": stems, "compiled_step": compiled_step, "loader": loader,
          "real_decoding": real_decoding,
          "real_decoding_compiled": real_decoding_compiled,
          "real_decoding_resize_on_device": real_decoding_resize_on_device, "memory": memory,
          "balance": balance}


def run_gpu_check(out: str, device: str = "cuda", quick: bool = False,
                  steps: Optional[List[str]] = None, timeout_s: float = 600,
                  budget_s: Optional[float] = None) -> List[Dict[str, object]]:
    """Run the steps (all by default) in order; returns one row per step: ``step``, ``status``
    ("ok", "FAILED", or "skipped": the cuda tests on a CPU, a compiled step on a CPU or with
    ``quick``, a step that would start after ``budget_s`` was spent), ``figures`` and
    ``seconds``. A step that raises is a failed step; each child process is killed after
    ``timeout_s`` or when the budget is spent."""
    os.makedirs(out, exist_ok=True)
    check = Check(out, device, quick, timeout_s, budget_s)
    rows = []
    for name in steps or STEPS:
        start = time.perf_counter()
        if check.left_s() < 5 and name not in NO_CHILD:
            rows.append({"step": name, "status": "skipped",
                         "figures": f"not started: the budget of {budget_s:.0f} s was spent",
                         "seconds": 0.0})
            continue
        try:
            ok, figures = CHECKS[name](check)  # ok: True, False or "skipped"
        except Exception as e:  # the step failed; the others still run
            ok, figures = False, f"{type(e).__name__}: {str(e).strip().splitlines()[0][:120]}" \
                if str(e).strip() else type(e).__name__
            with open(os.path.join(out, f"{name}.log"), "a", encoding="utf-8") as log:
                log.write(f"step failed: {figures}\n")
        status = ok if isinstance(ok, str) else "ok" if ok else "FAILED"
        rows.append({"step": name, "status": status, "figures": figures,
                     "seconds": round(time.perf_counter() - start, 1)})
        with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
            json.dump({"device": device, "quick": quick, "rows": rows}, f, indent=2)
    return rows


def markdown_table(rows: List[Dict[str, object]]) -> str:
    """The rows as a markdown table: step, status, key figures, seconds."""
    lines = ["| step | status | key figures | seconds |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['step']} | {r['status']} | {r['figures']} | {r['seconds']} |" for r in rows]
    return "\n".join(lines)


def _records(run_dir: str) -> List[dict]:
    """The run's metrics.jsonl records; none when the run wrote no such file."""
    if not os.path.isfile(os.path.join(run_dir, "metrics.jsonl")):
        return []
    return read_metrics(run_dir)


def _json(path: str) -> Optional[dict]:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)
