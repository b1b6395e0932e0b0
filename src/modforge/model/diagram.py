"""The model-flow diagram of a built model: its stages left to right, the batch keys between them,
and the losses with the keys they read — what ``modforge describe model CONFIG --diagram`` draws.

Drawn with matplotlib (imported only here), from what the builder recorded
(:class:`~modforge.model.modular.StageInfo`, :class:`~modforge.model.modular.LossInfo`), so the
picture is the model that runs, not a hand-drawn sketch of it.
"""

from __future__ import annotations

from typing import Any

from .modular import ModularModel

__all__ = ["draw_model_flow", "flow_edges"]


def _dim(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return "?" if value is None else str(value)


def flow_edges(model: ModularModel) -> list[tuple[str, str, str]]:
    """``(from, to, batch key)`` for every arrow of the diagram: each stage reads ``input`` or
    the stage its ``prev`` names; the last stage's output is ``logits`` (and what precedes a
    head is ``embedding``/``features``); each loss reads its input key and target key."""
    edges = []
    for info in model.stage_info:
        source = info.prev or "input"
        edges.append((source, info.name, "batch['input']" if source == "input" else f"batch['{source}']"))
    last = model.stage_info[-1].name
    edges.append((last, "logits", "batch['logits']"))
    for loss in model.loss_info:
        origin = {"logits": "logits", "embedding": last, "features": last}.get(loss.input_key, loss.input_key)
        edges.append((origin, f"loss:{loss.key}", f"batch['{loss.input_key}'], batch['{loss.target_key}']"))
    return edges


def draw_model_flow(model: ModularModel, title: str = "") -> Any:
    """A matplotlib figure of ``model``'s flow: one box per stage (name, kind and type, layout
    and size out), ``input`` and ``logits``, one box per loss, arrows labelled with the batch keys."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    stages = model.stage_info
    columns = ["input", *(s.name for s in stages), "logits"]
    x = {name: i * 2.6 for i, name in enumerate(columns)}
    y = {name: 0.0 for name in columns}
    labels = {"input": f"input\n{model.input_layout}", "logits": f"logits\n{_dim(model.out_dim)}"}
    for info in stages:
        labels[info.name] = f"{info.name}\n{info.kind} '{info.type}'\n{info.out_layout} {_dim(info.out_dim)}"
    for i, loss in enumerate(model.loss_info):
        name = f"loss:{loss.key}"
        x[name], y[name] = x["logits"] - 1.3 + 2.6 * (i % 2), -2.2 - 1.4 * (i // 2)
        labels[name] = f"loss '{loss.key}'\n{loss.type} × {loss.weight:g}"
    width = max(6.0, 2.6 * len(columns))
    height = 3.2 + 1.4 * ((len(model.loss_info) + 1) // 2)
    fig, ax = plt.subplots(figsize=(width, height))
    boxes = {}
    for name, label in labels.items():
        colour = "#e8f0fe" if not name.startswith("loss:") else "#fde8e8"
        boxes[name] = ax.text(x[name], y[name], label, ha="center", va="center", fontsize=8, zorder=2,
                              bbox={"boxstyle": "round,pad=0.5", "facecolor": colour, "edgecolor": "#777"})  # fmt: skip
    for source, target, key in flow_edges(model):
        if source not in boxes or target not in boxes:
            continue
        down = y[target] < y[source]  # a loss below: from the bottom of its source to the top of the loss
        ax.annotate("", xy=(0.5, 1.0) if down else (0.0, 0.5), xycoords=boxes[target],
                    xytext=(0.5, 0.0) if down else (1.0, 0.5), textcoords=boxes[source],
                    arrowprops={"arrowstyle": "-|>", "color": "#555", "shrinkA": 4, "shrinkB": 4}, zorder=1)  # fmt: skip
        ax.text((x[source] + x[target]) / 2 + (0.15 if down else 0), (y[source] + y[target]) / 2 + 0.22, key,
                ha="left" if down else "center", va="bottom", fontsize=7, color="#333")  # fmt: skip
    ax.set_xlim(min(x.values()) - 1.4, max(x.values()) + 1.4)
    ax.set_ylim(min(y.values()) - 1.0, 1.0)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
