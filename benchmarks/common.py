"""What every benchmark shares: interleaved timing, the machine's description, result files."""

from __future__ import annotations

import csv
import json
import os
import platform
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from zoo.train.precision import native_bf16
from zoo.utils.env import available_cpus

# The benchmarks keep several models (or settings) alive in one process. oneDNN caches the compiled
# kernel of each convolution it meets, 1024 by default; past that it evicts and compiles them again
# on every step, which a training process (one model) never does. Read at oneDNN's first use.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "8192")


def load_average() -> Optional[List[float]]:
    """The 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def threads_per_core() -> Optional[int]:
    """Hardware threads sharing CPU 0's core (2 with SMT / hyper-threading), as the OS sees it
    (a VM shows what its hypervisor tells it); None where sysfs does not say."""
    try:
        with open("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list",
                  encoding="ascii") as f:
            text = f.read().strip()
        count = 0
        for part in text.split(","):
            first, _, last = part.partition("-")
            count += int(last) - int(first) + 1 if last else 1
        return count
    except (OSError, ValueError):
        return None


def machine_info(device: torch.device) -> Dict[str, Any]:
    """Where the figures come from: CPU, cores, GPU, library versions, load average now."""
    info = {
        "cpu": _cpu_name(),
        "cores": available_cpus(),
        "threads_per_core": threads_per_core(),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "",
        "native_bf16": native_bf16(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "os": platform.platform(terse=True),
        "load_average_start": load_average(),
    }
    try:
        import pytorchvideo

        info["pytorchvideo"] = getattr(pytorchvideo, "__version__", "installed")
    except ImportError:
        pass
    return info


def sync(device: torch.device) -> None:
    """Wait for queued device work (CPU work is already done when a call returns)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(fns: Dict[str, Callable[[], Any]], warmup: int, runs: int,
                     device: torch.device, block: int = 2) -> Dict[str, List[float]]:
    """Seconds per call of each function, ``runs`` timed calls each.

    Every function is first called ``warmup`` times untimed (allocator, oneDNN kernels, cuDNN
    autotuning). Then come rounds in which each function in turn makes one untimed call and up to
    ``block`` timed ones, so that a busy moment of the machine hits all of them alike while each
    timed call follows a call of the same function, as steps do in training. (The first step
    after another model's step pays for moving the allocator between the two models' memory:
    measured here, up to 15% of an fp32 SlowFast-R50 step.)
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
        sync(device)
    times: Dict[str, List[float]] = {name: [] for name in fns}
    while any(len(t) < runs for t in times.values()):
        for name, fn in fns.items():
            fn()
            for _ in range(min(block, runs - len(times[name]))):
                sync(device)
                start = time.perf_counter()
                fn()
                sync(device)
                times[name].append(time.perf_counter() - start)
    return times


def summary(times: Sequence[float]) -> Dict[str, float]:
    """Median, min and max of a list of seconds, rounded for the result files."""
    return {"median_s": round(statistics.median(times), 4), "min_s": round(min(times), 4),
            "max_s": round(max(times), 4), "runs": len(times)}


def write_results(out_dir: str, name: str, rows: List[Dict[str, Any]],
                  machine: Dict[str, Any], extra: Optional[Dict[str, Any]] = None) -> List[str]:
    """Write ``name.csv`` (one line per row) and ``name.json`` (rows + machine + extra).

    Returns the paths written.
    """
    os.makedirs(out_dir, exist_ok=True)
    machine = dict(machine, load_average_end=load_average())
    fields: List[str] = []
    for row in rows:
        fields += [k for k in row if k not in fields]
    csv_path = os.path.join(out_dir, f"{name}.csv")
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    json_path = os.path.join(out_dir, f"{name}.json")
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump({"benchmark": name, "machine": machine, **(extra or {}), "rows": rows}, f,
                  indent=2)
        f.write("\n")
    return [csv_path, json_path]


def format_table(rows: List[Dict[str, Any]], columns: Sequence[str]) -> str:
    """A plain-text table of ``columns`` of ``rows`` for the console."""
    cells = [[str(c) for c in columns]] + [[_cell(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(line, widths)) for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
