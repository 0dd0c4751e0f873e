"""Charts of a run: training curves from metrics.jsonl and the confusion matrix (matplotlib)."""

from __future__ import annotations

import csv
import json
import os
from typing import Dict, List, Sequence

import torch


def read_metrics(run_dir: str) -> List[Dict]:
    """The records of ``run_dir/metrics.jsonl`` (a line that does not parse is skipped)."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist: is {run_dir!r} a zoo run folder?")
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut short by a crash
    return records


def curves(records: Sequence[Dict]) -> Dict[str, List]:
    """Series to plot: train loss and lr by iteration, val top-1/top-5 and loss by epoch."""
    train = [r for r in records if r.get("split") == "train"]
    val = [r for r in records if r.get("split") == "val"]
    return {
        "train_iter": [r["iter"] for r in train],
        "train_loss": [r["loss"] for r in train],
        "lr": [r["lr"] for r in train],
        "val_epoch": [r["epoch"] for r in val],
        "val_top1": [r["top1"] for r in val],
        "val_top5": [r["top5"] for r in val],
        "val_loss": [r["loss"] for r in val],
    }


def plot_runs(run_dirs: Sequence[str], out_path: str) -> Dict[str, Dict[str, List]]:
    """Draw loss, validation accuracy and LR of one or more runs into one PNG (runs overlaid,
    labelled by folder name). Returns the plotted series per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = {}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for run_dir in run_dirs:
        name = os.path.basename(os.path.normpath(run_dir))
        c = curves(read_metrics(run_dir))
        data[name] = c
        axes[0].plot(c["train_iter"], c["train_loss"], label=f"{name} train")
        axes[1].plot(c["val_epoch"], c["val_top1"], marker="o", label=f"{name} top-1")
        axes[2].plot(c["train_iter"], c["lr"], label=name)
    axes[0].set(title="training loss", xlabel="iteration", ylabel="loss")
    axes[1].set(title="validation accuracy", xlabel="epoch", ylabel="top-1 (%)")
    axes[2].set(title="learning rate", xlabel="iteration", ylabel="lr")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return data


def confusion_matrix(preds: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """``m[true, pred]`` counts."""
    m = torch.zeros(num_classes, num_classes, dtype=torch.long)
    m.index_put_((labels.long(), preds.long()), torch.ones_like(labels, dtype=torch.long),
                 accumulate=True)
    return m


def write_confusion(matrix: torch.Tensor, class_names: Sequence[str], csv_path: str,
                    png_path: str) -> None:
    """The confusion matrix as CSV (rows = true class) and as a PNG heat map (up to 60 classes
    are labelled; larger matrices are drawn without tick labels)."""
    n = matrix.shape[0]
    names = [class_names[i] if i < len(class_names) else str(i) for i in range(n)]
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["true \\ pred", *names])
        for i in range(n):
            w.writerow([names[i], *matrix[i].tolist()])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = min(4 + 0.35 * n, 30)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(matrix.numpy(), cmap="Blues")
    if n <= 60:
        ax.set_xticks(range(n), names, rotation=90, fontsize=8)
        ax.set_yticks(range(n), names, fontsize=8)
        if n <= 20:
            for i in range(n):
                for j in range(n):
                    ax.text(j, i, int(matrix[i, j]), ha="center", va="center", fontsize=8)
    ax.set(xlabel="predicted", ylabel="true", title="confusion matrix")
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
