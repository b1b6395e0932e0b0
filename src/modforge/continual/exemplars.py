"""Exemplar memory chosen by *herding* (iCaRL, Rebuffi et al., CVPR 2017, Algorithm 4).

Unlike a :class:`~modforge.continual.buffer.Buffer`, which keeps a random sample of the
stream, an exemplar memory keeps, for every class, the samples whose normalised features
best approximate the class's mean feature — chosen one at a time, each new exemplar being
the one that brings the running mean of the chosen set closest to the class mean. The
order of choice is a priority order: when a new task arrives and each class's share of
the memory shrinks, a class keeps the *first* ``m`` of its exemplars.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["ExemplarMemory", "herding"]


def herding(features: torch.Tensor, count: int) -> torch.Tensor:
    """Indices of ``count`` rows of ``features`` [N, D] in herding order: the k-th pick
    minimises ``‖μ − (f_1 + … + f_k)/k‖`` over the rows not yet picked (μ: the mean row).
    Pass features already normalised as the caller wants them compared."""
    features = features.detach().float()
    count = min(int(count), len(features))
    mean = features.mean(0)
    running = torch.zeros_like(mean)
    available = torch.ones(len(features), dtype=torch.bool, device=features.device)
    picked: list[int] = []
    for k in range(1, count + 1):
        distance = ((mean - (running + features) / k) ** 2).sum(1)
        distance[~available] = float("inf")
        index = int(distance.argmin())
        picked.append(index)
        available[index] = False
        running += features[index]
    return torch.tensor(picked, dtype=torch.long)


class ExemplarMemory:
    """Per-class exemplars (inputs, in priority order) within a total of ``capacity``.

    Args:
        capacity: the total number of exemplars over all classes.
        seed: seeds the draws of :meth:`sample`.
    """

    def __init__(self, capacity: int, seed: int = 0):
        if capacity < 1:
            raise ValueError(f"exemplar memory capacity must be at least 1, got {capacity}")
        self.capacity = int(capacity)
        self.generator = torch.Generator().manual_seed(int(seed) % (1 << 63))
        self.exemplars: dict[int, torch.Tensor] = {}  # class -> inputs [m, ...], best first

    def __len__(self) -> int:
        return sum(len(x) for x in self.exemplars.values())

    @property
    def is_empty(self) -> bool:
        return len(self) == 0

    def per_class(self, classes: int) -> int:
        """Each class's share when ``classes`` classes split the memory."""
        return max(1, self.capacity // max(1, classes))

    def shrink(self, per_class: int) -> None:
        """Keep the first ``per_class`` exemplars of every class."""
        self.exemplars = {c: x[:per_class] for c, x in self.exemplars.items()}

    def add_class(self, label: int, inputs: torch.Tensor, features: torch.Tensor, count: int) -> torch.Tensor:
        """Choose ``count`` exemplars of class ``label`` among ``inputs`` by herding on
        ``features`` (one row per input); returns the chosen indices."""
        chosen = herding(features, count)
        self.exemplars[int(label)] = inputs[chosen.to(inputs.device)].detach().cpu().clone()
        return chosen

    def all(self) -> dict[str, torch.Tensor]:
        """Every exemplar (``input``, ``label``), class by class."""
        if self.is_empty:
            raise ValueError("the exemplar memory is empty")
        classes = sorted(self.exemplars)
        inputs = torch.cat([self.exemplars[c] for c in classes])
        labels = torch.cat([torch.full((len(self.exemplars[c]),), c, dtype=torch.long) for c in classes])
        return {"input": inputs, "label": labels}

    def sample(self, size: int) -> dict[str, torch.Tensor]:
        """``size`` exemplars drawn uniformly without replacement (all when there are fewer)."""
        everything = self.all()
        index = torch.randperm(len(everything["label"]), generator=self.generator)[: int(size)]
        return {k: v[index] for k, v in everything.items()}

    # -------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        """Tensors, lists and numbers only (``weights_only``-safe)."""
        classes = sorted(self.exemplars)
        return {
            "capacity": self.capacity,
            "classes": classes,
            "inputs": [self.exemplars[c].clone() for c in classes],
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"checkpoint exemplar memory holds {state['capacity']}, this one {self.capacity}")
        self.exemplars = {int(c): x.clone() for c, x in zip(state["classes"], state["inputs"], strict=True)}
        self.generator.set_state(state["generator"])
