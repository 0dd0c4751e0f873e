"""Process environment: seeding, thread counts, loading users' extra modules.

Importing this module does not import torch (the functions that need it import it), so torch-free
processes such as the synthetic-data writers can ask :func:`available_cpus`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import random
import sys
from types import ModuleType
from typing import Iterable

import numpy as np


def torch_at_least(major: int, minor: int) -> bool:
    """Whether the installed torch release is ``major.minor`` or newer (local tags ignored)."""
    import torch

    return tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) >= (major, minor)


def seed_all(seed: int) -> None:
    """Seed Python, NumPy and torch RNGs of this process."""
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def available_cpus() -> int:
    """CPU cores this process may run on (respects affinity masks where the OS shows them)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


# The variables that set the threads of the common native libraries (and of the processes started
# from this one).
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def set_num_threads(threads: int) -> None:
    """Set intra-op threads for torch and the common native libraries of this process."""
    import torch

    threads = max(1, int(threads))
    torch.set_num_threads(threads)
    for var in THREAD_VARS:
        os.environ[var] = str(threads)


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


@functools.lru_cache(maxsize=None)
def _libc():
    """glibc, loaded once per process; None off Linux or without glibc."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


def keep_freed_memory(largest: int = 256 << 20) -> bool:
    """Have glibc keep freed memory for reuse instead of handing it back to the kernel.

    By default glibc serves every block over its mmap threshold (at most 32 MB, usually far less)
    with fresh pages and unmaps it when freed, so each new clip buffer (4.8 MB for 32 uint8
    frames of 224x224) is paid again in page faults: on a 2-core VM, stacking a batch of eight
    such clips into fresh memory took 24 ms against 4 ms into reused memory. With blocks up to
    ``largest`` bytes served from the heap and the heap never trimmed, a loader worker reuses the
    same pages clip after clip (after a few rounds: a freed block must first fit the next
    64-byte-aligned request; 3-8 rounds of a 64 MB block, holding up to ~8 of them, were seen);
    it holds on to its peak heap in exchange. Returns False where there is no glibc (the call is
    then a no-op).
    """
    libc = _libc()
    if libc is None:
        return False
    try:
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(largest))
                    and libc.mallopt(_M_TRIM_THRESHOLD, 2 ** 31 - 1))
    except AttributeError:  # musl and other C libraries
        return False


# Linux's madvise advice that maps (and allocates) every page of a range at once (5.14 and later).
_MADV_POPULATE_WRITE = 23


def map_pages_now(tensor) -> bool:
    """Map every page of a CPU tensor's memory into this process at once, ready for writing.

    Fresh shared memory (a loader worker's batch) is paid for page by page on first touch: each
    4 KB page is a separate fault, ~2 us each on a 2-core VM (a batch of eight 4.8 MB clips: 28 ms
    to stack into new shared memory, of which ~7 ms is the copy). One
    ``madvise(MADV_POPULATE_WRITE)`` call mapped the same pages in ~13 ms. The values are not
    changed. Returns False where the kernel (before 5.14) or the platform lacks the call; nothing
    is done then.
    """
    libc = _libc()
    if libc is None or tensor.numel() == 0:
        return False
    storage = tensor.untyped_storage()
    start = storage.data_ptr()
    page_start = start - start % os.sysconf("SC_PAGE_SIZE")
    return libc.madvise(page_start, start - page_start + storage.nbytes(),
                        _MADV_POPULATE_WRITE) == 0


def import_extra_modules(modules: Iterable[str]) -> None:
    """Import each user file path or module name once, so its @register decorators run.

    Raises:
        FileNotFoundError / ImportError naming the entry when it cannot be loaded.
    """
    for entry in modules:
        if entry:
            load_user_module(entry)


def load_user_module(entry: str, key: str = "CONFIG.EXTRA_MODULES") -> ModuleType:
    """Import one user file path (``.py``) or module name, once per process, and return it.

    Args:
        entry: A path to a Python file, or an importable module name.
        key: The config key named in error messages.

    Raises:
        FileNotFoundError / ImportError naming ``key`` and the entry when it cannot be loaded.
    """
    if entry.endswith(".py") or os.sep in entry or "/" in entry:
        path = os.path.abspath(os.path.expanduser(entry))
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{key} entry {entry!r}: no such file (give a .py path or a module name)"
            )
        digest = hashlib.sha1(path.encode()).hexdigest()[:10]
        name = f"zoo_user_{os.path.splitext(os.path.basename(path))[0]}_{digest}"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except ModuleNotFoundError as e:
            del sys.modules[name]
            if not e.name:
                raise
            raise ImportError(f"{key} entry {entry!r}: {_importer(e, path)} imports {e.name}, "
                              f"{_NOT_INSTALLED}") from None
        except Exception:
            del sys.modules[name]
            raise
        return module
    try:
        return importlib.import_module(entry)
    except ModuleNotFoundError as e:
        if e.name and e.name != entry and not entry.startswith(e.name + "."):
            # The entry was found; an import inside it failed.
            raise ImportError(f"{key} entry {entry!r}: {entry} ({_importer(e, entry)}) imports "
                              f"{e.name}, {_NOT_INSTALLED}") from None
        raise ImportError(
            f"{key} entry {entry!r} could not be imported ({e}); "
            "give a .py path or a module on PYTHONPATH"
        ) from None


_NOT_INSTALLED = "which is not installed: install it in this environment, or put it on PYTHONPATH"


def _importer(e: ModuleNotFoundError, default: str) -> str:
    """``file line N`` of the import statement that raised ``e`` (its traceback's last frame
    outside importlib), else ``default``."""
    where = default
    tb = e.__traceback__
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith("<"):
            where = f"{tb.tb_frame.f_code.co_filename} line {tb.tb_lineno}"
        tb = tb.tb_next
    return where


@functools.lru_cache(maxsize=None)
def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX); oneDNN runs bf16
    convolutions and matmuls natively only there. Asked once per process (the CPU routes ask
    it on every conv3d call)."""
    import torch

    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(cpu, name, lambda: False)() for name in checks)
