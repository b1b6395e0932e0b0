"""Rehearsal and gradient-projection baselines (``er_ace``, ``xder``, ``agem``, ``gem``, ``gdumb``):
each one's step against a plain-torch rendering of Mammoth's update on a tiny batch, their task
boundaries, their state in checkpoints, the buffer features they use, and one short run each."""

from __future__ import annotations

import io
import json
import math
import sys

import pytest
import torch
import torch.nn.functional as F

import modforge as mf
from modforge.continual.buffer import Buffer, stream_subset
from modforge.continual.trainer import ContinualTrainer
from modforge.train.checkpoint import load_checkpoint
from run_configs import SGD, flat_seq_digits, mlp, run_config


def _model(num_classes: int = 4) -> torch.nn.Module:
    torch.manual_seed(0)
    return mf.build_model(
        {"backbone": {"type": "mlp", "args": {"hidden_dims": [8]}}, "head": "linear", "losses": ["cross_entropy"]},
        in_dim=5,
        num_classes=num_classes,
    )


def _setup(name: str, num_classes: int = 4, **args):
    model = _model(num_classes)
    algorithm = mf.ALGORITHMS.build({"type": name, "args": args}, path="algorithm", model=model,
                                    num_classes=num_classes)
    trainer = ContinualTrainer(model, torch.optim.SGD(model.parameters(), lr=0.1), algorithm=algorithm,
                               async_checkpoints=False)
    return model, algorithm, trainer


def _batch(n: int = 6, seed: int = 1, classes: tuple[int, ...] = (0, 1, 2, 3)) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.tensor(classes)[torch.randint(0, len(classes), (n,), generator=g)]
    return {"input": torch.randn(n, 5, generator=g), "label": labels}


def _flat_grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def _grad_of(model: torch.nn.Module, loss: torch.Tensor) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(model.parameters()))])


def _stepped_grad(trainer: ContinualTrainer, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The trainer's loss for ``batch`` and the gradient its backward leaves."""
    trainer.optimizer.zero_grad(set_to_none=True)
    loss = trainer.training_step(batch)
    trainer.backward(loss)
    return loss.detach(), _flat_grad(trainer.model)


def _round_trip(name: str, trainer: ContinualTrainer, tmp_path, **args):
    """The algorithm's state through a real checkpoint into a fresh algorithm (another seed)."""
    trainer.run_dir = tmp_path
    path = trainer.save_checkpoint()
    trainer.writer.wait()
    _, other, other_trainer = _setup(name, seed=5, **args)
    other_trainer.load_state(load_checkpoint(path))
    return other


def _same_buffer(a: Buffer, b: Buffer) -> bool:
    mine, theirs = a.all(), b.all()
    return set(mine) == set(theirs) and all(torch.equal(mine[k], theirs[k]) for k in mine)


# ---------------------------------------------------------------- buffer
def test_sample_with_index_is_samples_draw_and_names_the_slots():
    a, b = Buffer(10, seed=4), Buffer(10, seed=4)
    for buffer in (a, b):
        buffer.add(torch.arange(8) % 3, input=torch.arange(8).float().unsqueeze(1))
    slots, drawn = a.sample_with_index(5)
    assert torch.equal(drawn["input"], b.sample(5)["input"])  # the same draw as sample()
    assert len(slots.unique()) == 5 and torch.equal(a.all()["input"][slots], drawn["input"])
    assert torch.equal(a.sample(3)["input"], b.sample_with_index(3)[1]["input"])  # and the generator moves alike


def test_update_rewrites_stored_values_at_given_slots():
    buffer = Buffer(6, seed=0)
    buffer.add(torch.arange(4), input=torch.zeros(4, 2), logits=torch.zeros(4, 3), task=0)
    buffer.update(torch.tensor([2, 0]), logits=torch.ones(2, 3) * torch.tensor([[5.0], [7.0]]), task=torch.tensor([1, 1]))
    kept = buffer.all()
    assert kept["logits"][:, 0].tolist() == [7.0, 0.0, 5.0, 0.0] and kept["task"].tolist() == [1, 0, 1, 0]
    assert torch.equal(kept["input"], torch.zeros(4, 2))  # the other keys stay
    with pytest.raises(KeyError, match="stores no features"):
        buffer.update(torch.tensor([0]), features=torch.zeros(1, 3))
    with pytest.raises(ValueError, match="slots must be in"):
        buffer.update(torch.tensor([4]), logits=torch.zeros(1, 3))  # slot 4 holds nothing yet
    with pytest.raises(ValueError, match="twice"):
        buffer.update(torch.tensor([1, 1]), logits=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="shape"):
        buffer.update(torch.tensor([1]), logits=torch.zeros(1, 4))


def test_task_ids_per_sample_and_clear_then_refill():
    buffer = Buffer(5, seed=0)
    buffer.add(torch.tensor([0, 1]), input=torch.zeros(2, 1), task=3)
    buffer.add(torch.tensor([2]), input=torch.ones(1, 1), task=torch.tensor([4]))
    assert buffer.all()["task"].tolist() == [3, 3, 4] and buffer.all()["task"].dtype == torch.long
    buffer.clear()
    assert buffer.is_empty and buffer.seen == 0
    buffer.add(torch.tensor([7, 8]), input=torch.ones(2, 1))  # any keys after a clear, in slot order
    assert buffer.all()["label"].tolist() == [7, 8] and set(buffer.all()) == {"label", "input"}


def test_greedy_balanced_keeps_the_first_samples_of_each_class_balanced():
    buffer = Buffer(6, policy="greedy_balanced", seed=0)
    for cls in range(3):  # class-incremental: 10 samples of class 0, then of 1, then of 2
        ids = torch.arange(cls * 10, cls * 10 + 10)
        for chunk in ids.split(4):
            buffer.add(torch.full((len(chunk),), cls), index=chunk)
        if cls == 0:
            assert buffer.all()["index"].tolist() == [0, 1, 2, 3, 4, 5]  # first come, first kept
    kept = buffer.all()
    assert torch.bincount(kept["label"], minlength=3).tolist() == [2, 2, 2]
    ids = {c: set(kept["index"][kept["label"] == c].tolist()) for c in range(3)}
    assert ids[0] <= set(range(6)) and ids[1] <= {10, 11, 12} and ids[2] == {20, 21}  # a full share takes no more
    assert torch.equal(kept["label"], kept["index"] // 10)  # rows stay together
    assert buffer.class_seen == {0: 10, 1: 10, 2: 10}


def test_greedy_balanced_refuses_a_class_at_its_share_even_with_room():
    buffer = Buffer(4, policy="greedy_balanced", seed=0)
    buffer.add(torch.tensor([0, 0, 1]), input=torch.zeros(3, 1))  # two classes seen: a share of 2 each
    buffer.add(torch.tensor([0]), input=torch.ones(1, 1))  # class 0 has its 2: refused though a slot is free
    assert len(buffer) == 3 and buffer.all()["label"].tolist() == [0, 0, 1]


@pytest.mark.parametrize("policy", ["greedy_balanced", "class_balanced", "reservoir"])
def test_buffer_state_with_task_ids_round_trips_exactly(policy):
    a = Buffer(7, policy=policy, seed=3)
    for i in range(5):
        a.add(torch.arange(i * 4, i * 4 + 4) % (i + 1), input=torch.randn(4, 2), task=i)
    saved = io.BytesIO()
    torch.save(a.state_dict(), saved)
    saved.seek(0)
    b = Buffer(7, policy=policy, seed=99)
    b.load_state_dict(torch.load(saved, weights_only=True))
    more = torch.tensor([5, 6, 5, 0, 6]), torch.randn(5, 2)
    for buffer in (a, b):
        buffer.add(more[0], input=more[1], task=9)
    assert _same_buffer(a, b) and torch.equal(a.sample_with_index(3)[0], b.sample_with_index(3)[0])


def test_stream_subset_draws_per_class_or_in_all_reproducibly():
    batches = [{"label": torch.arange(i, i + 10) % 3, "input": torch.arange(i, i + 10).float()} for i in range(0, 60, 10)]
    per_class = stream_subset(batches, {0: 4, 2: 3}, torch.Generator().manual_seed(0))
    assert per_class["label"].tolist() == [0] * 4 + [2] * 3  # class 1 skipped; grouped by class
    assert torch.equal(per_class["input"].long() % 3, per_class["label"]) and len(per_class["input"].unique()) == 7
    again = stream_subset(batches, {0: 4, 2: 3}, torch.Generator().manual_seed(0))
    assert torch.equal(again["input"], per_class["input"])
    overall = stream_subset(batches, 9, torch.Generator().manual_seed(1))
    assert len(overall["label"]) == 9 and torch.equal(overall["input"].long() % 3, overall["label"])
    counts = torch.zeros(60)  # uniform: every sample as likely as any other
    for seed in range(300):
        counts[stream_subset(batches, 9, torch.Generator().manual_seed(seed))["input"].long()] += 1
    assert float(counts[:30].mean()) == pytest.approx(float(counts[30:].mean()), rel=0.1)
    assert len(stream_subset(batches, {0: 50}, torch.Generator())["label"]) == 20  # no more than the stream has


# ---------------------------------------------------------------- ER-ACE
def _ace_expected(model, batch, keep, stored=None):
    logits = model(batch["input"]).masked_fill(~keep, -1e9)
    loss = F.cross_entropy(logits, batch["label"])
    if stored is not None:
        loss = loss + F.cross_entropy(model(stored["input"]), stored["label"])
    return loss


def test_er_ace_masks_the_absent_seen_classes_and_replays_over_all():
    model, algorithm, trainer = _setup("er_ace", buffer_size=4, minibatch_size=4)
    first = _batch(seed=2, classes=(0, 1))
    algorithm.begin_task(0, trainer, [0, 1])
    assert torch.equal(trainer.training_step(first), model(first)["loss"])  # task 0: plain CE, no replay
    assert len(algorithm.buffer) == 4 and algorithm.seen_so_far == [0, 1]
    stored = algorithm.buffer.all()
    algorithm.begin_task(1, trainer, [2, 3])
    only_2 = {"input": _batch(seed=3)["input"], "label": torch.full((6,), 2)}
    algorithm.buffer = Buffer(4, seed=0)
    algorithm.buffer.add(stored["label"], input=stored["input"])
    # seen {0, 1, 2}: kept are the batch's class 2 and every column from 2 on; 0 and 1 are masked
    expected = _ace_expected(model, only_2, torch.tensor([False, False, True, True]), stored)
    assert torch.allclose(trainer.training_step(only_2), expected)
    only_3 = {"input": _batch(seed=4)["input"], "label": torch.full((6,), 3)}
    algorithm.buffer = Buffer(4, seed=0)
    algorithm.buffer.add(stored["label"], input=stored["input"])
    # seen {0, 1, 2, 3}: class 2, of this task but absent from the batch, is masked too
    expected = _ace_expected(model, only_3, torch.tensor([False, False, False, True]), stored)
    assert torch.allclose(trainer.training_step(only_3), expected)


def test_er_ace_task_free_masks_from_the_first_task(tmp_path):
    model, algorithm, trainer = _setup("er_ace", task_free=True, buffer_size=6, minibatch_size=6)
    algorithm.begin_task(0, trainer, [0, 1, 2, 3])
    batch = {"input": _batch()["input"], "label": torch.tensor([1, 1, 1, 3, 3, 3])}
    algorithm.seen_so_far = [0]
    # masked at task 0 already: class 0 (seen, absent) and class 2 (never seen, but below the largest seen, 3)
    keep = torch.tensor([False, True, False, True])
    assert torch.allclose(trainer.training_step(batch), _ace_expected(model, batch, keep))
    stored = algorithm.buffer.all()
    assert torch.allclose(trainer.training_step(batch), _ace_expected(model, batch, keep, stored))  # and replay
    other = _round_trip("er_ace", trainer, tmp_path, task_free=True, buffer_size=6, minibatch_size=6)
    assert other.seen_so_far == [0, 1, 3] and _same_buffer(other.buffer, algorithm.buffer)


# ---------------------------------------------------------------- A-GEM
def test_agem_projects_a_conflicting_gradient_onto_the_reference_plane(tmp_path):
    model, algorithm, trainer = _setup("agem", buffer_size=6, minibatch_size=6)
    batch = _batch()
    loss, grad = _stepped_grad(trainer, batch)  # empty memory: the plain gradient
    assert torch.equal(loss, model(batch)["loss"].detach()) and torch.allclose(grad, _grad_of(model, model(batch)["loss"]))
    flipped = {"input": batch["input"], "label": (batch["label"] + 2) % 4}  # a memory that disagrees
    algorithm.buffer.add(flipped["label"], input=flipped["input"])
    g, ref = _grad_of(model, model(batch)["loss"]), _grad_of(model, model(flipped)["loss"])
    assert float(g @ ref) < 0
    loss, grad = _stepped_grad(trainer, batch)
    assert torch.allclose(loss, model(batch)["loss"])  # the reported loss is the batch's
    assert torch.allclose(grad, g - (g @ ref) / (ref @ ref) * ref, atol=1e-6)
    assert abs(float(grad @ ref)) < 1e-5  # the projection no longer increases the memory's loss
    algorithm.buffer = Buffer(6, seed=0)
    algorithm.buffer.add(batch["label"], input=batch["input"])  # agreeing memory: the gradient stays
    assert torch.allclose(_stepped_grad(trainer, batch)[1], g, atol=1e-7)
    other = _round_trip("agem", trainer, tmp_path, buffer_size=6, minibatch_size=6)
    assert other.train_batch == 6 and _same_buffer(other.buffer, algorithm.buffer)


def test_agem_memory_gets_one_training_batch_per_task_drawn_from_the_task():
    model, algorithm, trainer = _setup("agem", buffer_size=20)
    loader = [_batch(n=5, seed=s, classes=(0, 1)) for s in range(4)]
    trainer.training_step(loader[0])  # a training batch of 5
    algorithm.end_task(0, trainer, loader)
    kept = algorithm.buffer.all()
    data = torch.cat([b["input"] for b in loader])
    assert len(kept["label"]) == 5 and len({tuple(x.tolist()) for x in kept["input"]}) == 5
    assert all(any(torch.equal(x, row) for row in data) for x in kept["input"])
    algorithm.end_task(1, trainer, [_batch(n=5, seed=s, classes=(2, 3)) for s in range(4)])
    assert len(algorithm.buffer) == 10 and set(algorithm.buffer.all()["label"][5:].tolist()) <= {2, 3}


# ---------------------------------------------------------------- GEM
def test_gem_memory_keeps_an_equal_share_per_class_with_task_ids(tmp_path):
    pytest.importorskip("quadprog")
    model, algorithm, trainer = _setup("gem", buffer_size=8)
    first = [_batch(n=6, seed=s, classes=(0, 1)) for s in range(3)]
    algorithm.begin_task(0, trainer, [0, 1])
    algorithm.end_task(0, trainer, first)
    kept = algorithm.buffer.all()
    assert kept["label"].tolist() == [0] * 4 + [1] * 4 and kept["task"].tolist() == [0] * 8
    algorithm.begin_task(1, trainer, [2, 3])
    algorithm.end_task(1, trainer, [_batch(n=6, seed=s, classes=(2, 3)) for s in range(3, 6)])
    now = algorithm.buffer.all()
    assert now["label"].tolist() == [0, 0, 1, 1, 2, 2, 3, 3] and now["task"].tolist() == [0] * 4 + [1] * 4
    assert torch.equal(now["input"][:2], kept["input"][:2]) and torch.equal(now["input"][2:4], kept["input"][4:6])
    other = _round_trip("gem", trainer, tmp_path, buffer_size=8)
    assert other.task_classes == {0: [0, 1], 1: [2, 3]} and _same_buffer(other.buffer, algorithm.buffer)


def test_gem_projection_by_hand_for_one_task_and_kkt_for_two():
    pytest.importorskip("quadprog")
    model, algorithm, trainer = _setup("gem", gamma=0.5, buffer_size=6)
    batch = _batch()
    memory = {"input": batch["input"], "label": (batch["label"] + 2) % 4}
    algorithm.buffer.add(memory["label"], input=memory["input"], task=0)
    g, m = _grad_of(model, model(batch)["loss"]), _grad_of(model, model(memory)["loss"])
    assert float(g @ m) < 0
    loss, grad = _stepped_grad(trainer, batch)
    assert torch.allclose(loss, model(batch)["loss"])
    # the dual in one variable: min ½(m·m + 1e-3)v² + (m·g)v subject to v ≥ gamma
    v = max(0.5, float(-(m @ g) / (m @ m + 1e-3)))
    assert torch.allclose(grad, g + v * m, atol=1e-5)

    algorithm.buffer = Buffer(6, seed=0)
    algorithm.buffer.add(memory["label"][:3], input=memory["input"][:3], task=0)
    algorithm.buffer.add(memory["label"][3:], input=memory["input"][3:], task=1)
    rows = [model({"input": memory["input"][s], "label": memory["label"][s]})["loss"] for s in (slice(0, 3), slice(3, 6))]
    tasks = torch.stack([_grad_of(model, r) for r in rows]).double()
    _, grad = _stepped_grad(trainer, batch)
    duals = torch.linalg.lstsq(tasks.T, (grad.double() - g.double()).unsqueeze(1)).solution.reshape(-1)
    assert torch.allclose(tasks.T @ duals, grad.double() - g.double(), atol=1e-5)  # grad = g + Gᵀv
    slope = tasks @ grad.double() + 1e-3 * duals  # the dual objective's gradient at v
    assert (duals >= 0.5 - 1e-4).all() and (slope >= -1e-4).all()  # feasible, and no descent left ...
    assert ((duals - 0.5).abs() < 1e-4).logical_or(slope.abs() < 1e-4).all()  # ... complementary slackness


def test_gem_without_quadprog_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "quadprog", None)  # import quadprog now raises ImportError
    with pytest.raises(mf.UsageError, match="pip install quadprog"):
        mf.ALGORITHMS.build({"type": "gem", "args": {}}, path="algorithm", model=_model(), num_classes=4)


# ---------------------------------------------------------------- X-DER
def _capped(stored, new, labels, columns, gamma):
    """Mammoth's update_logits, written out row by row."""
    out = stored.clone()
    for i, y in enumerate(labels.tolist()):
        part = new[i, columns].clone()
        if part.max() > stored[i, y]:
            part = part * gamma * stored[i, y] / part.max()
        out[i, columns] = part
    return out


def _hinge(violation, eta):
    return eta * violation[violation > 0].mean() if (violation > 0).any() else 0.0


def test_xder_first_task_present_head_and_future_constraint():
    model, algorithm, trainer = _setup("xder", num_classes=6, constr_eta=0.4, constr_margin=0.3, buffer_size=4)
    algorithm.begin_task(0, trainer, [0, 1])
    batch = _batch(classes=(0, 1))
    out = model(batch["input"])
    future = out[:, 2:].max(1).values + 0.3 - out[:, :2].max(1).values
    expected = F.cross_entropy(out[:, :2], batch["label"]) + _hinge(future, 0.4)
    assert torch.allclose(trainer.training_step(batch), expected)
    assert algorithm.buffer.is_empty  # X-DER fills its memory at task ends only


def test_xder_second_task_step_by_hand_with_the_future_past_logit_update(tmp_path):
    args = {"alpha": 0.3, "beta": 0.8, "gamma": 0.85, "constr_eta": 0.5, "constr_margin": 0.3,
            "past_constraint": True, "buffer_size": 4, "minibatch_size": 4}
    model, algorithm, trainer = _setup("xder", num_classes=6, **args)
    algorithm.begin_task(0, trainer, [0, 1])
    loader = [_batch(n=6, seed=s, classes=(0, 1)) for s in range(3)]
    trainer.training_step(loader[0])
    algorithm.end_task(0, trainer, loader)
    stored = algorithm.buffer.all()
    assert stored["label"].tolist() == [0, 0, 1, 1] and stored["task"].tolist() == [0] * 4
    assert torch.allclose(stored["logits"], model(stored["input"]))  # logits when stored (task 0: none capped)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))

    algorithm.begin_task(1, trainer, [2, 3])
    batch = _batch(classes=(2, 3))
    out, past_out = model(batch["input"]), model(stored["input"])  # both draws replay all 4 stored samples
    expected = (
        F.cross_entropy(out[:, 2:4], batch["label"] - 2)
        + 0.3 * F.mse_loss(past_out, stored["logits"])
        + 0.8 * F.cross_entropy(past_out[:, :2], stored["label"])
    )
    own = past_out[:, :2]  # the replayed samples' own head: task 0's
    future = torch.cat([out[:, 4:], past_out[:, 4:]]).max(1).values + 0.3 - torch.cat([out[:, 2:4], own]).max(1).values
    probabilities = F.softmax(out[:, :4], 1)
    past = probabilities[:, :2].max(1).values.detach() + 0.3 - probabilities[:, 2:].max(1).values
    expected = expected + _hinge(future, 0.5) + _hinge(past, 0.5)
    assert torch.allclose(trainer.training_step(batch), expected)
    # every replayed sample of task 0, updated for the first time: present and future heads from now
    updated = algorithm.buffer.all()
    order = [int((updated["input"] == row).all(1).nonzero()) for row in stored["input"]]
    want = _capped(stored["logits"], past_out.detach(), stored["label"], [2, 3, 4, 5], 0.85)
    assert torch.allclose(updated["logits"][order], want) and updated["task"].tolist() == [1] * 4
    assert algorithm.update_counter[:4].tolist() == [1] * 4

    other = _round_trip("xder", trainer, tmp_path, num_classes=6, **args)
    assert other.task_classes == [[0, 1], [2, 3]] and torch.equal(other.update_counter, algorithm.update_counter)
    assert _same_buffer(other.buffer, algorithm.buffer)


def test_xder_task_end_rebuilds_the_memory_and_updates_old_logits():
    model, algorithm, trainer = _setup("xder", num_classes=6, gamma=0.5, buffer_size=4)
    algorithm.begin_task(0, trainer, [0, 1])
    algorithm.end_task(0, trainer, [_batch(n=6, seed=s, classes=(0, 1)) for s in range(3)])
    before = algorithm.buffer.all()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    algorithm.begin_task(1, trainer, [2, 3])
    algorithm.end_task(1, trainer, [_batch(n=6, seed=s, classes=(2, 3)) for s in range(3, 6)])
    after = algorithm.buffer.all()
    assert after["label"].tolist() == [0, 1, 2, 3] and after["task"].tolist() == [1] * 4  # 4 // 4 classes = 1 each
    old = before["input"][[0, 2]]  # each old class keeps its first sample
    assert torch.equal(after["input"][:2], old)
    now = model(after["input"]).detach()
    want_old = _capped(before["logits"][[0, 2]], now[:2], after["label"][:2], [2, 3, 4, 5], 0.5)
    want_new = _capped(now[2:], now[2:], after["label"][2:], [0, 1], 0.5)  # new samples: their past head capped
    assert torch.allclose(after["logits"], torch.cat([want_old, want_new]), atol=1e-6)
    assert (algorithm.update_counter == 0).all()


def test_xder_refuses_bad_values_and_uneven_tasks():
    with pytest.raises(mf.ConfigError, match="gamma must be in"):
        mf.ALGORITHMS.build({"type": "xder", "args": {"gamma": 1.5}}, path="algorithm", model=_model(), num_classes=4)
    with pytest.raises(mf.ConfigError, match="constr_eta"):
        mf.ALGORITHMS.build({"type": "xder", "args": {"constr_eta": -1}}, path="algorithm", model=_model(),
                            num_classes=4)
    _, algorithm, trainer = _setup("xder")
    algorithm.begin_task(0, trainer, [0, 1])
    with pytest.raises(ValueError, match="same number of classes"):
        algorithm.begin_task(1, trainer, [2])
    with pytest.raises(ValueError, match="repeats classes"):
        algorithm.begin_task(1, trainer, [1, 2])
    with pytest.raises(ValueError, match="outside the task's"):
        trainer.training_step(_batch(classes=(1, 2)))  # blurry boundaries: a class of another task


# ---------------------------------------------------------------- GDumb
def _cosine_restarts(epoch: int, maxlr: float, minlr: float) -> float:
    """The retraining's learning rate in ``epoch`` (Mammoth's warm-up, then SGDR with T_0=1, T_mult=2)."""
    if epoch < 2:
        return maxlr * (0.1 if epoch == 0 else 1.0)
    steps, start, length = epoch - 1, 0, 1
    while steps >= start + length:
        start, length = start + length, length * 2
    return minlr + (maxlr - minlr) * (1 + math.cos(math.pi * (steps - start) / length)) / 2


def test_gdumb_stream_only_fills_the_memory_in_the_first_epoch():
    model, algorithm, trainer = _setup("gdumb", buffer_size=6)
    before = [p.detach().clone() for p in model.parameters()]
    algorithm.begin_task(0, trainer, [0, 1])
    batch = {"input": _batch()["input"], "label": torch.tensor([0, 1, 0, 1, 0, 1])}
    loss = trainer.training_step(batch)
    trainer.backward(loss)
    trainer.optimizer_step()
    assert float(loss.detach()) == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))  # the stream trains nothing
    assert len(algorithm.buffer) == 6 and torch.equal(algorithm.buffer.all()["input"], batch["input"])
    trainer.epoch += 1  # a second epoch of the same task offers nothing (Mammoth trains one)
    trainer.training_step(_batch(seed=9, classes=(0, 1)))
    assert algorithm.buffer.seen == 6


def test_gdumb_retrains_from_the_starting_weights_on_the_memory_alone(tmp_path):
    args = {"maxlr": 0.2, "minlr": 0.01, "fitting_epochs": 5, "optim_mom": 0.9, "optim_wd": 1e-3, "buffer_size": 10}
    model, algorithm, trainer = _setup("gdumb", **args)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    algorithm.begin_task(0, trainer, [0, 1, 2, 3])
    for seed in range(3):
        trainer.training_step(_batch(n=4, seed=seed))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # whatever the model became, the learner starts from the run's first weights
    memory = algorithm.buffer.all()
    generator = torch.Generator()
    generator.set_state(algorithm.generator.get_state())
    reference = _model()
    reference.load_state_dict(start)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.2, momentum=0.9, weight_decay=1e-3)
    for epoch in range(5):
        for group in optimizer.param_groups:
            group["lr"] = _cosine_restarts(epoch, 0.2, 0.01)
        order = torch.randperm(10, generator=generator)
        for rows in order.split(4):  # the training batch size
            optimizer.zero_grad()
            F.cross_entropy(reference(memory["input"][rows]), memory["label"][rows]).backward()
            optimizer.step()
    algorithm.end_task(0, trainer, None)
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.allclose(mine, theirs, atol=1e-6)
    other = _round_trip("gdumb", trainer, tmp_path, **args)
    assert torch.equal(other.generator.get_state(), algorithm.generator.get_state()) and other.train_batch == 4
    assert all(torch.equal(other.initial[k], start[k]) for k in start) and _same_buffer(other.buffer, algorithm.buffer)
    assert other.fill_epoch == 0 and other.buffer.policy == "greedy_balanced"


def test_gdumb_cutmix_pastes_one_box_and_weighs_by_its_area():
    from modforge.continual.algorithms.gdumb import cutmix

    images = torch.arange(6 * 2 * 8 * 8, dtype=torch.float32).reshape(6, 2, 8, 8)  # every pixel distinct
    labels = torch.arange(6)
    mixed_once = False
    for seed in range(20):
        mixed, a, b, lam = cutmix(images, labels, 1.0, torch.Generator().manual_seed(seed))
        assert torch.equal(a, labels)
        if lam == 1.0:
            assert torch.equal(mixed, images) and torch.equal(b, labels)
            continue
        mixed_once = True
        box = mixed[0, 0] != images[0, 0] if b[0] != 0 else mixed[1, 0] != images[1, 0]
        assert 1 - lam == pytest.approx(float(box.float().mean()))
        for i in range(6):
            assert torch.equal(mixed[i], torch.where(box, images[b[i]], images[i]))
    assert mixed_once


def test_gdumb_refuses_bad_values():
    for args, message in (({"minlr": 1.0, "maxlr": 0.1}, "minlr must be in"),
                          ({"optim_nesterov": True}, "optim_nesterov needs a momentum"),
                          ({"fitting_epochs": 0}, "fitting_epochs")):  # fmt: skip
        with pytest.raises(mf.ConfigError, match=message):
            mf.ALGORITHMS.build({"type": "gdumb", "args": args}, path="algorithm", model=_model(), num_classes=4)


# ---------------------------------------------------------------- flags and runs
def test_hyper_parameters_are_mammoths_names():
    names = {name: {a.name for a in mf.ALGORITHMS.signature(name).args if not a.injected}
             for name in ("er_ace", "xder", "agem", "gdumb")}  # fmt: skip
    assert {"task_free", "buffer_size", "minibatch_size"} <= names["er_ace"]
    assert {"alpha", "beta", "gamma", "constr_eta", "constr_margin", "align_bn", "past_constraint",
            "future_constraint"} <= names["xder"]  # fmt: skip
    assert {"maxlr", "minlr", "fitting_epochs", "cutmix_alpha", "optim_mom", "optim_wd"} <= names["gdumb"]
    assert {"buffer_size", "minibatch_size"} <= names["agem"]
    assert all("seed" not in n for n in names.values())


RUN = run_config(flat_seq_digits(batch_size=10), mlp(64), train=dict(optimizer=SGD, num_threads=1, progress="never"),
                 after="continual: {algorithm: sgd, epochs_per_task: 1}\n")


RUNS = {
    "er_ace": "{type: er_ace, args: {buffer_size: 60}}",
    "xder": "{type: xder, args: {buffer_size: 60}}",
    "agem": "{type: agem, args: {buffer_size: 60}}",
    "gem": "{type: gem, args: {buffer_size: 30}}",
    # 12 fitting epochs at each task's end (not 32: half the test's CPU); task-IL about 0.88, above the 0.7 below
    "gdumb": "{type: gdumb, args: {buffer_size: 100, fitting_epochs: 12, maxlr: 0.1}}",
}


@pytest.mark.filterwarnings("ignore:torchscript. stage 'backbone':UserWarning")
@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_short_continual_run_resumes_exactly_from_any_checkpoint(cli, write, tmp_path, name):
    if name == "gem":
        pytest.importorskip("quadprog")
    config = write("seq.yaml", RUN)
    chosen = [f"continual.algorithm={RUNS[name]}", "train.checkpoint={every_n_steps: 10, keep_last: 100}"]
    res = cli("train", str(config), *chosen, "--run-dir", "reference")
    assert res.code == 0, res.err
    reference = json.loads((tmp_path / "reference" / "summary.json").read_text())
    matrix = reference["class_il"]["matrix"]
    assert [len(row) for row in matrix] == [1, 2, 3, 4, 5] and all(0 <= a <= 1 for row in matrix for a in row)
    assert reference["task_il"]["average_accuracy"] > 0.7  # every task is learned (sgd: about 0.87)
    saved = {path: torch.load(path, weights_only=True) for path in (tmp_path / "reference" / "checkpoints").glob("epoch*.pt")}
    boundary = next(p for p, c in saved.items() if c["continual"]["tasks_done"] == 2 and not c["batch_in_epoch"])
    inside = next(p for p, c in saved.items() if c["continual"]["tasks_done"] == 3 and c["batch_in_epoch"])
    final = torch.load(tmp_path / "reference" / "checkpoints" / "last.pt", weights_only=True)
    for i, start in enumerate((boundary, inside)):  # between tasks 2 and 3; inside task 4
        res = cli("train", "--resume", str(start), "--run-dir", f"resumed{i}")
        assert res.code == 0, res.err
        ours = json.loads((tmp_path / f"resumed{i}" / "summary.json").read_text())
        assert ours["class_il"]["matrix"] == matrix
        last = torch.load(tmp_path / f"resumed{i}" / "checkpoints" / "last.pt", weights_only=True)
        assert all(torch.equal(last["model"][k], final["model"][k]) for k in final["model"])
