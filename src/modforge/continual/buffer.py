"""Replay buffers for continual learning: a fixed number of past samples, with whatever a
method wants to remember about them (its logits for DER, its task id, any extra tensor).

Two ways to decide what stays:

* ``reservoir`` (Vitter's algorithm R, the default in Mammoth/DER): the i-th sample seen
  (1-based) is kept with probability ``capacity / i``, replacing a uniformly chosen slot,
  so at any time every sample seen so far is in the buffer with the same probability;
* ``class_balanced`` (class-balancing reservoir sampling, Chrysakis & Moens, ICML 2020): a
  class is *full* once it is, or has ever been, a largest class in the full buffer; a sample
  of a class that is not full replaces a random sample of a largest class; a sample of a full
  class replaces a random sample of its own class with probability (its class's slots /
  samples of its class seen), so the classes stay balanced and, within a full class, every
  sample seen has the same chance to be held.

All randomness comes from the buffer's own ``torch.Generator`` (seeded), and the buffer's
contents, counters and generator state are its ``state_dict`` — part of a checkpoint, so a
resumed run replays exactly what an uninterrupted one would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch

__all__ = ["Buffer", "Policy"]

Policy = Literal["reservoir", "class_balanced"]


class Buffer:
    """A replay memory of at most ``capacity`` samples.

    Args:
        capacity: the number of samples kept.
        policy: 'reservoir' or 'class_balanced'.
        seed: seeds the buffer's generator (which samples stay, which are drawn).
    """

    def __init__(self, capacity: int, policy: Policy = "reservoir", seed: int = 0):
        if capacity < 1:
            raise ValueError(f"buffer capacity must be at least 1, got {capacity}")
        if policy not in ("reservoir", "class_balanced"):
            raise ValueError(f"unknown buffer policy {policy!r}; one of reservoir, class_balanced")
        self.capacity, self.policy = int(capacity), policy
        self.generator = torch.Generator().manual_seed(int(seed) % (1 << 63))
        self.seen = 0  # samples offered so far
        self.size = 0  # samples held
        self.class_seen: dict[int, int] = {}  # samples offered per class (class_balanced)
        self.full: set[int] = set()  # classes that are or were a largest class (class_balanced)
        self.data: dict[str, torch.Tensor] = {}

    def __len__(self) -> int:
        return self.size

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    # ------------------------------------------------------------------- adding
    def add(self, labels: torch.Tensor, **tensors: torch.Tensor) -> None:
        """Offer a batch: ``labels`` [B] (integer classes) and any tensors with B rows
        (``input=x, logits=z, task=t``...). Every call must give the same keys."""
        labels = labels.detach().reshape(-1)
        batch = {"label": labels, **{k: v.detach() for k, v in tensors.items()}}
        for key, value in batch.items():
            if value.shape[0] != labels.shape[0]:
                raise ValueError(f"buffer.add: '{key}' has {value.shape[0]} rows for {labels.shape[0]} labels")
        if self.data and set(batch) != set(self.data):
            raise ValueError(f"buffer.add: keys {sorted(batch)} differ from the stored {sorted(self.data)}")
        if self.data and self.data["label"].device != labels.device:  # restored from a (CPU) checkpoint
            self.data = {k: v.to(batch[k].device) for k, v in self.data.items()}
        if not self.data:
            self.data = {
                k: torch.zeros((self.capacity, *v.shape[1:]), dtype=v.dtype, device=v.device) for k, v in batch.items()
            }
        slots = self._reservoir_slots(len(labels)) if self.policy == "reservoir" else self._balanced_slots(labels)
        last_row = {int(slot): row for row, slot in enumerate(slots.tolist()) if slot >= 0}  # a later row wins a slot
        if last_row:
            targets = torch.tensor(list(last_row), dtype=torch.long)
            rows = torch.tensor(list(last_row.values()), dtype=torch.long)
            for key, value in batch.items():
                self.data[key][targets.to(value.device)] = value[rows.to(value.device)]

    def _reservoir_slots(self, n: int) -> torch.Tensor:
        """Target slot per incoming row (-1: not kept), by algorithm R."""
        slots = torch.full((n,), -1, dtype=torch.long)
        for i in range(n):
            self.seen += 1
            if self.size < self.capacity:
                slots[i] = self.size
                self.size += 1
                continue
            j = int(torch.randint(0, self.seen, (1,), generator=self.generator))
            if j < self.capacity:
                slots[i] = j
        return slots

    def _balanced_slots(self, labels: torch.Tensor) -> torch.Tensor:
        """Target slot per incoming row (-1: not kept), by class-balancing reservoir sampling."""
        slots = torch.full((len(labels),), -1, dtype=torch.long)
        stored = self.data["label"]
        for i, label in enumerate(labels.tolist()):
            self.seen += 1
            self.class_seen[label] = self.class_seen.get(label, 0) + 1
            if self.size < self.capacity:
                slots[i] = self.size
                stored[self.size] = label  # later rows of this batch see the new counts
                self.size += 1
                continue
            classes, counts = stored.unique(return_counts=True)
            own = int(counts[classes == label].sum())
            largest = classes[counts == counts.max()]
            self.full.update(int(c) for c in largest)
            if label not in self.full:  # take a slot from one of the largest classes
                pick = largest[torch.randint(0, len(largest), (1,), generator=self.generator)]
                victims = (stored == pick).nonzero().reshape(-1)
            else:  # a largest class: reservoir sampling within the class
                chance = own / self.class_seen[label]
                if float(torch.rand(1, generator=self.generator)) >= chance:
                    continue
                victims = (stored == label).nonzero().reshape(-1)
            slot = int(victims[torch.randint(0, len(victims), (1,), generator=self.generator)])
            slots[i] = slot
            stored[slot] = label
        return slots

    # ------------------------------------------------------------------ drawing
    def sample(self, size: int, keys: tuple[str, ...] | None = None) -> dict[str, torch.Tensor]:
        """``size`` stored samples drawn uniformly without replacement (all of them when the
        buffer holds fewer), as a dict of the stored keys (or ``keys``)."""
        if self.is_empty:
            raise ValueError("the buffer is empty: nothing to sample")
        count = min(int(size), self.size)
        index = torch.randperm(self.size, generator=self.generator)[:count]
        return self._take(index, keys)

    def all(self, keys: tuple[str, ...] | None = None) -> dict[str, torch.Tensor]:
        """Every stored sample, in slot order."""
        return self._take(torch.arange(self.size), keys)

    def _take(self, index: torch.Tensor, keys: tuple[str, ...] | None) -> dict[str, torch.Tensor]:
        wanted = keys or tuple(self.data)
        missing = [k for k in wanted if k not in self.data]
        if missing:
            raise KeyError(f"the buffer stores no {', '.join(missing)} (it stores: {', '.join(self.data)})")
        return {k: self.data[k][index.to(self.data[k].device)] for k in wanted}

    # -------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly (tensors and plain values: ``weights_only``-safe)."""
        return {
            "capacity": self.capacity,
            "policy": self.policy,
            "seen": self.seen,
            "size": self.size,
            "class_seen": dict(self.class_seen),
            "full": sorted(self.full),
            "generator": self.generator.get_state(),
            "data": {k: v.clone() for k, v in self.data.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (the capacity and policy must match)."""
        if state["capacity"] != self.capacity or state["policy"] != self.policy:
            raise ValueError(
                f"checkpoint buffer is {state['policy']} × {state['capacity']}, this one {self.policy} × {self.capacity}"
            )
        self.seen, self.size = int(state["seen"]), int(state["size"])
        self.class_seen = {int(k): int(v) for k, v in state.get("class_seen", {}).items()}
        self.full = {int(c) for c in state.get("full", [])}
        self.generator.set_state(state["generator"])
        self.data = {k: v.clone() for k, v in state["data"].items()}
