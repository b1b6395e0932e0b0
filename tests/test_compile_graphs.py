"""torch.compile with CUDA graphs (``mode: reduce-overhead`` / ``max-autotune``): a replay writes its
outputs into the memory of the last one, so the ``compile`` engine hands back copies
(:class:`~modforge.engines.compile.OwnedOutputs`) — the trainer keeps each batch's loss until the
epoch's end, an evaluation its scores. The copying is checked on the CPU; the graphs themselves
only exist on a GPU (tests marked ``cuda``, run by ``benchmarks/device_check.py``)."""

from __future__ import annotations

from collections import namedtuple

import pytest
import torch

import modforge as mf
from modforge.engines.compile import Compile, OwnedOutputs, owned, replays_cuda_graphs
from modforge.train.callbacks.base import Callback
from modforge.train.trainer import Trainer

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device (benchmarks/device_check.py runs it)")


def test_owned_outputs_are_copies_wherever_the_tensors_sit():
    Pair = namedtuple("Pair", "a b")
    loss, logits, boxes = torch.tensor(1.0, requires_grad=True), torch.ones(2, 3), [torch.zeros(4)]
    out = {"loss": loss * 2, "logits": logits, "boxes": boxes, "pair": Pair(logits, "name"), "k": 3}
    copy = owned(out)
    assert copy["logits"] is not logits and torch.equal(copy["logits"], logits)
    assert copy["logits"].data_ptr() != logits.data_ptr()
    assert copy["boxes"][0].data_ptr() != boxes[0].data_ptr() and isinstance(copy["boxes"], list)
    assert isinstance(copy["pair"], Pair) and copy["pair"].b == "name"
    assert copy["pair"].a.data_ptr() != logits.data_ptr() and copy["k"] == 3
    copy["loss"].backward()  # gradients flow through the copy
    assert loss.grad == 2.0
    pooled = torch.ones(3)
    again = owned({"embedding": pooled, "features": pooled, "input": logits}, {id(logits): logits})
    assert again["embedding"] is again["features"] and again["embedding"] is not pooled  # one copy of one tensor
    assert again["input"] is logits  # the caller's own input: handed back, not copied


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    config = {"backbone": {"type": "cnn", "args": {"channels": [4, 8]}}, "neck": "global_avg_pool",
              "head": "linear", "losses": ["cross_entropy"]}  # fmt: skip
    return mf.build_model(config, in_dim=1, num_classes=3)


def test_only_graph_modes_on_a_cuda_model_are_wrapped():
    model = _model()
    assert not replays_cuda_graphs("reduce-overhead", model)  # on the CPU Inductor records no graphs
    assert not replays_cuda_graphs("default", model) and not replays_cuda_graphs("max-autotune-no-cudagraphs", model)
    runnable = Compile(mode="reduce-overhead", backend="eager").prepare(model)
    assert not isinstance(runnable, OwnedOutputs)
    meta = _model().to("meta")
    assert replays_cuda_graphs("max-autotune", meta) is False
    wrapped = OwnedOutputs(torch.compile(model, backend="eager"))
    assert wrapped._orig_mod is model  # what saving an artifact reads
    batch = _batches(1)[0]
    out = wrapped(batch)
    assert out["input"] is batch["input"] and out["label"] is batch["label"]  # the model hands the batch on
    assert torch.equal(out["logits"], model(batch)["logits"])


class StepLosses(Callback):
    """Each step's loss, read when the step ends (before the next replay)."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_step_end(self, trainer) -> None:
        self.losses.append(float(trainer.last_loss))


def _batches(count: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [{"input": torch.randn(8, 1, 8, 8, generator=g), "label": torch.randint(0, 3, (8,), generator=g)}
            for _ in range(count)]  # fmt: skip


@pytest.mark.cuda
@needs_cuda
def test_on_a_gpu_a_run_replaying_cuda_graphs_keeps_every_batchs_loss_and_evaluates_like_eager():
    # reduce-overhead (max-autotune records the same graphs after minutes of autotuning the kernels)
    model = _model().cuda()
    steps = StepLosses()
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), device="cuda",
                      engine=Compile(mode="reduce-overhead"), callbacks=[steps], log_every=1000, async_checkpoints=False,
                      metrics={n: mf.METRICS.build(n, path=n, num_classes=3) for n in ("accuracy", "loss")})  # fmt: skip
    history = trainer.fit(_batches(6))
    assert isinstance(trainer.runnable, OwnedOutputs)
    assert len(set(steps.losses)) == 6  # the steps' own losses (not the last replay's, six times)
    assert history[-1]["train_loss"] == pytest.approx(sum(steps.losses) / 6, rel=1e-5)
    graphed = trainer.evaluate(_batches(3), "val")
    trainer.runnable = trainer.model  # the same weights, eager
    eager = trainer.evaluate(_batches(3), "val")
    assert graphed["val_loss"] == pytest.approx(eager["val_loss"], rel=1e-4)
    assert graphed["val_accuracy"] == eager["val_accuracy"]
