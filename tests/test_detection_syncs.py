"""The dense detection heads' losses wait for the device once a step, not once per image and use.

A batch's targets come from the loader on the host: each image's crowd boxes are dropped and its
labels checked there, and only what is kept moves to the device (masking and checking after the
move made a GPU wait three times per image). In the loss, the positive locations are found once
(one ``nonzero``) and read by index, the classification targets are made without ``F.one_hot``'s
range check (two waits), and FCOS fills each location's stride and range on the device (no copy, no
``repeat_interleave`` by a device tensor). Checked on the CPU by counting the data-dependent operations the loss
dispatches, and on the ``meta`` device, whose tensors hold no values; on a GPU (``cuda`` mark, run
by ``benchmarks/device_check.py``) under ``torch.cuda.set_sync_debug_mode``.
"""

from __future__ import annotations

import collections
import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from modforge.components.heads.fcos import FCOSHead
from modforge.components.heads.retinanet import RetinaNetHead

STRIDES = [8, 16, 32]


class DataDependent(TorchDispatchMode):
    """Counts the operations that read a tensor's values on the host: ``item`` and the like, ``nonzero``,
    indexing by a boolean mask (a ``nonzero`` inside) and ``repeat_interleave`` by a tensor (its total)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        indices = args[1] if name.startswith("index") and len(args) > 1 and isinstance(args[1], (list, tuple)) else ()
        if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices):
            self.counts[f"{name} by mask"] += 1
        elif name in ("_local_scalar_dense", "nonzero", "masked_select", "_unique2", "repeat_interleave"):
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


def _targets() -> list[dict[str, torch.Tensor]]:
    return [
        {"boxes": torch.tensor([[4.0, 4.0, 30.0, 40.0], [10.0, 12.0, 60.0, 60.0], [0.0, 0.0, 8.0, 8.0]]),
         "labels": torch.tensor([0, 2, 1]), "iscrowd": torch.tensor([0, 0, 1])},
        {"boxes": torch.tensor([[20.0, 5.0, 50.0, 33.0]]), "labels": torch.tensor([1])},
    ]  # fmt: skip


def _raw(head) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    feats = [torch.randn(2, 16, 64 // s, 64 // s, generator=g) for s in STRIDES]
    return head.net(feats)


@pytest.mark.parametrize("kind", ["fcos", "retinanet"])
def test_targets_are_filtered_and_checked_on_the_host_then_moved(kind):
    head = (FCOSHead if kind == "fcos" else RetinaNetHead)([16, 16, 16], num_classes=3, strides=STRIDES)
    # the meta device holds no values: masking or checking there would raise
    boxes, labels = head.target_boxes(_targets()[0], torch.float32, torch.device("meta"))
    assert boxes.device.type == "meta" and boxes.shape == (2, 4) and labels.shape == (2,)  # the crowd box dropped
    assert labels.dtype == torch.long
    bad = {"boxes": torch.zeros(1, 4), "labels": torch.tensor([3])}
    with pytest.raises(ValueError, match=rf"{kind}: target labels must be in 0..2, got \[3\]"):
        head.target_boxes(bad, torch.float32, torch.device("meta"))


@pytest.mark.parametrize("kind", ["fcos", "retinanet"])
def test_the_loss_finds_the_positives_once(kind, monkeypatch):
    """Past the targets' preparation (on the host), FCOS's loss and its backward pass read the device
    once: the positives' ``nonzero``. RetinaNet's too, but for the ignored anchors' mask and torchvision's
    GIoU, which mask by themselves; neither reads an ``item``."""
    torch.manual_seed(0)
    head = (FCOSHead if kind == "fcos" else RetinaNetHead)([16, 16, 16], num_classes=3, strides=STRIDES, tower_depth=1)
    raw = _raw(head)
    prepare = head.target_boxes

    def on_the_host(*args, **kwargs):  # what the loader's targets cost, not counted here
        with _disable_current_modes():
            return prepare(*args, **kwargs)

    monkeypatch.setattr(head, "target_boxes", on_the_host)
    counter = DataDependent()
    with counter:
        losses = head.losses(raw, _targets())
        sum(losses.values()).backward()
    counts = dict(counter.counts)
    if kind == "fcos":
        assert counts == {"nonzero": 1}
    else:
        assert counts.get("nonzero") == 1 and "_local_scalar_dense" not in counts


def test_class_targets_are_one_hot_without_the_background():
    from modforge.components.heads.dense import class_targets

    labels = torch.tensor([[0, 3, 2], [1, 3, 0]])
    expected = torch.nn.functional.one_hot(labels, 4)[..., :3].to(torch.float32)
    assert torch.equal(class_targets(labels, 3, torch.float32), expected)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (benchmarks/device_check.py runs it)")
def test_on_a_gpu_the_fcos_loss_waits_for_the_device_once():  # pragma: no cover - CUDA only
    torch.manual_seed(0)
    head = FCOSHead([16, 16, 16], num_classes=3, strides=STRIDES, tower_depth=1).cuda()
    g = torch.Generator().manual_seed(1)
    feats = [torch.randn(2, 16, 64 // s, 64 // s, generator=g).cuda() for s in STRIDES]
    raw = head.net(feats)
    # on the host and pinned, as a loader with pin_memory hands them over
    targets = [{k: v.pin_memory() for k, v in target.items()} for target in _targets()]
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            losses = head.losses(raw, targets)
            sum(losses.values()).backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    assert len(syncs) <= 1, [str(w.message) for w in syncs]  # the positives' nonzero
