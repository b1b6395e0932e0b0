"""Blurry task boundaries: each task's training data holds some samples of its neighbours.

Why: real streams do not switch classes at a clean boundary. In the *blurry* setting (Aljundi
et al., CVPR 2019's task-free stream; Bang et al., "Rainbow Memory", CVPR 2021, Blurry-M) most
of a task's samples are its own classes, and a fraction M comes from the other tasks. Here a
seeded fraction of every task's training samples moves to a neighbouring task — the previous
or the next one, drawn per sample (the first and last task have one neighbour) — so classes
leak into the tasks around them while every sample is still trained on exactly once per epoch
of its new task. Test and validation sets, and each task's class list (task-IL masks, the
class-IL classes seen so far), stay those of the clean sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["blurry_assignment", "blurry_tasks"]


def blurry_assignment(sizes: Sequence[int], fraction: float, seed: int) -> list[list[tuple[int, torch.Tensor]]]:
    """For each task, ``(source task, positions in its training split)`` pairs it trains on:
    its own kept samples first, then what its neighbours gave it.

    Args:
        sizes: the tasks' training-set sizes.
        fraction: the share of each task's samples that moves (0 ≤ fraction < 1), rounded per task.
        seed: seeds which samples move and where (the same for any run of the same seed).
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"blurry must be a fraction in [0, 1), got {fraction!r}")
    count = len(sizes)
    generator = torch.Generator().manual_seed(int(seed) % (1 << 63))
    kept: list[torch.Tensor] = []
    given: list[list[tuple[int, torch.Tensor]]] = [[] for _ in range(count)]
    for t, n in enumerate(sizes):
        order = torch.randperm(int(n), generator=generator)
        moving = int(round(fraction * n)) if count > 1 else 0
        kept.append(order[moving:].sort().values)
        if not moving:
            continue
        later = torch.randint(0, 2, (moving,), generator=generator).bool()
        if t == 0:
            later[:] = True
        elif t == count - 1:
            later[:] = False
        moved = order[:moving]
        for target, chosen in ((t + 1, later), (t - 1, ~later)):
            if chosen.any():
                given[target].append((t, moved[chosen].sort().values))
    return [[(t, kept[t]), *sorted(given[t], key=lambda item: item[0])] for t in range(count)]


def blurry_tasks(trains: Sequence[Any], fraction: float, seed: int) -> list[Any]:
    """The tasks' training splits with ``fraction`` of each moved to its neighbours
    (:func:`blurry_assignment`); the splits themselves when ``fraction`` is 0."""
    if fraction == 0.0:
        return list(trains)
    from .sequences import concat_splits

    plan = blurry_assignment([len(t) for t in trains], fraction, seed)
    return [concat_splits([trains[source].subset(positions) for source, positions in parts if len(positions)])
            for parts in plan]  # fmt: skip
