"""Loader throughput: clips/s that ``build_loader`` delivers for a config (``tools/benchmark.py
data``): decode, sample, transform, collate and worker processes, for each ``DATA.NUM_WORKERS``.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Sequence


def loader_throughput(cfg, workers: Sequence[int] = (0, 2), batches: int = 20, warmup: int = 3,
                      split: str = "train") -> List[Dict[str, Any]]:
    """Clips/s of the ``split`` loader for each ``DATA.NUM_WORKERS`` value.

    The first ``warmup`` batches (worker start-up, first decodes) are not timed. The loader is
    iterated again from its start when an epoch has fewer batches than needed.

    Args:
        cfg: A loaded config (synthetic data is generated first when it is enabled).
        workers: ``DATA.NUM_WORKERS`` values to time.
        batches: Timed batches per value.
        warmup: Untimed batches per value.
        split: "train", "val" or "test".
    """
    from ..data import build_loader

    rows = []
    for n in workers:
        c = cfg.clone()
        c.defrost()
        c.CONFIG.DATA.NUM_WORKERS = int(n)
        c.freeze()
        loader = build_loader(c, split)
        clips, bad, start, seen, epoch = 0, 0, None, 0, 0
        while seen < warmup + batches:
            if hasattr(loader.sampler, "set_epoch"):
                loader.sampler.set_epoch(epoch)
            for batch in loader:
                if seen == warmup:
                    start = time.perf_counter()
                if seen >= warmup:
                    clips += int(batch[0].shape[0])
                    bad += int(batch[3].sum())
                seen += 1
                if seen >= warmup + batches:
                    break
            epoch += 1
        seconds = time.perf_counter() - start
        rows.append({
            "split": split, "num_workers": int(n), "batch": int(loader.batch_size),
            "clip_shape": "x".join(str(v) for v in batch[0].shape[1:]), "batches": batches,
            "seconds": round(seconds, 4), "clips_per_s": round(clips / seconds, 2),
            "skipped_videos": bad, "decoder": cfg.CONFIG.DATA.DECODER,
        })
        del loader
    return rows
