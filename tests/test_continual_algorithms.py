"""Continual-learning algorithms: each one's loss on a hand-made batch, the buffer filled after
each step, hyper-parameters from the signature, and the algorithm's state in checkpoints."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import modforge as mf
from modforge.continual.trainer import ContinualTrainer
from modforge.train.checkpoint import load_checkpoint

NUM_CLASSES = 4


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return mf.build_model(
        {"backbone": {"type": "mlp", "args": {"hidden_dims": [8]}}, "head": "linear", "losses": ["cross_entropy"]},
        in_dim=5,
        num_classes=NUM_CLASSES,
    )


def _setup(name: str, **args):
    model = _model()
    algorithm = mf.ALGORITHMS.build({"type": name, "args": args}, path="algorithm", model=model,
                                    num_classes=NUM_CLASSES)
    trainer = ContinualTrainer(model, torch.optim.SGD(model.parameters(), lr=0.1), algorithm=algorithm,
                               async_checkpoints=False)
    return model, algorithm, trainer


def _batch(n: int = 6, seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"input": torch.randn(n, 5, generator=g), "label": torch.randint(0, NUM_CLASSES, (n,), generator=g)}


def _fill(algorithm, count: int = 4, with_logits: bool = False) -> dict[str, torch.Tensor]:
    """Put ``count`` known samples into an empty buffer of exactly that capacity."""
    stored = _batch(count, seed=7)
    extra = {"logits": torch.randn(count, NUM_CLASSES, generator=torch.Generator().manual_seed(3))} if with_logits else {}
    algorithm.buffer.add(stored["label"], input=stored["input"], **extra)
    return {**stored, **extra}


def test_sgd_is_the_model_loss():
    model, algorithm, trainer = _setup("sgd")
    batch = _batch()
    assert torch.equal(trainer.training_step(batch), model(batch)["loss"])


def test_er_trains_on_the_batch_joined_with_the_replayed_samples():
    model, algorithm, trainer = _setup("er", buffer_size=4, minibatch_size=4)
    batch = _batch()
    assert torch.equal(trainer.training_step(batch), model(batch)["loss"])  # empty buffer: the batch alone
    algorithm.buffer = type(algorithm.buffer)(4, seed=0)
    stored = _fill(algorithm)
    expected = F.cross_entropy(
        model(torch.cat([batch["input"], stored["input"]])), torch.cat([batch["label"], stored["label"]])
    )
    assert torch.allclose(trainer.training_step(batch), expected)  # the replayed order does not matter to a mean


def test_der_adds_alpha_times_the_logit_mse_on_replayed_samples():
    model, algorithm, trainer = _setup("der", alpha=0.7, buffer_size=4, minibatch_size=4)
    stored = _fill(algorithm, with_logits=True)
    batch = _batch()
    expected = model(batch)["loss"] + 0.7 * F.mse_loss(model(stored["input"]), stored["logits"])
    assert torch.allclose(trainer.training_step(batch), expected)


def test_derpp_adds_beta_times_the_replayed_labels_cross_entropy():
    model, algorithm, trainer = _setup("derpp", alpha=0.2, beta=0.9, buffer_size=4, minibatch_size=4)
    stored = _fill(algorithm, with_logits=True)
    batch = _batch()
    replayed = model(stored["input"])
    expected = (
        model(batch)["loss"]
        + 0.2 * F.mse_loss(replayed, stored["logits"])
        + 0.9 * F.cross_entropy(replayed, stored["label"])
    )
    assert torch.allclose(trainer.training_step(batch), expected)


def test_der_remembers_each_batch_with_its_logits_at_that_time():
    model, algorithm, trainer = _setup("der", buffer_size=50)
    batch = _batch()
    with torch.no_grad():
        logits_then = model(batch["input"])
    trainer.training_step(batch)
    kept = algorithm.buffer.all()
    assert torch.equal(kept["input"], batch["input"]) and torch.equal(kept["label"], batch["label"])
    assert torch.allclose(kept["logits"], logits_then) and not kept["logits"].requires_grad


def test_hyper_parameters_come_from_the_signature():
    signature = mf.ALGORITHMS.signature("derpp")
    names = {a.name for a in signature.args if not a.injected}
    assert {"alpha", "beta", "buffer_size", "minibatch_size", "buffer_policy"} <= names and "seed" not in names
    with pytest.raises(mf.ConfigError, match="algorithm.args.alpha: expected a finite number >= 0"):
        mf.ALGORITHMS.build({"type": "der", "args": {"alpha": "lots"}}, path="algorithm", model=_model())
    with pytest.raises(mf.ConfigError, match="algorithm.args.beta: expected a finite number >= 0"):
        mf.ALGORITHMS.build({"type": "derpp", "args": {"beta": -1}}, path="algorithm", model=_model())


def test_the_algorithm_state_is_checkpointed_and_restored(tmp_path):
    model, algorithm, trainer = _setup("derpp", buffer_size=10)
    trainer.run_dir = tmp_path
    for seed in range(3):
        trainer.training_step(_batch(seed=seed))
    algorithm.begin_task(2)
    path = trainer.save_checkpoint()
    trainer.writer.wait()
    payload = load_checkpoint(path)
    _, other, other_trainer = _setup("derpp", buffer_size=10, seed=5)
    other_trainer.load_state(payload)
    assert other.task == 2 and len(other.buffer) == len(algorithm.buffer) == 10
    assert all(torch.equal(other.buffer.all()[k], algorithm.buffer.all()[k]) for k in ("input", "label", "logits"))
    assert torch.equal(other.buffer.sample(3)["input"], algorithm.buffer.sample(3)["input"])  # same generator state


def test_lwf_distils_the_old_classes_from_the_frozen_teacher():
    model, algorithm, trainer = _setup("lwf", alpha=0.5, temperature=2.0)
    batch = _batch()
    algorithm.begin_task(0, trainer, [0, 1])
    assert torch.equal(trainer.training_step(batch), model(batch)["loss"])  # no teacher yet
    algorithm.end_task(0, trainer)
    teacher_logits = model(batch["input"]).detach()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1)  # the student moves on
    algorithm.begin_task(1, trainer, [2, 3])
    student = model(batch["input"])
    t = 2.0
    kd = F.kl_div(F.log_softmax(student[:, :2] / t, 1), F.softmax(teacher_logits[:, :2] / t, 1),
                  reduction="batchmean") * t * t
    expected = F.cross_entropy(student, batch["label"]) + 0.5 * kd
    assert torch.allclose(trainer.training_step(batch), expected)
    assert algorithm.old_classes == [0, 1] and not any(p.requires_grad for p in algorithm.teacher.frozen.parameters())


def test_ewc_online_fisher_and_penalty_by_hand():
    model, algorithm, trainer = _setup("ewc_online", e_lambda=3.0, gamma=0.5)
    data = _batch(3, seed=4)
    loader = [data]  # one batch of three samples
    algorithm.end_task(0, trainer, loader)
    expected = torch.zeros_like(algorithm.fisher)
    for x, y in zip(data["input"], data["label"], strict=True):
        model.zero_grad()
        log_p = F.log_softmax(model(x.unsqueeze(0)), 1)[0, y]
        log_p.backward()
        expected += log_p.detach().exp() * model.get_grads() ** 2
    assert torch.allclose(algorithm.fisher, expected / 3)
    anchor = model.get_params()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05)
    batch = _batch()
    penalty = (algorithm.fisher * (model.get_params() - anchor) ** 2).sum()
    assert torch.allclose(trainer.training_step(batch), model(batch)["loss"] + 3.0 * penalty)
    first = algorithm.fisher.clone()
    algorithm.end_task(1, trainer, loader)  # online: decayed old Fisher plus the new one
    assert torch.allclose(algorithm.fisher, 0.5 * first + algorithm.fisher_information(loader))


def test_ewc_online_warns_when_the_penalty_is_too_stiff_for_sgd(caplog):
    from modforge.continual.algorithms.regularization import sgd_stability_margin

    model, algorithm, trainer = _setup("ewc_online", e_lambda=1.0)  # SGD, lr 0.1
    loader = [_batch(3, seed=4)]
    with caplog.at_level("WARNING", logger="modforge.continual"):
        algorithm.end_task(0, trainer, loader)
    assert not caplog.records
    algorithm.e_lambda = 2.0 / (0.1 * float(algorithm.fisher.max()))  # lr·λ·F_max = 2 (> 1: diverges)
    with caplog.at_level("WARNING", logger="modforge.continual"):
        algorithm.end_task(1, trainer, loader)
    assert "too stiff" in caplog.text and "Lower e_lambda" in caplog.text
    momentum = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    assert sgd_stability_margin(momentum, 10.0) == pytest.approx(1.0 / 1.9)
    assert sgd_stability_margin(torch.optim.Adam(model.parameters()), 10.0) is None


def test_joint_trains_each_task_on_all_data_so_far():
    assert mf.ALGORITHMS.get("joint").cumulative and not mf.ALGORITHMS.get("sgd").cumulative


def test_layer_distillation_uses_every_layer_of_the_model():
    model, algorithm, trainer = _setup("layer_distill", alpha=0.4, buffer_size=4, minibatch_size=4)
    stored = _fill(algorithm)
    algorithm.end_task(0, trainer)
    teacher_layers = [t.detach() for t in model(stored["input"], returnt="full")]
    assert len(teacher_layers) == 3  # the MLP's hidden block, the backbone's output, the head's logits
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.1)
    batch = _batch()
    student_layers = model(stored["input"], returnt="full")
    per_layer = torch.stack([F.mse_loss(s, t) for s, t in zip(student_layers, teacher_layers, strict=True)])
    joined = F.cross_entropy(model(torch.cat([batch["input"], stored["input"]])),
                             torch.cat([batch["label"], stored["label"]]))
    assert torch.allclose(trainer.training_step(batch), joined + 0.4 * per_layer.mean())
    assert (per_layer > 0).all()  # every layer moved, every layer is in the loss
