"""The training hot path never waits for the device: between two ``log_every`` steps the
Trainer (and a DER++ step with its replay buffer) reads nothing back from the tensors it
trains on — the loss stays on the device until a logging step or the epoch's end.

On the CPU this is checked on PyTorch's ``meta`` device, whose tensors hold no values: any
read on the host (``.item()``, ``float(t)``, ``.tolist()``, ``.cpu()``) raises there, so a
run that gets through its steps read nothing. On a GPU (tests marked ``cuda``, run by
``benchmarks/device_check.py``) the same steps run under ``torch.cuda.set_sync_debug_mode
("error")``, which raises at any synchronisation.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import modforge as mf
from modforge.continual.trainer import ContinualTrainer
from modforge.train.callbacks.base import Callback
from modforge.train.ema import ExponentialMovingAverage
from modforge.train.trainer import Trainer

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device (benchmarks/device_check.py runs it)")


class StepCount(Callback):
    """Counts the steps that completed."""

    def __init__(self) -> None:
        self.steps = 0

    def on_step_end(self, trainer) -> None:
        self.steps += 1


def _cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    config = {"backbone": {"type": "cnn", "args": {"channels": [4, 8]}}, "neck": "global_avg_pool",
              "head": "linear", "losses": ["cross_entropy"]}  # fmt: skip
    return mf.build_model(config, in_dim=1, num_classes=3)


def _batches(count: int, rows: int = 4, pin: bool = False) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    batches = [{"input": torch.randn(rows, 1, 8, 8, generator=g), "label": torch.randint(0, 3, (rows,), generator=g)}
               for _ in range(count)]  # fmt: skip
    return [{k: v.pin_memory() for k, v in b.items()} for b in batches] if pin else batches


@pytest.mark.parametrize(("log_every", "steps_before_a_read"), [(100, 5), (3, 2)])
def test_the_trainer_reads_the_loss_only_when_logging_or_at_the_epoch_end(log_every, steps_before_a_read):
    # momentum, gradient clipping and a weight average: each step's work, none of it read on the host
    model = _cnn()
    count = StepCount()
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), device="meta",
                      log_every=log_every, grad_clip=1.0, callbacks=[count], extensions=[ExponentialMovingAverage(decay=0.9)],
                      async_checkpoints=False)  # fmt: skip
    with pytest.raises((RuntimeError, NotImplementedError), match="meta"):
        trainer.fit(_batches(5))  # the first read: the logging step, else the epoch's mean loss
    assert count.steps == steps_before_a_read


def test_a_der_plus_plus_step_and_its_buffer_read_nothing_from_the_device():
    model = _cnn()
    algorithm = mf.ALGORITHMS.build({"type": "derpp", "args": {"buffer_size": 10, "minibatch_size": 3}},
                                    path="algorithm", model=model, num_classes=3)  # fmt: skip
    trainer = ContinualTrainer(model, torch.optim.SGD(model.parameters(), lr=0.1), algorithm=algorithm,
                               device="meta", async_checkpoints=False)  # fmt: skip
    algorithm.begin_task(0, trainer, [0, 1, 2])
    for batch in _batches(6):  # 24 samples into 10 slots: filling, then reservoir replacements
        loss = trainer.training_step(trainer.prepare_batch(batch))
        trainer.backward(loss)
        trainer.optimizer_step()
    buffer = algorithm.buffer
    assert (len(buffer), buffer.seen) == (10, 24)
    assert {v.device.type for v in buffer.data.values()} == {"meta"}  # kept where the model is
    assert set(buffer.data) == {"label", "input", "logits"}


def test_the_balancing_buffers_read_the_labels_they_balance():
    # the control: a policy that must look at the labels does read them (once per add)
    from modforge.continual.buffer import Buffer

    buffer = Buffer(4, "class_balanced")
    with pytest.raises((RuntimeError, NotImplementedError), match="meta"):
        buffer.add(torch.zeros(3, dtype=torch.long, device="meta"), input=torch.zeros(3, 2, device="meta"))


class SyncChecked:
    """A loader of ``batches`` that turns ``torch.cuda.set_sync_debug_mode("error")`` on from its
    second batch (the first step's one-off work may synchronise) until it is exhausted."""

    def __init__(self, batches: list[dict[str, torch.Tensor]]):
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        try:
            for i, batch in enumerate(self.batches):
                torch.cuda.set_sync_debug_mode("error" if i else "default")
                yield batch
        finally:
            torch.cuda.set_sync_debug_mode("default")


@pytest.fixture
def sync_mode_restored() -> Iterator[None]:
    """The default synchronisation mode back after the test, whatever stopped it."""
    yield
    torch.cuda.set_sync_debug_mode("default")


@pytest.mark.cuda
@needs_cuda
@pytest.mark.usefixtures("sync_mode_restored")
@pytest.mark.parametrize("precision", ["32", "bf16"])
def test_on_a_gpu_the_trainer_steps_without_synchronising(precision):
    model = _cnn()
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), device="cuda",
                      precision=precision, log_every=100, grad_clip=1.0, async_checkpoints=False)  # fmt: skip
    history = trainer.fit(SyncChecked(_batches(6, pin=True)))
    assert trainer.global_step == 6 and torch.isfinite(torch.tensor(history[-1]["train_loss"]))


@pytest.mark.cuda
@needs_cuda
@pytest.mark.usefixtures("sync_mode_restored")
def test_on_a_gpu_a_der_plus_plus_task_trains_with_its_buffer_on_the_device_without_synchronising():
    model = _cnn()
    algorithm = mf.ALGORITHMS.build({"type": "derpp", "args": {"buffer_size": 10, "minibatch_size": 3}},
                                    path="algorithm", model=model, num_classes=3)  # fmt: skip
    trainer = ContinualTrainer(model, torch.optim.SGD(model.parameters(), lr=0.1), algorithm=algorithm,
                               device="cuda", log_every=100, async_checkpoints=False)  # fmt: skip
    algorithm.begin_task(0, trainer, [0, 1, 2])
    history = trainer.fit(SyncChecked(_batches(8, pin=True)))
    buffer = algorithm.buffer
    assert (len(buffer), buffer.seen) == (10, 32)
    assert {v.device.type for v in buffer.data.values()} == {"cuda"}
    assert torch.isfinite(torch.tensor(history[-1]["train_loss"]))
