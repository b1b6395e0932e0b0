"""Mammoth parity of the replay family: on the same stream, from the same weights, with the same buffer
decisions, modforge's ``er``, ``der``, ``derpp``, ``er_ace`` and ``xder`` give the losses Mammoth's own
``observe`` gave (aimagelab/mammoth, the commit in the reference file) at each of 50 steps, over three
tasks and their boundaries.

The reference (``fixtures/mammoth_replay.json``) was recorded by ``fixtures/record_mammoth_replay.py``
running Mammoth's models on the fixture of ``mammoth_replay_fixture.py``; this test needs neither Mammoth
nor a network. The two codes draw from different generators (Mammoth: NumPy's and torch's global ones;
modforge: the buffer's own), so the test replaces modforge's draws with the decisions Mammoth took —
the reservoir's slot for each sample once the buffer is full, the slots of each replay draw, X-DER's coins
for its logit updates and the samples its end of task keeps — on the algorithm's buffer only. Everything
else (forward passes, losses, masks, logit updates, task-boundary work, SGD) is modforge's own. How the
check was made: ``docs/worlds/continual-parity.md``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import mammoth_replay_fixture as fx
import modforge as mf
from modforge.continual.algorithms import xder as xder_module
from modforge.continual.trainer import ContinualTrainer

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "mammoth_replay.json").read_text())
RTOL, ATOL = 1e-5, 1e-6  # float32 arithmetic in both codes; the largest deviation reached is 2.2e-7 relative


class MammothDecisions:
    """Mammoth's recorded random decisions, replayed on one algorithm's buffer (and, for X-DER, its coins and
    end-of-task samples) in place of the buffer generator's."""

    def __init__(self, record: dict[str, Any], algorithm: Any, monkeypatch: pytest.MonkeyPatch):
        self.algorithm, self.buffer = algorithm, algorithm.buffer
        self.slots = list(record["slots"])
        self.draws, self.coins = record["draws"], record["coins"]
        self.kept = record["kept"]
        self.pending: list[list[int]] = []
        self.pending_coins: list[float] = []
        self.buffer._reservoir_slots = self.reservoir_slots
        self.buffer.sample_with_index = self.sample_with_index
        if self.coins is not None:
            rand = torch.rand

            def coins(*size: Any, generator: torch.Generator | None = None, **kwargs: Any) -> torch.Tensor:
                if generator is not self.buffer.generator:
                    return rand(*size, generator=generator, **kwargs)
                (n,) = size
                assert len(self.pending_coins) >= n, "modforge tosses more coins than Mammoth did"
                tossed, self.pending_coins = self.pending_coins[:n], self.pending_coins[n:]
                return torch.tensor(tossed, dtype=torch.float32)

            monkeypatch.setattr(torch, "rand", coins)
        if self.kept is not None:
            monkeypatch.setattr(xder_module, "stream_subset", self.stream_subset)

    def reservoir_slots(self, n: int) -> torch.Tensor:
        """The buffer's reservoir, with Mammoth's decision wherever it is random (the buffer full)."""
        buffer, slots = self.buffer, torch.full((n,), -1, dtype=torch.long)
        for i in range(n):
            buffer.seen += 1
            if buffer.size < buffer.capacity:
                slots[i] = buffer.size
                buffer.size += 1
            else:
                assert self.slots, "modforge offers more samples to a full buffer than Mammoth did"
                slots[i] = self.slots.pop(0)
        return slots

    def sample_with_index(self, size: int, keys: tuple[str, ...] | None = None):
        assert self.pending, "modforge draws from the buffer more often than Mammoth did"
        index = torch.tensor(self.pending.pop(0), dtype=torch.long)
        assert len(index) == min(size, self.buffer.size), "Mammoth drew another number of samples"
        return index, self.buffer._take(index, keys)

    def stream_subset(self, batches, count, generator, keys=("input",)) -> dict[str, torch.Tensor]:
        """X-DER's end of task: the samples of the task Mammoth put in the memory, in its order."""
        batches = list(batches)
        data = {k: torch.cat([b[k] for b in batches]) for k in ("label", *keys)}
        positions = torch.tensor(self.kept[str(self.algorithm.task)], dtype=torch.long)
        chosen = {k: v[positions] for k, v in data.items()}
        labels, counts = chosen["label"].unique(return_counts=True)
        assert dict(zip(labels.tolist(), counts.tolist(), strict=True)) == {c: n for c, n in count.items() if n}
        return chosen

    def begin_step(self, step: int) -> None:
        self.pending = [list(d) for d in self.draws[step]]
        self.pending_coins = list(self.coins[step]) if self.coins is not None else []

    def end_step(self, step: int) -> None:
        assert not self.pending, f"step {step}: Mammoth drew from the buffer {len(self.pending)} more time(s)"
        assert not self.pending_coins, f"step {step}: Mammoth tossed {len(self.pending_coins)} more coin(s)"


def modforge_losses(name: str, monkeypatch: pytest.MonkeyPatch, **changes: Any) -> list[float]:
    """modforge's losses on the fixture, for run ``name`` (its arguments updated by ``changes``), with
    Mammoth's recorded decisions."""
    spec, record = fx.RUNS[name], REFERENCE["runs"][name]
    model = mf.build_model(fx.model_config(spec["head"]), in_dim=fx.FEATURES, num_classes=fx.NUM_CLASSES)
    missing, unexpected = model.load_state_dict(fx.initial_weights(spec["head"]), strict=False)
    assert not unexpected and set(missing) <= {"parts.head.log_scale"}, (missing, unexpected)  # the cosine's fixed scale
    args = {**spec["args"], "buffer_size": fx.BUFFER, "minibatch_size": fx.MINIBATCH, "seed": fx.SEED, **changes}
    algorithm = mf.ALGORITHMS.build({"type": spec["algorithm"], "args": args}, path="algorithm", model=model,
                                    num_classes=fx.NUM_CLASSES)  # fmt: skip
    trainer = ContinualTrainer(model, torch.optim.SGD(model.parameters(), lr=fx.LR), algorithm=algorithm,
                               async_checkpoints=False)  # fmt: skip
    decisions = MammothDecisions(record, algorithm, monkeypatch)
    losses, step = [], 0
    for t, task in enumerate(fx.task_data()):
        algorithm.begin_task(t, trainer, task["classes"])
        for batch in fx.batches(task):
            decisions.begin_step(step)
            loss = trainer.training_step(batch)
            trainer.backward(loss)
            trainer.optimizer_step()
            decisions.end_step(step)
            losses.append(float(loss.detach()))
            step += 1
        algorithm.end_task(t, trainer, fx.batches(task))
    assert not decisions.slots, "Mammoth's reservoir decided for more samples than modforge offered"
    return losses


def test_the_reference_was_recorded_on_this_fixture():
    assert REFERENCE["mammoth_commit"] == fx.MAMMOTH_COMMIT
    assert REFERENCE["fixture"] == fx.fingerprint(fx.task_data())  # else: re-record (the fixture changed)
    assert set(REFERENCE["runs"]) == set(fx.RUNS) and REFERENCE["steps"] == fx.STEPS == 50
    for name, record in REFERENCE["runs"].items():
        assert record["mammoth_model"] == fx.RUNS[name]["mammoth"] and len(record["losses"]) == fx.STEPS
        assert len(record["draws"]) == fx.STEPS


CHAOTIC = {"er_ace_cosine"}  # rounding differences grow step by step here (see the epsilon test below)


@pytest.mark.parametrize("name", list(fx.RUNS))
def test_the_losses_of_50_steps_are_mammoths(name, monkeypatch):
    expected = np.array(REFERENCE["runs"][name]["losses"])
    replayed = sum(len(d) > 0 for d in REFERENCE["runs"][name]["draws"])
    assert replayed >= 30  # the replay terms are in most of the steps compared
    losses = np.array(modforge_losses(name, monkeypatch))
    if name in CHAOTIC:
        # another PyTorch, or another processor's kernels (AVX-512 here, where the reference's machine gave
        # 3.5e-5 relative by step 36), round some operations differently, and this run amplifies any
        # rounding: its first steps are compared closely, the rest within 1e-3 under the PyTorch the
        # reference was recorded with — a changed term moves them by tens of percent (the epsilon test)
        np.testing.assert_allclose(losses[:10], expected[:10], rtol=1e-4, atol=1e-5)
        if torch.__version__.split("+")[0] == REFERENCE["torch"].split("+")[0]:
            np.testing.assert_allclose(losses, expected, rtol=1e-3, atol=1e-4)
        return
    np.testing.assert_allclose(losses, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    ("name", "changes"),
    [
        ("der", {"alpha": 0.31}),
        ("der", {"alpha": 0.0}),  # no distillation term
        ("derpp", {"beta": 0.52}),
        ("derpp", {"alpha": 0.0}),
        ("xder", {"gamma": 0.8}),  # the logit updates
        ("xder", {"constr_margin": 0.35}),
        ("xder", {"beta": 0.0}),  # no past-head replay term
        ("xder", {"past_constraint": True}),
        ("xder", {"future_constraint": False}),
    ],
)
def test_a_changed_hyper_parameter_or_term_breaks_the_parity(name, changes, monkeypatch):
    expected = np.array(REFERENCE["runs"][name]["losses"])
    losses = np.array(modforge_losses(name, monkeypatch, **changes))
    assert not np.allclose(losses, expected, rtol=RTOL, atol=ATOL)


def test_the_cosine_heads_epsilon_is_what_makes_it_mammoths_classifier(monkeypatch):
    """ER-ACE's cosine head without Mammoth's 1e-5 on the norms (``eps: 0``, plain ``F.normalize``): the first
    loss differs by ~1e-5 relative, and this run is chaotic enough that the gap grows to tens of percent by
    step 40 — the head's ``eps: 1.0e-5`` (the fixture's) is what the parity above needs."""
    expected = np.array(REFERENCE["runs"]["er_ace_cosine"]["losses"])
    monkeypatch.setattr(fx, "model_config", lambda head, _plain=fx.model_config: {
        **_plain(head), "head": {"type": "cosine", "args": {"scale": 10.0, "learn_scale": False}}})
    losses = np.array(modforge_losses("er_ace_cosine", monkeypatch))
    np.testing.assert_allclose(losses[0], expected[0], rtol=3e-5)
    assert not np.allclose(losses[0], expected[0], rtol=1e-6, atol=0)  # the epsilon shows in the first loss
    assert not np.allclose(losses, expected, rtol=RTOL, atol=ATOL)


def test_er_ace_without_its_mask_breaks_the_parity(monkeypatch):
    from modforge.continual.algorithms.er_ace import ERACE

    monkeypatch.setattr(ERACE, "mask", lambda self, labels, columns: torch.ones(columns, dtype=torch.bool))
    expected = np.array(REFERENCE["runs"]["er_ace"]["losses"])
    assert not np.allclose(modforge_losses("er_ace", monkeypatch), expected, rtol=RTOL, atol=ATOL)


def test_er_is_not_der():
    """The recordings themselves tell the methods apart (the first step has no replay: the same loss)."""
    runs = REFERENCE["runs"]
    assert runs["er"]["losses"][0] == runs["der"]["losses"][0] == runs["derpp"]["losses"][0]
    for a, b in (("er", "der"), ("der", "derpp"), ("er_ace", "er_ace_task_free"), ("xder", "xder_past_constraint")):
        assert not np.allclose(runs[a]["losses"], runs[b]["losses"], rtol=RTOL, atol=ATOL), (a, b)
