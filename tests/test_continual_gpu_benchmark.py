"""``benchmarks/continual_gpu.py``'s modforge side, run here on the CPU (Mammoth's side needs its
tree, which the device check carries): every task's epochs are served in their own order, and
modforge's DER++ takes one step per batch and offers every sample to its buffer."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _module():
    sys.path.insert(0, str(BENCHMARKS))  # it imports continual_mammoth, beside it
    try:
        spec = importlib.util.spec_from_file_location("continual_gpu", BENCHMARKS / "continual_gpu.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_the_modforge_side_steps_once_per_batch_and_offers_every_sample_to_the_buffer():
    bench = _module()
    g = torch.Generator().manual_seed(0)
    tasks = [{"train": (torch.rand(23, 64, generator=g), torch.randint(2 * t, 2 * t + 2, (23,), generator=g))}
             for t in range(2)]  # fmt: skip
    batches = [bench.epoch_batches(*task["train"], t, 2, 10, pin=False) for t, task in enumerate(tasks)]
    assert [len(pairs) for pairs in batches[0]] == [3, 3]  # 23 samples in batches of 10, two epochs
    first, second = (torch.cat([y for _, y in pairs]) for pairs in batches[0])
    assert sorted(first.tolist()) == sorted(tasks[0]["train"][1].tolist()) and not torch.equal(first, second)
    run = bench.modforge_run(tasks, batches, torch.device("cpu"))
    assert run() == (2 * 2 * 3, 2 * 2 * 23)  # steps, samples offered to the buffer
