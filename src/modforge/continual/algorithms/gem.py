"""Gradient projection methods: ``gem`` (Gradient Episodic Memory, Lopez-Paz & Ranzato,
NeurIPS 2017) and ``agem`` (Averaged GEM, Chaudhry et al., "Efficient Lifelong Learning with
A-GEM", ICLR 2019), following Mammoth's ``models/gem.py`` and ``models/agem.py``
(aimagelab/mammoth, commit e75a491c69fd729edeb01431afb753d9157d9a81).

Both change the *gradient* of a step, not its loss: the step computes the gradient ``g`` of
the incoming batch's loss and the gradients of the loss on remembered samples, corrects ``g``
where it would increase the latter, and hands the trainer a loss whose value is the batch's
loss and whose gradient is the corrected ``g`` (``loss + Σ θ·g̃ − stop_grad(Σ θ·g̃)``), so
the trainer's own backward, clipping and optimizer step apply to it unchanged.

* **A-GEM**: one reference gradient ``g_ref`` of a replayed minibatch; when ``g·g_ref < 0``
  the step uses ``g − (g·g_ref / g_ref·g_ref) g_ref``, else ``g``. Its memory, as Mammoth's,
  receives a training batch's worth of each finished task (drawn uniformly from the task;
  ``samples_per_task`` sets another number).
* **GEM**: one gradient per task in the memory (on all of that task's remembered samples);
  when ``g`` conflicts with any, it is replaced by the solution of GEM's dual quadratic
  program (solved with ``quadprog``, an optional dependency: ``pip install quadprog``), with
  the dual variables bounded below by the margin ``gamma``, as in the authors' code. Its
  memory is rebuilt at each task end with an equal share per class (see :class:`GEM`).

Parameters that get no gradient from any of the losses keep no gradient (the optimizer skips
them, as in Mammoth).
"""

from __future__ import annotations

from typing import Any

import torch

from ...core.constraints import NonNegativeFloat, PositiveInt
from ...core.errors import UsageError
from ...core.registries import register_algorithm
from ..buffer import Policy, stream_subset
from .base import ReplayAlgorithm
from .checks import at_least_one, check, non_negative
from .passes import prepared, stepped_batch_size

__all__ = ["AGEM", "GEM", "project_to_cone"]

_EPS = 1e-3  # GEM's ridge on the memories' Gram matrix, as in the authors' code


class _Gradients:
    """Flat gradients of losses with respect to the trainable parameters of a model."""

    def __init__(self, model: torch.nn.Module):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.used = [False] * len(self.params)  # parameters some loss reached

    def of(self, loss: torch.Tensor) -> torch.Tensor:
        """``∇loss`` as one vector (zeros for parameters the loss does not reach)."""
        grads = torch.autograd.grad(loss, self.params, allow_unused=True)
        self.used = [u or g is not None for u, g in zip(self.used, grads, strict=True)]
        return torch.cat([
            (g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, self.params, strict=True)
        ])  # fmt: skip

    def carrying(self, loss: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """A loss with ``loss``'s value whose gradient is ``grad`` (on the parameters some loss
        reached)."""
        pieces = grad.detach().split([p.numel() for p in self.params])
        linear = [(p * g.view_as(p)).sum() for p, g, u in zip(self.params, pieces, self.used, strict=True) if u]
        if not linear:
            return loss
        surrogate = torch.stack(linear).sum()
        return loss.detach() + (surrogate - surrogate.detach())


def project_to_cone(gradient: torch.Tensor, memories: torch.Tensor, margin: float, solver: Any) -> torch.Tensor:
    """GEM's projection: solve the dual ``min_v ½ vᵀ(GGᵀ + εI)v + (Gg)ᵀv`` subject to
    ``v ≥ margin`` (``G``: the memories' gradients [tasks, P]; ``g``: ``gradient``) with
    ``solver`` (quadprog), and return ``Gᵀv + g`` — in float64, cast back."""
    import numpy as np

    g = gradient.detach().double().cpu().numpy()
    m = memories.detach().double().cpu().numpy()
    gram = m @ m.T
    gram = 0.5 * (gram + gram.T) + np.eye(len(m)) * _EPS
    v = solver.solve_qp(gram, -(m @ g), np.eye(len(m)), np.full(len(m), float(margin)))[0]
    return torch.from_numpy(v @ m + g).to(gradient)


@register_algorithm("agem")
class AGEM(ReplayAlgorithm):
    """A-GEM: the step's gradient projected so it does not increase a replayed minibatch's loss.

    At each task end the memory receives ``samples_per_task`` samples drawn uniformly from the
    task's data; the buffer keeps them by ``buffer_policy``. By default that is one training
    batch's worth (as many as the largest training batch), as in Mammoth's current file, which
    adds the first batch of the shuffled training loader; its earlier versions (those of the
    DER paper's A-GEM results) added ``buffer_size // number of tasks`` — set
    ``samples_per_task`` to that to match them.

    Args:
        model: the model (wired by the runner).
        num_classes: number of classes (wired by the runner).
        buffer_size: how many past samples are kept.
        minibatch_size: how many are replayed for the reference gradient (None: the batch size).
        samples_per_task: how many samples of each finished task join the memory (None: the
            training batch size).
        buffer_policy: 'reservoir', 'class_balanced' or 'greedy_balanced'.
        seed: seeds the memory's draws (wired from the config's seed).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        num_classes: int | None = None,
        buffer_size: PositiveInt = 200,
        minibatch_size: PositiveInt | None = None,
        samples_per_task: PositiveInt | None = None,
        buffer_policy: Policy = "reservoir",
        seed: int = 0,
    ):
        super().__init__(model, num_classes, buffer_size, minibatch_size, buffer_policy, seed)
        check(at_least_one("samples_per_task", samples_per_task))
        self.samples_per_task = samples_per_task
        self.train_batch = 0  # the largest training batch stepped on

    def training_step(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor:
        self.train_batch = max(self.train_batch, len(batch["label"]) * self.processes.world_size)
        loss = trainer.forward(batch)["loss"]
        past = self.replay(batch)
        if past is None:
            return loss
        grads = _Gradients(self.model)
        g = self.processes.mean(grads.of(loss))  # the whole batch's gradients (several processes)
        g_ref = self.processes.mean(grads.of(trainer.forward({"input": past["input"], "label": past["label"]})["loss"]))
        dot = torch.dot(g, g_ref)
        if float(dot) < 0:
            g = g - (dot / torch.dot(g_ref, g_ref)) * g_ref
        return grads.carrying(loss, g)

    def end_task(self, task: int, trainer: Any = None, loader: Any = None) -> None:
        if loader is None:
            raise ValueError("agem.end_task needs the task's training loader (to fill its memory)")
        count = self.samples_per_task or stepped_batch_size(self, loader)
        drawn = stream_subset(prepared(trainer, loader), count, self.buffer.generator)
        if len(drawn["label"]):
            self.buffer.add(drawn["label"], input=drawn["input"])

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "train_batch": self.train_batch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.train_batch = int(state.get("train_batch", 0))


def _quadprog() -> Any:
    try:
        import quadprog
    except ImportError:
        raise UsageError(
            "the 'gem' algorithm solves its quadratic program with the quadprog package, which is not installed: "
            'pip install quadprog (or pip install "modforge[continual]")'
        ) from None
    return quadprog


@register_algorithm("gem")
class GEM(ReplayAlgorithm):
    """GEM: the step's gradient projected so it does not increase the loss of any earlier task.

    Memory (Mammoth's ``fill_buffer``): at each task end the buffer is rebuilt with an equal
    share ``buffer_size // groups`` per group — a group is a class of a task, so in class-IL
    one per class seen — keeping the first samples of each earlier group and drawing the new
    task's samples of each class uniformly; each sample stores its task id. (Mammoth's
    version keeps only the task data labelled above the earlier tasks' classes, which leaves
    domain-IL tasks after the first without memory; here each domain-IL task keeps its own.)

    Each step computes one gradient per task in the memory, on all of that task's samples,
    then the incoming batch's; needs ``quadprog`` (``pip install quadprog``).

    Args:
        model: the model (wired by the runner).
        num_classes: number of classes (wired by the runner).
        gamma: GEM's margin: the lower bound of the dual variables (Mammoth's ``--gamma``).
        buffer_size: how many past samples are kept over all tasks.
        seed: seeds the memory's draws (wired from the config's seed).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        num_classes: int | None = None,
        gamma: NonNegativeFloat = 0.5,
        buffer_size: PositiveInt = 200,
        seed: int = 0,
    ):
        super().__init__(model, num_classes, buffer_size, None, "reservoir", seed)
        check(non_negative("gamma", gamma))
        self.gamma = gamma
        self.solver = _quadprog()
        self.task_classes: dict[int, list[int]] = {}  # each begun task's classes

    def begin_task(self, task: int, trainer: Any = None, classes: Any = ()) -> None:
        super().begin_task(task, trainer, classes)
        self.task_classes[task] = sorted(int(c) for c in classes)

    def _groups(self) -> list[tuple[int, int]]:
        """The (task, class) pairs in the memory, sorted."""
        if self.buffer.is_empty:
            return []
        held = self.buffer.all(("task", "label"))
        return sorted({(int(t), int(c)) for t, c in zip(held["task"].tolist(), held["label"].tolist(), strict=True)})

    def end_task(self, task: int, trainer: Any = None, loader: Any = None) -> None:
        if loader is None:
            raise ValueError("gem.end_task needs the task's training loader (to fill its memory)")
        classes = self.task_classes.get(task) or sorted(
            {int(c) for batch in loader for c in batch["label"].reshape(-1).tolist()}
        )
        old = [group for group in self._groups() if group[0] != task]
        share = self.buffer.capacity // (len(old) + len(classes))
        if share < 1:
            raise ValueError(f"gem: buffer_size {self.buffer.capacity} leaves no sample for some of the "
                             f"{len(old) + len(classes)} (task, class) groups; raise buffer_size")  # fmt: skip
        kept = []
        if old:
            held = self.buffer.all()
            for t, c in old:
                rows = ((held["task"] == t) & (held["label"] == c)).nonzero().reshape(-1)[:share]
                kept.append({k: v[rows] for k, v in held.items()})
        drawn = stream_subset(prepared(trainer, loader), {c: share for c in classes}, self.buffer.generator)
        self.buffer.clear()
        for part in kept:
            self.buffer.add(part["label"], input=part["input"], task=part["task"])
        if len(drawn["label"]):
            self.buffer.add(drawn["label"], input=drawn["input"], task=task)

    def training_step(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor:
        if self.buffer.is_empty:
            return trainer.forward(batch)["loss"]
        grads = _Gradients(self.model)
        memory = self.buffer.all()
        device = batch["label"].device
        memories = []
        for t in memory["task"].unique().tolist():
            rows = memory["task"] == t
            past = {"input": memory["input"][rows].to(device), "label": memory["label"][rows].to(device)}
            memories.append(grads.of(trainer.forward(past)["loss"]))
        loss = trainer.forward(batch)["loss"]
        g = self.processes.mean(grads.of(loss))  # the whole batch's (the memories are whole on every process)
        stacked = torch.stack(memories)
        if bool((stacked @ g < 0).any()):
            g = project_to_cone(g, stacked, self.gamma, self.solver)
        return grads.carrying(loss, g)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "task_classes": {int(t): list(c) for t, c in self.task_classes.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.task_classes = {int(t): [int(c) for c in cs] for t, cs in state.get("task_classes", {}).items()}
