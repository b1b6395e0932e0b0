"""SI, BiC and LUCIR against plain-torch renderings of Mammoth's updates (aimagelab/mammoth
``models/si.py``, ``models/bic.py``, ``models/lucir.py`` at e75a491c69fd729edeb01431afb753d9157d9a81):
one training step each, the work at task boundaries (SI's Ω, BiC's bias layer, LUCIR's imprinting
and class-balanced finetuning), their state through a checkpoint, and a short run of each."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import torch.nn.functional as F

import modforge as mf
from modforge.continual.trainer import ContinualTrainer
from modforge.data.base import ArrayDataset, collate
from modforge.train.checkpoint import load_checkpoint
from run_configs import SGD, flat_seq_digits, mlp, run_config

NUM_CLASSES = 4


def _setup(name: str, head: object = "linear", momentum: float = 0.0, **args):
    torch.manual_seed(0)
    model = mf.build_model(
        {"backbone": {"type": "mlp", "args": {"hidden_dims": [8]}}, "head": head, "losses": ["cross_entropy"]},
        in_dim=5,
        num_classes=NUM_CLASSES,
    )
    algorithm = mf.ALGORITHMS.build({"type": name, "args": args}, path="algorithm", model=model,
                                    num_classes=NUM_CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=momentum)
    trainer = ContinualTrainer(model, optimizer, algorithm=algorithm, async_checkpoints=False)
    return model, algorithm, trainer


def _task_data(classes: list[int], per_class: int = 6, seed: int = 0, first_index: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.tensor(classes).repeat_interleave(per_class)
    return {
        "input": torch.randn(len(labels), 5, generator=g) + labels.unsqueeze(1).float(),
        "label": labels,
        "index": torch.arange(first_index, first_index + len(labels)),
    }


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def _step(trainer: ContinualTrainer, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """One training step as the trainer's loop makes it: loss, backward, optimizer step."""
    loss = trainer.training_step(batch)
    trainer.backward(loss)
    trainer.optimizer_step()
    return loss.detach()


def _roundtrip(trainer: ContinualTrainer, tmp_path, make):
    """Save ``trainer``'s checkpoint and load it into a fresh setup from ``make()``."""
    trainer.run_dir = tmp_path
    path = trainer.save_checkpoint()
    trainer.writer.wait()
    payload = load_checkpoint(path)
    torch.load(path, weights_only=True)  # plain tensors and values only
    model, algorithm, other = make()
    other.load_state(payload)
    return model, algorithm


# -------------------------------------------------------------------------------------------- SI
def test_si_step_adds_the_penalty_gradient_clips_and_integrates_the_path():
    c, lr = 3.0, 0.1
    model, algorithm, trainer = _setup("si", c=c, xi=0.1)
    algorithm.begin_task(1, trainer, [2, 3])
    theta = _flat(model)
    g = torch.Generator().manual_seed(5)
    algorithm.big_omega = torch.rand(len(theta), generator=g) * 4  # as if a task had ended
    algorithm.anchor = theta + 0.3 * torch.randn(len(theta), generator=g)
    reference = copy.deepcopy(model)
    batch = _task_data([2, 3], per_class=3)

    loss = _step(trainer, batch)

    # Mammoth's observe: task-loss gradient, plus c·2Ω(θ − θ*), clipped to [-1, 1], an SGD step;
    # small_omega += task gradient · (θ before − θ after)
    ref_loss = F.cross_entropy(reference(batch["input"]), batch["label"])
    grads = torch.cat([gr.reshape(-1) for gr in torch.autograd.grad(ref_loss, list(reference.parameters()))])
    total = grads + c * 2 * algorithm.big_omega * (theta - algorithm.anchor)
    assert (total.abs() > 1).any()  # the clipping matters here
    after = theta - lr * total.clamp(-1, 1)
    assert torch.allclose(loss, ref_loss)  # the reported loss is the task loss
    assert torch.allclose(_flat(model), after, atol=1e-6)
    assert torch.allclose(algorithm.small_omega, grads * (theta - after), atol=1e-7)


def test_si_end_of_task_accumulates_omega_and_moves_the_anchor():
    model, algorithm, trainer = _setup("si", c=0.5, xi=0.2, clip_value=None)
    algorithm.begin_task(0, trainer, [0, 1])
    start = _flat(model)
    assert torch.equal(algorithm.anchor, start)
    for seed in range(3):
        _step(trainer, _task_data([0, 1], per_class=2, seed=seed))
    small, now = algorithm.small_omega.clone(), _flat(model)
    assert small.abs().sum() > 0
    algorithm.end_task(0, trainer)
    first = small / ((now - start) ** 2 + 0.2)
    assert torch.allclose(algorithm.big_omega, first)
    assert torch.equal(algorithm.anchor, now) and not algorithm.small_omega.any()
    # the second task: Ω grows by the new path integral over the new distance
    algorithm.begin_task(1, trainer, [2, 3])
    _step(trainer, _task_data([2, 3], per_class=2))
    small, later = algorithm.small_omega.clone(), _flat(model)
    algorithm.end_task(1, trainer)
    assert torch.allclose(algorithm.big_omega, first + small / ((later - now) ** 2 + 0.2))
    assert torch.allclose(algorithm.penalty(), torch.zeros(()))  # at the anchor


def test_si_state_survives_a_checkpoint_and_bad_values_fail(tmp_path):
    model, algorithm, trainer = _setup("si", c=0.5, xi=0.2)
    algorithm.begin_task(0, trainer, [0, 1])
    _step(trainer, _task_data([0, 1], per_class=2))
    algorithm.end_task(0, trainer)
    algorithm.begin_task(1, trainer, [2, 3])
    _step(trainer, _task_data([2, 3], per_class=2))
    _, other = _roundtrip(trainer, tmp_path, lambda: _setup("si", c=0.5, xi=0.2))
    assert other.task == 1 and other.seen_classes == [0, 1, 2, 3]
    for key in ("anchor", "big_omega", "small_omega"):
        assert torch.equal(getattr(other, key), getattr(algorithm, key))
    with pytest.raises(ValueError, match="xi must be positive"):
        type(algorithm)(model, xi=0.0)
    with pytest.raises(mf.ConfigError, match="algorithm.args.c"):
        mf.ALGORITHMS.build({"type": "si", "args": {"c": -1}}, path="algorithm", model=model)


# ------------------------------------------------------------------------------------------- BiC
def _bic_after_first_task(**args):
    model, algorithm, trainer = _setup("bic", buffer_size=8, valset_split=0.25, minibatch_size=100, **args)
    first = _task_data([0, 1])
    algorithm.begin_task(0, trainer, [0, 1])
    expected = F.cross_entropy(model(first["input"])[:, :2], first["label"])  # first task: CE over the seen classes
    assert torch.allclose(trainer.training_step(first), expected)
    algorithm.end_task(0, trainer, [first])
    return model, algorithm, trainer


def test_bic_step_holds_out_samples_and_distils_the_corrected_teacher():
    model, algorithm, trainer = _bic_after_first_task(temp=2.0)
    assert algorithm.bias is None and not algorithm.bias_active  # no correction after the first task
    assert {c: len(x) for c, x in algorithm.memory.exemplars.items()} == {0: 4, 1: 4}
    teacher = copy.deepcopy(model)
    algorithm.begin_task(1, trainer, [2, 3])
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05)  # the model moves on; the teacher does not
    # as if the previous task had fitted a correction for classes 0, 1 (distill_after_bic)
    algorithm.bias, algorithm.bias_classes = torch.tensor([0.3, 1.5]), [0, 1]
    assert algorithm.held_per_class == 1 and all(len(v) == 1 for v in algorithm.held_old.values())
    batch = _task_data([2, 3], per_class=3, seed=1, first_index=100)

    loss = trainer.training_step(batch)

    # held out: one exemplar per old class, and the first sample of each new class the batches bring
    assert algorithm.held_index.tolist() == [100, 103]
    kept = torch.tensor([1, 2, 4, 5])
    replayed = [(algorithm.memory.exemplars[c], c, algorithm.held_old[c]) for c in (0, 1)]
    x = torch.cat([batch["input"][kept]] + [e[[i for i in range(len(e)) if i not in h]] for e, _, h in replayed])
    y = torch.cat([batch["label"][kept]] + [torch.full((3,), c) for _, c, _ in replayed])
    # Mammoth's observe, lamda = 1/(t+1) = 1/2, temp 2
    outputs = model(x)
    with torch.no_grad():
        old_outputs = teacher(x)
        old_outputs[:, 0:2] *= 1.5
        old_outputs[:, 0:2] += 0.3
    pi_hat = F.log_softmax(outputs[:, :2] / 2.0, dim=1)
    pi = F.softmax(old_outputs[:, :2] / 2.0, dim=1)
    dist_loss = -(pi_hat * pi).sum(1).mean()
    class_loss = F.cross_entropy(outputs[:, :4], y)
    expected = 0.5 * class_loss + 0.5 * dist_loss * 2.0 * 2.0
    assert torch.allclose(loss, expected)
    assert torch.allclose(trainer.training_step(batch), expected)  # the next epoch: the same rows stay out


def test_bic_fits_the_bias_layer_on_the_held_out_set_and_corrects_evaluation():
    model, algorithm, trainer = _bic_after_first_task(bic_epochs=30)
    algorithm.begin_task(1, trainer, [2, 3])
    second = _task_data([2, 3], per_class=3, seed=1, first_index=100)
    _step(trainer, second)
    held_x = torch.cat([algorithm.memory.exemplars[c][algorithm.held_old[c]] for c in (0, 1)]
                       + [second["input"][[0, 3]]])  # fmt: skip
    held_y = torch.tensor([0, 1, 2, 3])
    with torch.no_grad():
        out = model(held_x)  # eval mode (no dropout or norm here): the model is fixed while the layer learns

    algorithm.end_task(1, trainer, [second])

    # Mammoth's end_task: corr_factors = (0, 1), Adam lr 1e-3, bic_epochs passes (one minibatch each here)
    corr = torch.tensor([0.0, 1.0], requires_grad=True)
    opt = torch.optim.Adam([corr], lr=0.001)
    for _ in range(30):
        opt.zero_grad()
        tout = out + 0
        tout[:, 2:4] *= corr[1].repeat_interleave(2)
        tout[:, 2:4] += corr[0].repeat_interleave(2)
        F.cross_entropy(tout[:, :4], held_y).backward()
        opt.step()
    assert torch.allclose(algorithm.bias, corr.detach(), atol=1e-6)
    assert algorithm.bias_classes == [2, 3] and algorithm.bias_active
    assert {c: len(x) for c, x in algorithm.memory.exemplars.items()} == {0: 2, 1: 2, 2: 2, 3: 2}
    query = _task_data([0, 1, 2, 3], per_class=2, seed=4)
    with torch.no_grad():
        expected = model(query["input"])
        expected[:, 2:4] = expected[:, 2:4] * corr[1] + corr[0]
    scores = algorithm.class_scores(trainer, [query])["scores"]
    assert torch.allclose(scores, expected, atol=1e-6)
    algorithm.begin_task(2, trainer, [])  # a task training: Mammoth's forward drops the correction
    assert torch.allclose(algorithm.class_scores(trainer, [query])["scores"], model(query["input"]).detach())


def test_bic_state_survives_a_checkpoint_and_bad_values_fail(tmp_path):
    model, algorithm, trainer = _bic_after_first_task(bic_epochs=3)
    algorithm.begin_task(1, trainer, [2, 3])
    _step(trainer, _task_data([2, 3], per_class=3, seed=1, first_index=100))
    algorithm.bias, algorithm.bias_classes = torch.tensor([0.1, 0.9]), [0, 1]
    make = lambda: _setup("bic", buffer_size=8, valset_split=0.25, minibatch_size=100, bic_epochs=3)  # noqa: E731
    _, other = _roundtrip(trainer, tmp_path, make)
    assert other.task == 1 and other.old_classes == [0, 1] and other.new_classes == [2, 3]
    assert torch.equal(other.held_index, algorithm.held_index) and other.held_count == algorithm.held_count
    assert all(torch.equal(other.held_old[c], algorithm.held_old[c]) for c in (0, 1))
    assert torch.equal(other.bias, algorithm.bias) and other.bias_classes == [0, 1]
    assert torch.equal(other.generator.get_state(), algorithm.generator.get_state())
    assert torch.equal(other.memory.sample(5)["input"], algorithm.memory.sample(5)["input"])
    assert all(torch.equal(a, b) for a, b in zip(other.teacher.state_dict().values(),
                                                 algorithm.teacher.state_dict().values(), strict=True))
    with pytest.raises(ValueError, match="valset_split must be between 0 and 1"):
        type(algorithm)(model, valset_split=1.0)
    with pytest.raises(ValueError, match="class-incremental tasks; task 2 repeats classes \\[3\\]"):
        algorithm.begin_task(2, trainer, [3])


# ----------------------------------------------------------------------------------------- LUCIR
COSINE = {"type": "cosine", "args": {"scale": 1.0}}


def _mammoth_margin_ranking(cos: torch.Tensor, labels: torch.Tensor, k: int, margin: float, old: int) -> torch.Tensor:
    """Mammoth's lucir_batch_hard_triplet_loss, restated."""
    gt_index = torch.zeros(cos.size()).scatter(1, labels.reshape(-1, 1), 1).ge(0.5)
    gt_scores = cos.masked_select(gt_index)
    max_novel = cos[:, old:].topk(k, dim=1)[0]
    hard = labels.lt(old)
    gt_scores = gt_scores[hard].view(-1, 1).repeat(1, k)
    target = torch.ones(int(hard.sum()) * k, 1)
    return torch.nn.MarginRankingLoss(margin=margin)(gt_scores.view(-1, 1), max_novel[hard].view(-1, 1), target)


def _lucir_after_first_task(**args):
    model, algorithm, trainer = _setup("lucir", head=COSINE, momentum=0.9, buffer_size=8, minibatch_size=100,
                                       fitting_epochs=0, **args)  # fmt: skip
    head = model.stage("head")
    first = _task_data([0, 1])
    algorithm.begin_task(0, trainer, [0, 1])
    before = head.weight.detach().clone()
    _step(trainer, first)
    assert torch.equal(head.weight[2:], before[2:]) and not torch.equal(head.weight[:2], before[:2])
    algorithm.end_task(0, trainer, [first])
    return model, algorithm, trainer, head


def test_lucir_first_task_is_the_cross_entropy_of_the_cosine_logits():
    model, algorithm, trainer = _setup("lucir", head=COSINE, buffer_size=8)
    algorithm.begin_task(0, trainer, [0, 1])
    batch = _task_data([0, 1], per_class=3)
    head = model.stage("head")
    features = model(batch["input"], returnt="features")
    cos = F.linear(F.normalize(features, dim=1), F.normalize(head.weight, dim=1))
    expected = F.cross_entropy(cos * head.log_scale.exp(), batch["label"])  # every class (Mammoth's)
    assert torch.allclose(trainer.training_step(batch), expected)


def test_lucir_imprints_new_rows_and_adds_less_forget_and_margin_ranking():
    model, algorithm, trainer, head = _lucir_after_first_task(lamda_base=5.0, lamda_mr=1.0, k_mr=2, mr_margin=0.5)
    teacher = copy.deepcopy(model)
    with torch.no_grad():
        for p in model.stage("backbone").parameters():
            p.add_(0.05)  # the backbone moves on; the teacher does not
    algorithm.begin_task(1, trainer, [2, 3])
    second = _task_data([2, 3], per_class=4, seed=1)
    trainer.train_loader = torch.utils.data.DataLoader(ArrayDataset(second["input"], second["label"]), batch_size=3,
                                                       collate_fn=collate)  # fmt: skip
    old_rows = head.weight.detach()[:2].clone()
    # Mammoth's imprint_weights: normalised mean of normalised features times the old rows' mean norm
    with torch.no_grad():
        features = F.normalize(model(second["input"], returnt="features"), dim=1)
        norm = old_rows.norm(dim=1, keepdim=True).mean(0)
        imprinted = torch.stack([F.normalize(features[second["label"] == c].mean(0), dim=0) * norm for c in (2, 3)])
    batch = {k: v[:5] for k, v in second.items()}

    loss = trainer.training_step(batch)

    assert torch.allclose(head.weight[2:], imprinted, atol=1e-6) and torch.equal(head.weight[:2], old_rows)
    assert not trainer.optimizer.state[head.weight]["momentum_buffer"][2:].any()  # a fresh start for the new rows
    exemplars = algorithm.memory.all()
    x, y = torch.cat([batch["input"], exemplars["input"]]), torch.cat([batch["label"], exemplars["label"]])
    # Mammoth's get_loss at task 1: CE + less-forget (λ = 5·√(2 old / 2 new)) + margin ranking
    outputs = model(x, returnt="features")
    cos_output = F.linear(F.normalize(outputs, dim=1), F.normalize(head.weight, dim=1))
    loss1 = F.cross_entropy(cos_output * head.log_scale.exp(), y)
    old_features = teacher(x, returnt="features").detach()
    loss2 = F.cosine_embedding_loss(outputs, old_features, torch.ones(len(x))) * 5.0
    loss3 = _mammoth_margin_ranking(cos_output, y, 2, 0.5, 2) * 1.0
    assert loss2 > 0 and loss3 > 0
    assert torch.allclose(loss, loss1 + loss2 + loss3, atol=1e-6)
    trainer.backward(loss)
    trainer.optimizer_step()
    assert torch.equal(head.weight[:2], old_rows) and not torch.allclose(head.weight[2:], imprinted)  # old rows held


def test_lucir_finetunes_the_new_rows_and_the_scale_on_the_balanced_memory():
    model, algorithm, trainer, head = _lucir_after_first_task(lamda_mr=1.0, k_mr=1, mr_margin=0.5,
                                                              imprint_weights=False, lr_finetune=0.05)  # fmt: skip
    algorithm.begin_task(1, trainer, [2, 3])
    second = _task_data([2, 3], per_class=4, seed=1)
    _step(trainer, second)
    weight, log_scale = head.weight.detach().clone(), head.log_scale.detach().clone()
    algorithm.fitting_epochs = 3
    trainer.train_loader = None  # minibatches of 32: the whole memory in one

    algorithm.end_task(1, trainer, [second])

    exemplars = algorithm.memory.all()
    assert exemplars["label"].bincount().tolist() == [2, 2, 2, 2]
    # Mammoth's fit_buffer: SGD(lr_finetune, the run's momentum) on the classifier, the backbone fixed,
    # only the current task's rows (and σ, here the cosine head's log-scale) learning
    with torch.no_grad():
        features = model(exemplars["input"], returnt="features")
    w, s = weight.clone().requires_grad_(), log_scale.clone().requires_grad_()
    opt = torch.optim.SGD([w, s], lr=0.05, momentum=0.9)
    for _ in range(3):
        cos = F.linear(F.normalize(features, dim=1), F.normalize(w, dim=1))
        loss = F.cross_entropy(cos * s.exp(), exemplars["label"])
        loss = loss + _mammoth_margin_ranking(cos, exemplars["label"], 1, 0.5, 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            w[:2] = weight[:2]
    assert torch.allclose(head.weight, w.detach(), atol=1e-6) and torch.allclose(head.log_scale, s.detach(), atol=1e-6)
    assert not torch.equal(head.weight[2:], weight[2:]) and torch.equal(head.weight[:2], weight[:2])
    assert all(p.grad is None for p in head.parameters())  # nothing left for the run's next step


def test_lucir_state_survives_a_checkpoint_and_bad_values_fail(tmp_path):
    model, algorithm, trainer, head = _lucir_after_first_task(imprint_weights=False)
    algorithm.begin_task(1, trainer, [2, 3])
    _step(trainer, _task_data([2, 3], per_class=2, seed=1))
    make = lambda: _setup("lucir", head=COSINE, momentum=0.9, buffer_size=8, minibatch_size=100,  # noqa: E731
                          fitting_epochs=0, imprint_weights=False)  # fmt: skip
    _, other = _roundtrip(trainer, tmp_path, make)
    assert other.task == 1 and other.prepared_task == 1 and other.old_classes == [0, 1]
    assert torch.equal(other.frozen, algorithm.frozen)
    assert torch.equal(other.memory.sample(5)["input"], algorithm.memory.sample(5)["input"])
    assert all(torch.equal(a, b) for a, b in zip(other.teacher.state_dict().values(),
                                                 algorithm.teacher.state_dict().values(), strict=True))
    with pytest.raises(mf.BuildError, match="lucir needs a model whose classifier is the registered 'cosine' head"):
        _setup("lucir")
    with pytest.raises(ValueError, match="k_mr must be at least 1"):
        type(algorithm)(model, k_mr=0)
    _, fresh, fresh_trainer = _setup("lucir", head=COSINE, k_mr=3)
    fresh.begin_task(0, fresh_trainer, [0, 1])
    with pytest.raises(ValueError, match="k_mr \\(3\\) exceeds the 2 classes that are not old at task 1"):
        fresh.begin_task(1, fresh_trainer, [2, 3])


# ------------------------------------------------------------------------------------- short runs
RUN = run_config(flat_seq_digits(batch_size=32), mlp(64), head="{type: cosine, args: {scale: 1.0}}",
                 train=dict(optimizer=SGD, num_threads=1, progress="never"),
                 after="continual: {algorithm: sgd, epochs_per_task: 2}\n")


@pytest.mark.filterwarnings("ignore:torchscript. stage 'backbone':UserWarning")
@pytest.mark.parametrize(
    ("algorithm", "state_key"),
    [("{type: si, args: {c: 0.5, xi: 1.0}}", "big_omega"),
     ("{type: bic, args: {buffer_size: 100, bic_epochs: 10}}", "bias"),
     ("{type: lucir, args: {buffer_size: 100, fitting_epochs: 2}}", "frozen")],
    ids=["si", "bic", "lucir"],
)  # fmt: skip
def test_a_short_continual_run(cli, write, tmp_path, algorithm, state_key):
    res = cli("train", str(write("seq.yaml", RUN)), f"continual.algorithm={algorithm}", "--run-dir", "run")
    assert res.code == 0, res.err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [len(row) for row in summary["class_il"]["matrix"]] == [1, 2, 3, 4, 5]
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=True)["algorithm"]
    assert state["task"] == 4 and state[state_key] is not None and state[state_key].abs().sum() > 0
    if "si" not in algorithm:  # rehearsal keeps the old classes; plain training is near 0.2 here
        assert summary["class_il"]["average_accuracy"] > 0.4
