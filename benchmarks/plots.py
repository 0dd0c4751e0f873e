"""Charts of benchmark results (matplotlib, written as PNG like tools/plot_log.py's)."""

from __future__ import annotations

from typing import Optional, Sequence


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bar_chart(path: str, labels: Sequence[str], values: Sequence[float], title: str,
              xlabel: str, notes: Optional[Sequence[str]] = None, footer: str = "") -> None:
    """Horizontal bars, one per label (top to bottom), each with its value and note written on it.

    Args:
        path: PNG to write.
        labels: One label per bar.
        values: Bar lengths.
        title: Chart title.
        xlabel: Unit of the values.
        notes: Optional text after each value (e.g. "1.9x").
        footer: Small print under the chart (the machine the figures came from).
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(labels) + 1.6))
    ys = list(range(len(labels)))[::-1]
    ax.barh(ys, values, color=["#4c72b0" if "zoo" in lb else "#b0b0b0" for lb in labels])
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=9)
    top = max(values) if values else 1.0
    for y, v, i in zip(ys, values, range(len(values))):
        text = f"{v:.3g}" + (f"  {notes[i]}" if notes and notes[i] else "")
        ax.text(v + top * 0.01, y, text, va="center", fontsize=9)
    ax.set_xlim(0, top * 1.3)
    ax.set(title=title, xlabel=xlabel)
    ax.grid(alpha=0.3, axis="x")
    if footer:
        fig.text(0.01, 0.01, footer, fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.04 if footer else 0, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def scaling_chart(path: str, procs: Sequence[int], throughput: Sequence[float],
                  efficiency: Sequence[float], unit: str, title: str, footer: str = "") -> None:
    """Throughput against processes (with the ideal linear line) and efficiency per count."""
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ideal = [throughput[0] * n / procs[0] for n in procs]
    ax1.plot(procs, ideal, "--", color="#999999", label="linear")
    ax1.plot(procs, throughput, "o-", color="#4c72b0", label="zoo")
    for n, v in zip(procs, throughput):
        ax1.annotate(f"{v:.1f} ({v / throughput[0]:.2f}x)", (n, v), textcoords="offset points",
                     xytext=(0, -16), ha="center", fontsize=9)
    ax1.set(title=title, xlabel="worker processes", ylabel=unit, xticks=list(procs))
    ax1.set_ylim(0, max(ideal + list(throughput)) * 1.2)
    ax1.legend(fontsize=8, loc="upper left")
    ax2.bar([str(n) for n in procs], [100 * e for e in efficiency], color="#4c72b0")
    for i, e in enumerate(efficiency):
        ax2.text(i, 100 * e + 1, f"{100 * e:.0f}%", ha="center", fontsize=9)
    ax2.axhline(100, ls="--", color="#999999")
    ax2.set(title="efficiency = speed-up / processes", xlabel="worker processes",
            ylabel="%", ylim=(0, 115))
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    if footer:
        fig.text(0.01, 0.01, footer, fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.05 if footer else 0, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def machine_footer(machine: dict) -> str:
    """One line naming the machine, for the bottom of a chart."""
    gpu = f", {machine['gpu']}" if machine.get("gpu") else ""
    load = machine.get("load_average_start")
    load_txt = f", load avg {load[0]:.2f}" if load else ""
    return (f"{machine.get('cpu', '?')} ({machine.get('cores', '?')} cores){gpu}, torch "
            f"{machine.get('torch', '?')}{load_txt}")
