"""The model table: every registered model with its facts (tools/list_models.py, docs/models.md)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from .flops import measure
from .registry import list_models, model_facts
from .weights.table import default_tag, entries, table_rows

__all__ = ["alias_rows", "format_alias_table", "format_table", "format_weights_table",
           "model_rows"]

COLUMNS = ("name", "task", "params", "gflops", "input", "crop", "top1")


def _known(facts: Dict[str, Any], key: str) -> str:
    """A fact as text, ``?`` when absent or ``None``."""
    value = facts.get(key)
    return "?" if value is None else str(value)


def _input(facts: Dict[str, Any]) -> str:
    if facts.get("task") == "image":
        return "image"
    frames = _known(facts, "input_frames")
    if facts.get("sampling") == "segments":
        return f"{frames} segments"
    return f"{frames} x {_known(facts, 'sampling_stride')}"


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
            got = measure(name)
            mark_p = "" if params == got["params"] else "!"
            mark_g = "" if gflops is not None and abs(gflops - got["gflops"]) < 0.05 else "!"
            params, gflops = got["params"], got["gflops"]
        rows.append({
            "name": name,
            "task": _known(facts, "task"),
            "params": f"{params / 1e6:.2f}M{mark_p}" if params else "?",
            "gflops": f"{gflops:.2f}{mark_g}" if gflops is not None else "?",
            "input": _input(facts) if facts else "?",
            "crop": _known(facts, "crop_size"),
            "top1": "" if facts.get("published_top1") is None else f"{facts['published_top1']}",
            "weights": _weight_tags(name),
        })
    return rows


def _weight_tags(name: str) -> str:
    """The weights tags of a model, the one ``PRETRAINED True`` means first ("" when none)."""
    tags, first = list(entries(name)), default_tag(name)
    return ",".join(sorted(tags, key=lambda t: t != first))


def _render(rows: List[Dict[str, str]], cols: Sequence[str], header: Dict[str, str],
            markdown: bool, code: Sequence[str] = ("name",),
            right: Sequence[str] = ()) -> str:
    """Rows as an aligned plain-text table, or a Markdown table (``code`` columns in backticks,
    ``right`` columns right-aligned)."""
    if markdown:
        lines = ["| " + " | ".join(header[c] for c in cols) + " |",
                 "|" + "|".join("---:" if c in right else "---" for c in cols) + "|"]
        lines += ["| " + " | ".join(f"`{r[c]}`" if c in code else r[c] for c in cols) + " |"
                  for r in rows]
        return "\n".join(lines)
    widths = {c: max(len(header[c]), *(len(r[c]) for r in rows)) for c in cols}
    lines = ["  ".join(header[c].ljust(widths[c]) for c in cols).rstrip()]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in cols).rstrip() for r in rows]
    return "\n".join(lines)


def format_table(rows: List[Dict[str, str]], markdown: bool = False) -> str:
    """Rows as an aligned plain-text table, or a Markdown table (without the weights column:
    docs/models.md lists the weights in a table of their own)."""
    header = {"name": "model", "task": "task", "params": "params", "gflops": "GFLOPs",
              "input": "frames x stride", "crop": "crop", "top1": "K400 top-1",
              "weights": "weights (MODEL.PRETRAINED)"}
    if markdown:
        return _render(rows, COLUMNS, header, True,
                       right=("params", "gflops", "crop", "top1"))
    return _render(rows, COLUMNS + ("weights",), header, False)


def format_weights_table(names: Optional[Sequence[str]] = None, markdown: bool = False) -> str:
    """The published weights per architecture and tag (zoo/models/weights/table.py).

    Args:
        names: Models to list (default: every architecture with weights); an alias shows its
            base architecture's weights.
        markdown: A Markdown table (docs/models.md) instead of aligned text.
    """
    rows = table_rows(list(names) if names else None)
    if not rows:
        return "no published weights for " + ", ".join(names or [])
    header = {"name": "model", "tag": "tag", "format": "format", "dataset": "trained on",
              "hash": "hash (sha256 prefix unless marked)", "url": "URL"}
    return _render(rows, ("name", "tag", "format", "dataset", "hash", "url"), header, markdown,
                   code=("name", "hash"))


ALIAS_COLUMNS = ("name", "arch", "classes", "input", "crop")


def alias_rows() -> List[Dict[str, str]]:
    """One row of strings per alias (a name whose facts carry ``alias_of``), sorted by name."""
    rows = []
    for name in list_models():
        facts = model_facts(name)
        if not facts.get("alias_of"):
            continue
        rows.append({
            "name": name,
            "arch": facts["alias_of"],
            "classes": str(facts.get("num_classes") or "any"),
            "input": _input(facts),
            "crop": _known(facts, "crop_size"),
        })
    return rows


def format_alias_table(rows: List[Dict[str, str]], markdown: bool = False) -> str:
    """Alias rows as an aligned plain-text table, or a Markdown table."""
    header = {"name": "alias", "arch": "architecture", "classes": "classes",
              "input": "frames x stride", "crop": "crop"}
    return _render(rows, ALIAS_COLUMNS, header, markdown, code=("name", "arch"),
                   right=("classes", "crop"))
