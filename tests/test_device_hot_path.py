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
from typing import Any

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
    """A loader (any iterable of batches with a length) that turns ``torch.cuda.set_sync_debug_mode
    ("error")`` on from its second batch (the first step's one-off work may synchronise) until it
    is exhausted; what else the trainer asks of a loader (its generator, sampler) is the loader's."""

    def __init__(self, batches: Any):
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["batches"], name)

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
@pytest.mark.parametrize(("precision", "fused"), [("32", None), ("bf16", None), ("16", True), ("16-true", True)])
def test_on_a_gpu_the_trainer_steps_without_synchronising(precision, fused):
    # fp16's grad scaler decides on the device only with a fused optimizer (else it reads found-inf each step)
    model = _cnn().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=fused)
    trainer = Trainer(model, optimizer, device="cuda", precision=precision, log_every=100, grad_clip=1.0,
                      async_checkpoints=False)  # fmt: skip
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


@pytest.mark.cuda
@needs_cuda
@pytest.mark.usefixtures("sync_mode_restored")
def test_on_a_gpu_the_airbench_recipe_with_its_pictures_on_the_device_steps_without_synchronising():
    # the shipped speed-run config (narrow): pictures cut and augmented on the GPU, fp16 with a fused
    # optimizer, whitening, lookahead, freezing and the triangular rate — none of it waits for the device
    from pathlib import Path

    from modforge.core.config import load_config
    from modforge.data.images.dataset import TensorPictures
    from modforge.data.images.splits import picture_splits
    from modforge.experiment.runner import Experiment
    from modforge.experiment.schema import validate_config

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "vision" / "cifar10_airbench94.yaml")
    data, train = cfg.data["data"], cfg.data["train"]
    data.update(batch_size=32, num_workers=0, persistent_workers=False, device="cuda")
    cfg.data["model"]["backbone"]["args"]["widths"] = [8, 16, 16]
    train.update(max_epochs=2, max_steps=6, device="cuda", log_every=100)
    for spec in train["callbacks"]:
        spec["args"].update({"whitening_init": {"samples": 32}, "freeze_parameters": {"from_epoch": 1},
                             "lookahead": {"every": 2}}[spec["type"]])  # fmt: skip
    validate_config(cfg)
    g = torch.Generator().manual_seed(0)
    pictures = torch.randint(0, 256, (96, 3, 32, 32), dtype=torch.uint8, generator=g)
    splits = picture_splits(train=(TensorPictures(pictures), torch.randint(0, 10, (96,), generator=g)), test=None,
                            class_names=[str(i) for i in range(10)], seed=0, val_fraction=0.0,
                            transforms={"train": data["transforms"]["train"]}, mean=[0.49, 0.48, 0.45],
                            std=[0.25, 0.24, 0.26], described="random")  # fmt: skip
    exp = Experiment.build(cfg, splits)
    loader = exp.loaders()[0]
    trainer = exp.trainer(loader, None)
    assert trainer.scaler is not None and trainer.optimizer._step_supports_amp_scaling
    history = trainer.fit(SyncChecked(loader))
    assert trainer.global_step == 6 and torch.isfinite(torch.tensor(history[-1]["train_loss"]))
    assert loader.dataset.source.pictures.device.type == "cuda"  # the batches were made there
