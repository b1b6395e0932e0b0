"""Continual-learning data: replay buffers (sampling statistics, balance, checkpoint state) and the
sequential digits benchmarks (class- and domain-incremental)."""

from __future__ import annotations

import io
import math

import pytest
import torch

import modforge as mf
from modforge.continual.benchmarks import ContinualSplits
from modforge.continual.buffer import Buffer


# ------------------------------------------------------------------ buffers
def test_reservoir_keeps_every_seen_sample_with_equal_probability():
    capacity, stream, trials = 20, 100, 400
    hits = torch.zeros(stream)
    for seed in range(trials):
        buffer = Buffer(capacity, seed=seed)
        for start in range(0, stream, 10):
            ids = torch.arange(start, start + 10)
            buffer.add(ids % 5, index=ids)
        assert len(buffer) == capacity and buffer.seen == stream
        kept = buffer.all()
        assert torch.equal(kept["label"], kept["index"] % 5)  # a slot's tensors come from one row
        assert len(kept["index"].unique()) == capacity
        hits[kept["index"]] += 1
    rate = hits / trials  # each sample: capacity / stream = 0.2
    assert abs(float(rate.mean()) - 0.2) < 1e-6  # exactly `capacity` kept each time
    assert float(rate[:50].mean()) == pytest.approx(0.2, abs=0.03) and float(rate[50:].mean()) == pytest.approx(
        0.2, abs=0.03
    )  # early and late samples alike (a FIFO or "first come" buffer fails this)


def test_class_balanced_buffer_stays_balanced_on_an_imbalanced_stream():
    buffer = Buffer(30, policy="class_balanced", seed=0)
    labels = torch.cat([torch.zeros(300), torch.ones(60), torch.full((20,), 2)]).long()  # 15:3:1 imbalance
    for chunk in labels.split(16):
        buffer.add(chunk, input=chunk.float().unsqueeze(1))
    counts = torch.bincount(buffer.all()["label"], minlength=3)
    assert int(counts.sum()) == 30 and int(counts.max() - counts.min()) <= 1, counts  # 10 each
    assert torch.equal(buffer.all()["input"].squeeze(1).long(), buffer.all()["label"])  # rows stay together


def test_buffer_stores_extra_tensors_and_samples_without_replacement():
    buffer = Buffer(8, seed=1)
    x, logits = torch.randn(5, 3), torch.randn(5, 4)
    buffer.add(torch.arange(5), input=x, logits=logits, task=torch.zeros(5, dtype=torch.long))
    drawn = buffer.sample(4)
    assert set(drawn) == {"label", "input", "logits", "task"} and len(drawn["label"].unique()) == 4
    for label, row, z in zip(drawn["label"], drawn["input"], drawn["logits"], strict=True):
        assert torch.equal(row, x[label]) and torch.equal(z, logits[label])
    assert len(buffer.sample(50)["label"]) == 5  # never more than it holds
    with pytest.raises(ValueError, match="keys"):
        buffer.add(torch.arange(2), input=torch.randn(2, 3))
    with pytest.raises(ValueError, match="rows"):
        buffer.add(torch.arange(2), input=torch.randn(3, 3), logits=torch.randn(2, 4), task=torch.zeros(2))
    with pytest.raises(ValueError, match="empty"):
        Buffer(3).sample(1)
    with pytest.raises(ValueError, match="capacity"):
        Buffer(0)


@pytest.mark.parametrize("policy", ["reservoir", "class_balanced"])
def test_buffer_state_round_trips_through_a_safe_checkpoint(policy):
    a = Buffer(10, policy=policy, seed=3)
    for i in range(6):
        a.add(torch.arange(i * 5, i * 5 + 5) % 4, input=torch.randn(5, 2))
    saved = io.BytesIO()
    torch.save(a.state_dict(), saved)
    saved.seek(0)
    b = Buffer(10, policy=policy, seed=99)
    b.load_state_dict(torch.load(saved, weights_only=True))
    more = torch.arange(7) % 4, torch.randn(7, 2)
    a.add(more[0], input=more[1])
    b.add(more[0], input=more[1])
    assert all(torch.equal(a.all()[k], b.all()[k]) for k in ("label", "input"))  # continues identically
    assert torch.equal(a.sample(3)["input"], b.sample(3)["input"])
    with pytest.raises(ValueError, match="checkpoint buffer"):
        Buffer(11, policy=policy).load_state_dict(a.state_dict())


# --------------------------------------------------------------- benchmarks
def test_seq_digits_is_five_tasks_of_two_disjoint_classes():
    splits = mf.DATASETS.build({"type": "seq_digits", "args": {}}, path="data", seed=0)
    assert isinstance(splits, ContinualSplits) and splits.setting == "class-il" and len(splits.tasks) == 5
    seen: set[int] = set()
    for t, task in enumerate(splits.tasks):
        assert task.classes == [2 * t, 2 * t + 1]
        for split in (task.train, task.val, task.test):
            assert set(split.labels.tolist()) == set(task.classes)
        assert not seen & set(task.classes)
        seen |= set(task.classes)
    assert sum(len(t.test) for t in splits.tasks) == len(splits.test)  # per-task test sets cover the joint one
    assert sorted(splits.class_order) == list(range(10))
    # renumbered labels point back at the original digits: class_names follow the order
    assert splits.class_names == [str(c) for c in splits.class_order]


def test_class_order_from_the_seed_or_given():
    first = mf.DATASETS.build({"type": "seq_digits", "args": {}}, path="data", seed=0).class_order
    again = mf.DATASETS.build({"type": "seq_digits", "args": {}}, path="data", seed=0).class_order
    other = mf.DATASETS.build({"type": "seq_digits", "args": {}}, path="data", seed=1).class_order
    assert first == again and first != other
    fixed = mf.DATASETS.build({"type": "seq_digits", "args": {"class_order": list(range(10))}}, path="data", seed=5)
    assert fixed.class_order == list(range(10)) and fixed.tasks[0].classes == [0, 1]
    with pytest.raises(mf.ConfigError, match="class_order must list each of the 10 classes once"):
        mf.DATASETS.build({"type": "seq_digits", "args": {"class_order": [0, 0, 1]}}, path="data")
    with pytest.raises(mf.ConfigError, match="do not divide into tasks of 3"):
        mf.DATASETS.build({"type": "seq_digits", "args": {"classes_per_task": 3}}, path="data")


def test_perm_digits_tasks_permute_the_same_samples():
    splits = mf.DATASETS.build({"type": "perm_digits", "args": {"tasks": 3}}, path="data", seed=0)
    assert splits.setting == "domain-il" and len(splits.tasks) == 3 and len(splits.train) == 3 * len(
        splits.tasks[0].train
    )
    a, b = splits.tasks[0].train, splits.tasks[1].train
    assert torch.equal(a.labels, b.labels) and not torch.equal(a.inputs, b.inputs)
    assert torch.equal(a.inputs.sort(dim=1).values, b.inputs.sort(dim=1).values)  # same pixels, another order
    assert all(t.classes == list(range(10)) for t in splits.tasks)


def test_rot_digits_rotates_each_task_by_its_own_angle():
    splits = mf.DATASETS.build({"type": "rot_digits", "args": {"tasks": 2, "max_angle": 90.0}}, path="data", seed=0)
    a, b = splits.tasks[0].test, splits.tasks[1].test
    assert a.inputs.shape[1:] == (1, 8, 8) and torch.equal(a.labels, b.labels)
    assert not torch.allclose(a.inputs, b.inputs)
    from modforge.continual.benchmarks import rotation

    x = torch.zeros(1, 1, 9, 9)
    x[0, 0, 4, 6] = 1.0  # right of the centre
    turned = rotation(90.0)(x)
    assert turned[0, 0].argmax() // 9 in (2, 6) and turned[0, 0].argmax() % 9 == 4  # now above or below it


# --------------------------------------------------------------- evaluation
def test_task_il_masking_and_class_il_argmax():
    from modforge.continual.evaluation import class_il_correct, mask_to_classes, task_il_correct

    logits = torch.tensor([[5.0, 1.0, 0.0, 9.0], [0.0, 2.0, 3.0, 1.0]])
    labels = torch.tensor([0, 2])
    masked = mask_to_classes(logits, [0, 1])
    assert masked[0].tolist() == [5.0, 1.0, float("-inf"), float("-inf")]
    # class-IL over all 4 classes: row 0 predicts 3 (wrong), row 1 predicts 2 (right)
    assert class_il_correct(logits, labels, seen_classes=4) == 1
    # over the first 2 seen classes only: row 0 → 0 (right); row 1 → 1 (wrong, its class is not seen yet)
    assert class_il_correct(logits, labels, seen_classes=2) == 1
    # task-IL: row 0 in task {0, 1} → 0 (right); row 1 in task {2, 3} → 2 (right)
    assert task_il_correct(logits[:1], labels[:1], [0, 1]) == 1 and task_il_correct(logits[1:], labels[1:], [2, 3]) == 1


def test_accuracy_matrix_summaries_by_hand():
    from modforge.continual.evaluation import (
        AccuracyMatrix,
        average_accuracy,
        backward_transfer,
        forgetting,
        learning_accuracy,
    )

    m = AccuracyMatrix()
    m.add_row([0.9])
    m.add_row([0.6, 0.8])
    m.add_row([0.5, 0.7, 0.95])
    assert average_accuracy(m) == pytest.approx((0.5 + 0.7 + 0.95) / 3)
    assert learning_accuracy(m) == pytest.approx((0.9 + 0.8 + 0.95) / 3)  # the diagonal
    # forgetting: task 0 best before the end 0.9 → 0.5 (0.4); task 1 best 0.8 → 0.7 (0.1)
    assert forgetting(m) == pytest.approx((0.4 + 0.1) / 2)
    # backward transfer: (0.5 − 0.9 + 0.7 − 0.8) / 2
    assert backward_transfer(m) == pytest.approx((-0.4 - 0.1) / 2)
    single = AccuracyMatrix([[0.7]])
    assert math.isnan(forgetting(single)) and math.isnan(backward_transfer(single))
    with pytest.raises(ValueError, match="give 2 accuracies"):
        single.add_row([0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="row 1 .* needs 2 values"):
        AccuracyMatrix([[0.1], [0.2]])


def test_a_class_that_was_ever_largest_keeps_a_uniform_sample_of_its_stream():
    """CBRS's 'full' classes stay full: class 0 (largest at first, then shrunk by classes 1
    and 2) must keep a uniform sample of its own stream, not favour its latest samples."""
    recent_share = []
    for seed in range(40):
        buffer = Buffer(20, policy="class_balanced", seed=seed)
        order = torch.cat([torch.zeros(100), torch.ones(30)])
        stream = torch.stack([torch.zeros(50), torch.full((50,), 2.0)], dim=1).reshape(-1)  # 0, 2, 0, 2...
        labels = torch.cat([order, stream]).long()
        ids = torch.arange(len(labels))
        for start in range(0, len(labels), 10):
            buffer.add(labels[start : start + 10], input=ids[start : start + 10].unsqueeze(1))
        kept = buffer.all()
        zeros = kept["input"].squeeze(1)[kept["label"] == 0]
        recent_share.append(float((zeros >= 130).float().mean()))  # class 0's last 50 of its 150 samples
    assert abs(sum(recent_share) / len(recent_share) - 1 / 3) < 0.08, sum(recent_share) / len(recent_share)
