"""iCaRL: herding picks exemplars in the paper's order, the memory is shared evenly over the
classes seen, the loss is sigmoid cross-entropy with distilled old-class targets, and
classification is by the nearest mean of exemplars."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import modforge as mf
from modforge.continual.exemplars import ExemplarMemory, herding
from modforge.continual.trainer import ContinualTrainer
from modforge.train.checkpoint import load_checkpoint

NUM_CLASSES = 4


def _setup(**args):
    torch.manual_seed(0)
    model = mf.build_model(
        {"backbone": {"type": "mlp", "args": {"hidden_dims": [8]}}, "head": "linear", "losses": ["cross_entropy"]},
        in_dim=5,
        num_classes=NUM_CLASSES,
    )
    algorithm = mf.ALGORITHMS.build({"type": "icarl", "args": args}, path="algorithm", model=model,
                                    num_classes=NUM_CLASSES)
    trainer = ContinualTrainer(model, torch.optim.SGD(model.parameters(), lr=0.1), algorithm=algorithm,
                               async_checkpoints=False)
    return model, algorithm, trainer


def _task_data(classes: list[int], per_class: int = 5, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.tensor(classes).repeat_interleave(per_class)
    return {"input": torch.randn(len(labels), 5, generator=g), "label": labels}


def test_herding_picks_the_row_that_keeps_the_running_mean_closest():
    features = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.8, 0.6]])
    # mean (0.6, 0.533): [0.8, 0.6] is nearest; then [0, 1] brings the pair's mean closer than [1, 0]
    assert herding(features, 3).tolist() == [2, 1, 0]
    assert herding(features, 1).tolist() == [2]
    assert herding(features, 10).tolist() == [2, 1, 0]  # never more than there are


def test_memory_shares_capacity_over_classes_and_shrinks_to_the_best_first():
    memory = ExemplarMemory(6, seed=0)
    inputs = torch.arange(10.0).reshape(5, 2)
    chosen = memory.add_class(0, inputs, F.normalize(inputs + 1, dim=1), memory.per_class(2))
    assert len(memory.exemplars[0]) == 3 and torch.equal(memory.exemplars[0], inputs[chosen])
    memory.add_class(1, inputs, F.normalize(inputs + 1, dim=1), memory.per_class(2))
    memory.shrink(memory.per_class(3))
    assert len(memory) == 4 and torch.equal(memory.exemplars[0], inputs[chosen[:2]])
    drawn = memory.sample(3)
    assert drawn["input"].shape == (3, 2) and set(drawn["label"].tolist()) <= {0, 1}
    copy = ExemplarMemory(6)
    copy.load_state_dict(memory.state_dict())
    assert torch.equal(copy.sample(4)["input"], memory.sample(4)["input"])  # same contents, same draws
    with pytest.raises(ValueError, match="holds 6, this one 5"):
        ExemplarMemory(5).load_state_dict(memory.state_dict())


def test_first_task_loss_is_sigmoid_cross_entropy_over_the_seen_classes():
    model, algorithm, trainer = _setup(buffer_size=4)
    algorithm.begin_task(0, trainer, [0, 1])
    batch = _task_data([0, 1], per_class=3)
    logits = model(batch["input"])
    expected = F.binary_cross_entropy_with_logits(logits[:, :2], F.one_hot(batch["label"], 4)[:, :2].float())
    assert torch.allclose(trainer.training_step(batch), expected)


def test_end_of_task_keeps_herding_exemplars_and_later_tasks_distil_old_classes():
    model, algorithm, trainer = _setup(buffer_size=4, minibatch_size=4)
    first = _task_data([0, 1])
    algorithm.begin_task(0, trainer, [0, 1])
    algorithm.end_task(0, trainer, [first])
    with torch.no_grad():
        features = F.normalize(model(first["input"], returnt="features"), dim=1)
    for label in (0, 1):  # 4 exemplars over 2 classes: 2 each, by herding on normalised features
        rows = (first["label"] == label).nonzero().reshape(-1)
        assert torch.equal(algorithm.memory.exemplars[label], first["input"][rows[herding(features[rows], 2)]])
    exemplars = algorithm.memory.all()
    batch = _task_data([2, 3], per_class=2, seed=1)
    joined = torch.cat([batch["input"], exemplars["input"]])  # every exemplar is replayed (4 of 4)
    labels = torch.cat([batch["label"], exemplars["label"]])
    with torch.no_grad():
        teacher_logits = model(joined)  # the model as frozen at the end of task 0
        for p in model.parameters():
            p.add_(0.1)  # the model moves on; the teacher does not
    algorithm.begin_task(1, trainer, [2, 3])
    targets = F.one_hot(labels, 4).float()
    targets[:, :2] = torch.sigmoid(teacher_logits[:, :2])
    expected = F.binary_cross_entropy_with_logits(model(joined), targets)
    assert torch.allclose(trainer.training_step(batch), expected)


def test_classification_is_by_the_nearest_mean_of_exemplars():
    model, algorithm, trainer = _setup(buffer_size=6)
    first = _task_data([0, 1], per_class=6)
    algorithm.begin_task(0, trainer, [0, 1])
    algorithm.end_task(0, trainer, [first])
    exemplars = algorithm.memory.all()
    with torch.no_grad():
        unit = F.normalize(model(exemplars["input"], returnt="features"), dim=1)
        means = F.normalize(torch.stack([unit[exemplars["label"] == c].mean(0) for c in (0, 1)]), dim=1)
        query = _task_data([0, 1], per_class=4, seed=3)
        q = F.normalize(model(query["input"], returnt="features"), dim=1)
    out = algorithm.class_scores(trainer, [query])
    assert torch.equal(out["label"], query["label"])
    assert torch.allclose(out["scores"][:, :2], -torch.cdist(q, means) ** 2, atol=1e-6)
    assert torch.isinf(out["scores"][:, 2:]).all()  # classes without exemplars are never predicted
    nearest = torch.cdist(q, means).argmin(1)
    assert torch.equal(out["scores"].argmax(1), nearest)


def test_icarl_refuses_repeated_classes_and_keeps_its_state_in_checkpoints(tmp_path):
    model, algorithm, trainer = _setup(buffer_size=4, seed=3)
    trainer.run_dir = tmp_path
    algorithm.begin_task(0, trainer, [0, 1])
    algorithm.end_task(0, trainer, [_task_data([0, 1])])
    with pytest.raises(ValueError, match="class-incremental tasks; task 1 repeats classes \\[1\\]"):
        algorithm.begin_task(1, trainer, [1, 2])
    path = trainer.save_checkpoint()
    _, other, other_trainer = _setup(buffer_size=4)
    other_trainer.load_state(load_checkpoint(path))
    assert other.old_classes == [0, 1] and other.mean_classes == [0, 1]
    assert torch.equal(other.class_means, algorithm.class_means)
    assert torch.equal(other.memory.sample(4)["input"], algorithm.memory.sample(4)["input"])
    assert all(torch.equal(a, b) for a, b in zip(other.teacher.state_dict().values(),
                                                 algorithm.teacher.state_dict().values(), strict=True))
