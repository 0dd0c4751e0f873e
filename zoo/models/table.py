"""The model table: every registered model with its facts (tools/list_models.py, docs/models.md)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from .build import list_models, model_facts

__all__ = ["alias_rows", "format_alias_table", "format_table", "model_rows"]

COLUMNS = ("name", "task", "params", "gflops", "input", "crop", "top1")


def _input(facts: Dict[str, Any]) -> str:
    if facts.get("task") == "image":
        return "image"
    frames = facts.get("input_frames", "?")
    if facts.get("sampling") == "segments":
        return f"{frames} segments"
    return f"{frames} x {facts.get('sampling_stride', '?')}"


def model_rows(names: Optional[Sequence[str]] = None,
               recount: bool = False) -> List[Dict[str, str]]:
    """One row of strings per model.

    Args:
        names: Models to list (default: every registered architecture, aliases left out).
        recount: Measure params and GFLOPs now (meta device) instead of reading the facts; a
            value that differs from the recorded fact is marked with ``!``.
    """
    rows = []
    for name in names or list_models(aliases=False):
        facts = model_facts(name)
        params, gflops = facts.get("params"), facts.get("gflops")
        mark_p = mark_g = ""
        if recount and facts:
            from .flops import measure

            got = measure(name)
            mark_p = "" if params == got["params"] else "!"
            mark_g = "" if gflops is not None and abs(gflops - got["gflops"]) < 0.05 else "!"
            params, gflops = got["params"], got["gflops"]
        rows.append({
            "name": name,
            "task": str(facts.get("task", "?")),
            "params": f"{params / 1e6:.2f}M{mark_p}" if params else "?",
            "gflops": f"{gflops:.2f}{mark_g}" if gflops is not None else "?",
            "input": _input(facts) if facts else "?",
            "crop": str(facts.get("crop_size", "?")),
            "top1": f"{facts['published_top1']}" if "published_top1" in facts else "",
        })
    return rows


def format_table(rows: List[Dict[str, str]], markdown: bool = False) -> str:
    """Rows as an aligned plain-text table, or a Markdown table."""
    header = {"name": "model", "task": "task", "params": "params", "gflops": "GFLOPs",
              "input": "frames x stride", "crop": "crop", "top1": "K400 top-1"}
    if markdown:
        lines = ["| " + " | ".join(header[c] for c in COLUMNS) + " |",
                 "|" + "|".join("---" if c in ("name", "task", "input") else "---:"
                                for c in COLUMNS) + "|"]
        lines += ["| " + " | ".join(f"`{r[c]}`" if c == "name" else r[c] for c in COLUMNS)
                  + " |" for r in rows]
        return "\n".join(lines)
    widths = {c: max(len(header[c]), *(len(r[c]) for r in rows)) for c in COLUMNS}
    lines = ["  ".join(header[c].ljust(widths[c]) for c in COLUMNS).rstrip()]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in COLUMNS).rstrip() for r in rows]
    return "\n".join(lines)


ALIAS_COLUMNS = ("name", "arch", "classes", "input", "crop")


def alias_rows() -> List[Dict[str, str]]:
    """One row of strings per alias (a name whose facts carry ``alias_of``), sorted by name."""
    rows = []
    for name in list_models():
        facts = model_facts(name)
        if "alias_of" not in facts:
            continue
        rows.append({
            "name": name,
            "arch": facts["alias_of"],
            "classes": str(facts.get("num_classes") or "any"),
            "input": _input(facts),
            "crop": str(facts.get("crop_size", "?")),
        })
    return rows


def format_alias_table(rows: List[Dict[str, str]], markdown: bool = False) -> str:
    """Alias rows as an aligned plain-text table, or a Markdown table."""
    header = {"name": "alias", "arch": "architecture", "classes": "classes",
              "input": "frames x stride", "crop": "crop"}
    if markdown:
        lines = ["| " + " | ".join(header[c] for c in ALIAS_COLUMNS) + " |",
                 "|---|---|---:|---|---:|"]
        lines += ["| " + " | ".join(f"`{r[c]}`" if c in ("name", "arch") else r[c]
                                    for c in ALIAS_COLUMNS) + " |" for r in rows]
        return "\n".join(lines)
    widths = {c: max(len(header[c]), *(len(r[c]) for r in rows)) for c in ALIAS_COLUMNS}
    lines = ["  ".join(header[c].ljust(widths[c]) for c in ALIAS_COLUMNS).rstrip()]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in ALIAS_COLUMNS).rstrip() for r in rows]
    return "\n".join(lines)
