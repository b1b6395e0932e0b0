"""Run by ``torchrun`` from tests/test_distributed.py: one process of the multi-process checks.

    torchrun --nproc-per-node 2 tests/distributed_worker.py MODE OUT.pt [MODE OUT.pt ...]

Each MODE runs after the one before it in the same process group (one launch for every check,
so the tests pay torchrun's start once); each builds its own model and data from fixed seeds.
Without torchrun it runs in one process; the one-process results the checks compare with are its
functions called in the test's own process.

``step``: one training step of the Trainer (which wraps the model in DDP) on this rank's
half of a fixed batch of 32; rank 0 saves the weights after the step.
``accumulate``: the same step as two accumulated micro-batches per process.
``metrics``: every built-in metric updated with this rank's half of fixed outputs, then
synchronised; rank 0 saves the values.
``evaluate``: a BatchNorm model trained one step on each rank's own data (so the running
statistics differ per process), then evaluated and collected on sharded loaders; rank 0
saves the metrics, the collected outputs and its weights.
``buckets``: whole audio files (written by the test into OUT's folder, ``wavs/``) scored by a
mask-aware spoofing model in length buckets shared among the processes; rank 0 saves the
gathered scores, their file indices and its own number of batches.
"""

from __future__ import annotations

import sys

import torch

import modforge as mf
from modforge.train import distributed
from modforge.train.trainer import Trainer


def fixed_model(norm: str = "none") -> torch.nn.Module:
    torch.manual_seed(0)
    return mf.build_model(
        {"backbone": {"type": "mlp", "args": {"hidden_dims": [16], "norm": norm}}, "head": "linear",
         "losses": ["cross_entropy"]},
        in_dim=8,
        num_classes=4,
    )


def fixed_batch(n: int = 32) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {"input": torch.randn(n, 8, generator=g), "label": torch.randint(0, 4, (n,), generator=g)}


def fixed_outputs(n: int = 40) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    label = torch.randint(0, 2, (n,), generator=g)
    return {"logits": torch.randn(n, 2, generator=g), "label": label, "loss": torch.rand((), generator=g),
            "score": torch.randn(n, generator=g) + label}


def half(batch: dict[str, torch.Tensor], rank: int, world: int) -> dict[str, torch.Tensor]:
    n = next(iter(batch.values())).shape[0]
    size = n // world
    return {k: (v[rank * size : (rank + 1) * size] if v.dim() else v) for k, v in batch.items()}


def one_step(accumulate: int = 1, precision: str = "32") -> dict[str, torch.Tensor]:
    """One optimizer step on this process's half of the batch (``bf16-true``: the linear layers' weights
    in bf16, their LayerNorms in float32 — two dtypes in DDP's gradient buckets)."""
    model = fixed_model("layer" if precision != "32" else "none")
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9), max_epochs=1,
                      async_checkpoints=False, accumulate=accumulate, precision=precision)
    mine = half(fixed_batch(), distributed.rank(), distributed.world_size())
    trainer.fit([half(mine, i, accumulate) for i in range(accumulate)])
    assert trainer.global_step == 1
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def evaluation_data(n: int = 30):
    from modforge.data import ArrayDataset

    g = torch.Generator().manual_seed(5)
    return ArrayDataset(torch.randn(n, 8, generator=g), torch.randint(0, 4, (n,), generator=g))


def evaluate_sharded() -> dict:
    from modforge.data import LoaderSettings, make_loader

    model = fixed_model(norm="batch")
    metrics = {name: mf.METRICS.build(name, path=name, num_classes=4) for name in ("accuracy", "loss", "macro_f1")}
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.5), metrics=metrics, max_epochs=1,
                      async_checkpoints=False)
    g = torch.Generator().manual_seed(10 + distributed.rank())  # each process its own data: its own BN statistics
    trainer.fit([{"input": torch.randn(16, 8, generator=g) * (1 + distributed.rank()),
                  "label": torch.randint(0, 4, (16,), generator=g)}])
    loader = make_loader(evaluation_data(), LoaderSettings(batch_size=4), train=False,
                         num_replicas=distributed.world_size(), rank=distributed.rank())
    row = trainer.evaluate(loader, "val")
    collected = trainer.collect(loader, ("logits", "label"))
    return {"row": row, "collected": collected, "state": {k: v.clone() for k, v in model.state_dict().items()}}


def synced_metrics() -> dict[str, float]:
    names = ["accuracy", "loss", "macro_f1", "confusion_matrix", "eer", "min_dcf"]
    metrics = {name: mf.METRICS.build({"type": name, "args": {}}, path=name, num_classes=2) for name in names}
    out = half(fixed_outputs(), distributed.rank(), distributed.world_size())
    out["loss"] = fixed_outputs()["loss"] + distributed.rank()  # each process's own batch loss
    for name, metric in metrics.items():
        metric.update(out)
        if distributed.is_distributed():
            metric.sync(name)
    return {name: metric.compute() for name, metric in metrics.items()}


BUCKET_MODEL = {  # configs/spoofing/lfcc_mlp.yaml's model: every part honours the padding mask
    "stages": [
        {"name": "frontend", "type": "lfcc", "args": {"n_coeffs": 20, "deltas": True}},
        {"name": "pool", "kind": "neck", "type": "stats_pool"},
        {"name": "backbone", "type": "mlp", "args": {"hidden_dims": [32]}},
        {"name": "head", "type": "linear"},
    ],
    "losses": ["cross_entropy"],
}


def bucket_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return mf.build_model(BUCKET_MODEL, in_dim=1, num_classes=2, sample_rate=16000, scores=True).eval()


def audio_files(folder) -> list:
    from pathlib import Path

    from modforge.data.audio.protocols import Utterance

    paths = sorted(Path(folder).glob("*.wav"), key=lambda p: int(p.stem[1:]))
    return [Utterance(p.stem, p, int(p.stem[1:]) % 2, "-" if int(p.stem[1:]) % 2 else "A01") for p in paths]


def audio_eval_split(folder):
    from modforge.data.audio.dataset import AudioDataset, AudioSettings

    return AudioDataset(audio_files(folder), AudioSettings(sample_rate=16000, seconds=0.5, eval_mode="full"),
                        train=False)  # fmt: skip


def bucketed_scores(out: str) -> dict:
    from pathlib import Path

    from modforge.data import LoaderSettings, make_loader

    model = bucket_model()
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.0), async_checkpoints=False)
    loader = make_loader(audio_eval_split(Path(out).parent / "wavs"), LoaderSettings(eval_max_samples=3 * 9000),
                         train=False, num_replicas=distributed.world_size(), rank=distributed.rank(),
                         mask_aware=True)  # fmt: skip
    collected = trainer.collect(loader, ("score", "index"))
    return {**collected, "batches": len(loader), "all_batches": len(loader.batch_sampler.all_batches)}


def main() -> int:
    pairs = sys.argv[1:]
    distributed.setup()
    for mode, out in zip(pairs[::2], pairs[1::2], strict=True):
        modes = {"step": one_step, "accumulate": lambda: one_step(2), "bf16-true": lambda: one_step(precision="bf16-true"),
                 "metrics": synced_metrics,
                 "evaluate": evaluate_sharded, "buckets": lambda out=out: bucketed_scores(out)}
        result = modes[mode]()
        if distributed.is_main_process():
            torch.save(result, out)
    distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
