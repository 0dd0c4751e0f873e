"""Accuracy computation and the run's metric sinks (metrics.jsonl + TensorBoard), rank 0 only."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Dict, Optional, Sequence

import torch

from ..utils import comm

logger = logging.getLogger(__name__)


def topk_correct(scores: torch.Tensor, labels: torch.Tensor, ks: Sequence[int]) -> Dict[int, int]:
    """How many rows have the label among their top-k scores, for each k (k clipped to classes)."""
    maxk = min(max(ks), scores.shape[1])
    top = scores.topk(maxk, dim=1).indices
    hits = top.eq(labels.view(-1, 1))
    return {k: int(hits[:, : min(k, maxk)].any(dim=1).sum()) for k in ks}


def show_progress(enabled: bool = True) -> bool:
    """Whether this process should draw a tqdm bar: rank 0, and only on an interactive console."""
    return enabled and comm.is_main_process() and sys.stderr.isatty()


def classification_metrics(scores: torch.Tensor, labels: torch.Tensor) -> Dict[str, float]:
    """top1, top5 (top-k with k = min(5, classes)), mean class accuracy, all in percent."""
    n = max(1, labels.numel())
    hits = topk_correct(scores, labels, (1, 5))
    pred = scores.argmax(dim=1)
    per_class = []
    for c in labels.unique():
        mask = labels == c
        per_class.append((pred[mask] == c).double().mean().item())
    return {
        "top1": 100.0 * hits[1] / n,
        "top5": 100.0 * hits[5] / n,
        "mean_class_acc": 100.0 * sum(per_class) / max(1, len(per_class)),
    }


class MetricsWriter:
    """Appends JSON lines to ``metrics.jsonl`` and scalars to TensorBoard; a no-op off rank 0."""

    def __init__(self, output_dir: str, tb_dir: Optional[str] = None) -> None:
        self.enabled = comm.is_main_process()
        self.path = os.path.join(output_dir, "metrics.jsonl")
        self.tb_dir = tb_dir if self.enabled else None
        self.tb = None

    def _open_tensorboard(self, purge_step: Optional[int] = None) -> None:
        """The TensorBoard writer, once; ``purge_step`` hides the events an earlier run of the
        folder wrote at that step and later (a resumed run writes those steps again)."""
        if self.tb is not None or not self.tb_dir:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(log_dir=self.tb_dir, purge_step=purge_step)
        except ImportError:  # tensorboard is optional at run time
            logger.warning("tensorboard is not installed; writing metrics.jsonl only")
        self.tb_dir = None

    def start(self, resumed_epoch: int, resumed_batches: int = 0,
              resumed_steps: int = 0) -> None:
        """Begin this run's records: after a resume, drop the records of epochs after the
        checkpoint (a killed epoch is trained again); on a fresh start, keep an older file of the
        same folder as ``metrics.<time>.jsonl`` instead of mixing two runs in one file (and an
        older run's TensorBoard events in a folder of their own, ``earlier_<time>/``).

        ``resumed_batches`` > 0: the checkpoint was mid-epoch, after that many batches of epoch
        ``resumed_epoch + 1``; that epoch's ``train`` records of those batches are kept (their
        ``batch``), and so are its records of any other split with a ``batch`` (a hook's) up to
        that one. A record without ``batch`` (an older zoo's) is kept when its ``iter`` is at
        most ``resumed_steps``, the checkpoint's optimizer steps. TensorBoard's events after
        those steps are hidden likewise (its ``purge_step``; under gradient accumulation a
        mid-epoch checkpoint's next record shares its step and may show twice there).
        """
        resumed = resumed_epoch > 0 or resumed_batches > 0
        if not resumed and self.tb_dir:
            _set_aside_events(self.tb_dir)
        self._open_tensorboard(resumed_steps + 1 if resumed else None)
        if not self.enabled or not os.path.isfile(self.path):
            return
        if resumed_epoch <= 0 and resumed_batches <= 0:
            os.replace(self.path, self.path.replace(".jsonl", f".{int(time.time())}.jsonl"))
            return
        with open(self.path, encoding="utf-8") as f:
            lines = f.readlines()
        kept = []
        for line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by the crash
            epoch = record.get("epoch", 0)
            # Mid-epoch: the train records and any other record with a batch (a hook's).
            if epoch <= resumed_epoch or (
                    resumed_batches > 0 and epoch == resumed_epoch + 1
                    and (record.get("split") == "train" or "batch" in record)
                    and _before_stop(record, resumed_batches, resumed_steps)):
                kept.append(line)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(kept)
        os.replace(tmp, self.path)

    def write(self, record: Dict, step: int) -> None:
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        self._open_tensorboard()
        if self.tb is not None:
            split = record.get("split", "train")
            for key, value in record.items():
                if isinstance(value, (int, float)) and key not in ("epoch", "iter", "batch"):
                    self.tb.add_scalar(f"{split}/{key}", value, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def _set_aside_events(tb_dir: str) -> None:
    """Move an earlier run's TensorBoard event files into ``tb_dir/earlier_<time>/``: TensorBoard
    shows that folder as a run of its own instead of two runs' curves in one."""
    if not os.path.isdir(tb_dir):
        return
    names = [n for n in os.listdir(tb_dir) if n.startswith("events.out.tfevents.")]
    if not names:
        return
    aside = os.path.join(tb_dir, time.strftime("earlier_%Y%m%d-%H%M%S", time.gmtime()))
    os.makedirs(aside, exist_ok=True)
    for name in names:
        os.replace(os.path.join(tb_dir, name), os.path.join(aside, name))


def _before_stop(record: Dict, batches: int, steps: int) -> bool:
    """Whether a ``train`` record of the epoch a mid-epoch checkpoint stopped in came before the
    checkpoint. Its ``batch`` says so; ``iter`` alone cannot under gradient accumulation, where
    the first micro-batch after the checkpoint's step has that step's ``iter`` too."""
    if "batch" in record:
        return record["batch"] <= batches
    return record.get("iter", 0) <= steps
