"""Replay buffers for continual learning: a fixed number of past samples, with whatever a
method wants to remember about them (its logits for DER, its task id, any extra tensor).

Three ways to decide what stays:

* ``reservoir`` (Vitter's algorithm R, the default in Mammoth/DER): the i-th sample seen
  (1-based) is kept with probability ``capacity / i``, replacing a uniformly chosen slot,
  so at any time every sample seen so far is in the buffer with the same probability;
* ``class_balanced`` (class-balancing reservoir sampling, Chrysakis & Moens, ICML 2020): a
  class is *full* once it is, or has ever been, a largest class in the full buffer; a sample
  of a class that is not full replaces a random sample of a largest class; a sample of a full
  class replaces a random sample of its own class with probability (its class's slots /
  samples of its class seen), so the classes stay balanced and, within a full class, every
  sample seen has the same chance to be held.
* ``greedy_balanced`` (GDumb's sampler, Prabhu et al., ECCV 2020, Algorithm 1): a sample is
  kept while its class holds fewer than ``capacity / classes seen``; then it replaces a random
  sample of a largest class — balanced classes, no probability of keeping.

All randomness comes from the buffer's own ``torch.Generator`` (seeded), and the buffer's
contents, counters and generator state are its ``state_dict`` — part of a checkpoint, so a
resumed run replays exactly what an uninterrupted one would.

On an accelerator. The stored tensors live on the device of the tensors offered (the
model's), so replaying never copies samples between host and device. The generator and the
counters stay on the host: the reservoir's decisions and the replay draws are made there
without reading anything back from the device, and only the few slot indices travel, as
non-blocking copies — adding to and drawing from a ``reservoir`` buffer never waits for the
device (``torch.cuda.set_sync_debug_mode("error")`` passes). The class-balancing policies
read the stored labels once per :meth:`Buffer.add` (one transfer, not one per sample).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

import torch

__all__ = ["POLICIES", "Buffer", "Policy", "stream_subset"]

Policy = Literal["reservoir", "class_balanced", "greedy_balanced"]
POLICIES: tuple[str, ...] = ("reservoir", "class_balanced", "greedy_balanced")


class Buffer:
    """A replay memory of at most ``capacity`` samples.

    Args:
        capacity: the number of samples kept.
        policy: 'reservoir', 'class_balanced' or 'greedy_balanced'.
        seed: seeds the buffer's generator (which samples stay, which are drawn).
    """

    def __init__(self, capacity: int, policy: Policy = "reservoir", seed: int = 0):
        if capacity < 1:
            raise ValueError(f"buffer capacity must be at least 1, got {capacity}")
        if policy not in POLICIES:
            raise ValueError(f"unknown buffer policy {policy!r}; one of {', '.join(POLICIES)}")
        self.capacity, self.policy = int(capacity), policy
        self.generator = torch.Generator().manual_seed(int(seed) % (1 << 63))
        self.seen = 0  # samples offered so far
        self.size = 0  # samples held
        self.class_seen: dict[int, int] = {}  # samples offered per class (class_balanced, greedy_balanced)
        self.full: set[int] = set()  # classes that are or were a largest class (class_balanced)
        self.data: dict[str, torch.Tensor] = {}

    def __len__(self) -> int:
        return self.size

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    # ------------------------------------------------------------------- adding
    def add(self, labels: torch.Tensor, task: int | torch.Tensor | None = None, **tensors: torch.Tensor) -> None:
        """Offer a batch: ``labels`` [B] (integer classes) and any tensors with B rows
        (``input=x, logits=z``...). Every call must give the same keys.

        ``task``: each sample's task id, stored as ``task`` — a tensor with B rows, or one
        integer for the whole batch."""
        labels = labels.detach().reshape(-1)
        if task is not None:
            tensors["task"] = (
                task if isinstance(task, torch.Tensor)
                else torch.full((labels.shape[0],), int(task), dtype=torch.long, device=labels.device)
            )  # fmt: skip
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
        if self.policy == "reservoir":  # decided on the host from counts alone: the labels are not read
            slots = self._reservoir_slots(len(labels))
        else:  # the balancing policies decide from labels: the batch's and the stored ones, read once
            stored = self.data["label"].cpu()
            offered = labels.cpu()
            slots = (self._balanced_slots if self.policy == "class_balanced" else self._greedy_slots)(offered, stored)
        last_row = {int(slot): row for row, slot in enumerate(slots.tolist()) if slot >= 0}  # a later row wins a slot
        if last_row:
            targets = _OnDevices(torch.tensor(list(last_row), dtype=torch.long))
            rows = _OnDevices(torch.tensor(list(last_row.values()), dtype=torch.long))
            for key, value in batch.items():
                self.data[key][targets.on(value.device)] = value[rows.on(value.device)]

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

    def _balanced_slots(self, labels: torch.Tensor, stored: torch.Tensor) -> torch.Tensor:
        """Target slot per incoming row (-1: not kept), by class-balancing reservoir sampling
        (``labels``, ``stored``: the batch's and the buffer's labels, on the host; ``stored``
        follows the decisions made)."""
        slots = torch.full((len(labels),), -1, dtype=torch.long)
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

    def _greedy_slots(self, labels: torch.Tensor, stored: torch.Tensor) -> torch.Tensor:
        """Target slot per incoming row (-1: not kept), by GDumb's greedy class-balancing sampler
        (``labels``, ``stored``: on the host, as for :meth:`_balanced_slots`)."""
        slots = torch.full((len(labels),), -1, dtype=torch.long)
        for i, label in enumerate(labels.tolist()):
            self.seen += 1
            self.class_seen[label] = self.class_seen.get(label, 0) + 1
            held = int((stored[: self.size] == label).sum())
            if held * len(self.class_seen) >= self.capacity:  # the class has its share: capacity / classes seen
                continue
            if self.size < self.capacity:
                slot = self.size
                self.size += 1
            else:  # full: a random sample of a largest class makes room
                classes, counts = stored.unique(return_counts=True)
                largest = classes[counts == counts.max()]
                pick = largest[torch.randint(0, len(largest), (1,), generator=self.generator)]
                victims = (stored == pick).nonzero().reshape(-1)
                slot = int(victims[torch.randint(0, len(victims), (1,), generator=self.generator)])
            slots[i] = slot
            stored[slot] = label  # later rows of this batch see the new counts
        return slots

    def clear(self) -> None:
        """Forget every stored sample and all counts (the generator goes on): the buffer is as
        new, ready to be refilled with :meth:`add` — in slot order while it is not full."""
        self.seen = self.size = 0
        self.class_seen, self.full, self.data = {}, set(), {}

    def update(self, slots: torch.Tensor, **tensors: torch.Tensor) -> None:
        """Overwrite stored values in place: row ``i`` of each tensor goes to slot ``slots[i]``
        (``update(index, logits=z, task=t)``). The keys must be stored already and the slots
        held and distinct."""
        slots = torch.as_tensor(slots, dtype=torch.long).reshape(-1).cpu()
        if len(slots) and (int(slots.min()) < 0 or int(slots.max()) >= self.size):
            raise ValueError(f"buffer.update: slots must be in [0, {self.size}), got {slots.tolist()}")
        if len(slots.unique()) != len(slots):
            raise ValueError("buffer.update: a slot is given twice")
        for key, value in tensors.items():
            if key not in self.data:
                raise KeyError(f"the buffer stores no {key} (it stores: {', '.join(self.data)})")
            if value.shape[0] != len(slots) or value.shape[1:] != self.data[key].shape[1:]:
                raise ValueError(f"buffer.update: '{key}' has shape {tuple(value.shape)} for {len(slots)} slots "
                                 f"of shape {tuple(self.data[key].shape[1:])}")  # fmt: skip
        on = _OnDevices(slots)
        for key, value in tensors.items():
            target = self.data[key]
            target[on.on(target.device)] = value.detach().to(target.device, target.dtype)

    # ------------------------------------------------------------------ drawing
    def sample(self, size: int, keys: tuple[str, ...] | None = None) -> dict[str, torch.Tensor]:
        """``size`` stored samples drawn uniformly without replacement (all of them when the
        buffer holds fewer), as a dict of the stored keys (or ``keys``)."""
        return self.sample_with_index(size, keys)[1]

    def sample_with_index(
        self, size: int, keys: tuple[str, ...] | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """:meth:`sample` with the slots drawn (the same draw): ``(slots, samples)``, the slots
        for :meth:`update`."""
        if self.is_empty:
            raise ValueError("the buffer is empty: nothing to sample")
        count = min(int(size), self.size)
        index = torch.randperm(self.size, generator=self.generator)[:count]
        return index, self._take(index, keys)

    def all(self, keys: tuple[str, ...] | None = None) -> dict[str, torch.Tensor]:
        """Every stored sample, in slot order."""
        return self._take(torch.arange(self.size), keys)

    def _take(self, index: torch.Tensor, keys: tuple[str, ...] | None) -> dict[str, torch.Tensor]:
        wanted = keys or tuple(self.data)
        missing = [k for k in wanted if k not in self.data]
        if missing:
            raise KeyError(f"the buffer stores no {', '.join(missing)} (it stores: {', '.join(self.data)})")
        on = _OnDevices(index)  # copied once per device the keys live on
        return {k: self.data[k][on.on(self.data[k].device)] for k in wanted}

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


class _OnDevices:
    """A host index tensor, copied to each device asked for once; the copies do not wait for
    the device (a copy from host memory is staged at once, so the host tensor may go right after)."""

    def __init__(self, index: torch.Tensor):
        self.index, self.copies = index, {index.device: index}

    def on(self, device: torch.device) -> torch.Tensor:
        if device not in self.copies:
            self.copies[device] = self.index.to(device, non_blocking=True)
        return self.copies[device]


def stream_subset(
    batches: Iterable[Mapping[str, Any]],
    count: int | Mapping[int, int],
    generator: torch.Generator,
    keys: tuple[str, ...] = ("input",),
) -> dict[str, torch.Tensor]:
    """A uniform random subset of the samples in a stream of batches (dicts with ``label`` and
    ``keys``), held ``count`` at a time: ``count`` samples in all (an int), or per class (a
    mapping class → how many; other classes are skipped). Each is a reservoir
    :class:`Buffer` seeded from ``generator``, so the subset is reproducible. Returns
    ``label`` and ``keys``: per class in increasing class order, or in reservoir slot order.
    Fewer come back where the stream has fewer."""
    per_class = isinstance(count, Mapping)
    buffers: dict[int | None, Buffer] = {}

    def buffer_for(group: int | None, capacity: int) -> Buffer:
        if group not in buffers:
            seed = int(torch.randint(0, 1 << 62, (1,), generator=generator))
            buffers[group] = Buffer(capacity, "reservoir", seed)
        return buffers[group]

    for batch in batches:
        labels = batch["label"].reshape(-1)
        if not per_class:
            if int(count) > 0:
                buffer_for(None, int(count)).add(labels, **{k: batch[k] for k in keys})
            continue
        for label in labels.unique().tolist():
            wanted = int(count.get(label, 0))
            if wanted > 0:
                rows = labels == label
                buffer_for(label, wanted).add(labels[rows], **{k: batch[k][rows] for k in keys})
    held = [buffers[g].all(("label", *keys)) for g in sorted(buffers, key=lambda g: -1 if g is None else g)]
    if not held:
        return {"label": torch.empty(0, dtype=torch.long), **{k: torch.empty(0) for k in keys}}
    return {k: torch.cat([h[k] for h in held]) for k in ("label", *keys)}
