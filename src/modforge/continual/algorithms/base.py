"""The algorithm contract: a continual-learning method changes the *training step* (and
what happens at task boundaries), never the loop.

A registered algorithm is built with the model (injected) and its hyper-parameters (its
signature, so they are config keys and command-line flags: ``--alpha 0.3 --buffer-size
200``). The trainer calls :meth:`Algorithm.training_step` for every batch; the continual
runner calls :meth:`begin_task` / :meth:`end_task` around each task. Everything an
algorithm remembers between steps (a buffer, old logits, Fisher information...) is in
:meth:`state_dict`, so it is checkpointed and resumed with the run.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from ...core.constraints import PositiveInt
from ..buffer import Buffer, Policy
from ..processes import Processes
from .checks import at_least_one, check

__all__ = ["Algorithm", "ReplayAlgorithm", "Teacher", "joined"]


def joined(batch: dict[str, Any], past: dict[str, torch.Tensor] | None) -> dict[str, Any]:
    """The current batch with a replayed minibatch appended (inputs and labels); the batch
    itself when nothing is replayed."""
    if past is None:
        return batch
    return {"input": torch.cat([batch["input"], past["input"]]), "label": torch.cat([batch["label"], past["label"]])}


class Teacher:
    """A frozen copy of a model (eval mode, no gradients) that distillation methods keep
    from the end of the last task, with its weights in checkpoints."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.frozen: torch.nn.Module | None = None

    def freeze(self) -> None:
        """Take the model as it is now."""
        self.frozen = copy.deepcopy(self.model).eval()
        for p in self.frozen.parameters():
            p.requires_grad_(False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self.frozen(*args, **kwargs)

    def __bool__(self) -> bool:
        return self.frozen is not None

    def state_dict(self) -> dict[str, torch.Tensor] | None:
        return None if self.frozen is None else self.frozen.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor] | None) -> None:
        self.frozen = None
        if state is not None:
            self.freeze()
            self.frozen.load_state_dict(state)


class Algorithm:
    """Base: plain training on the current task (what ``sgd`` is).

    Attributes:
        model: the model being trained (its ``runnable`` comes from the trainer).
        task: the index of the task being trained (-1 before the first).
        uses_buffer: whether the algorithm keeps a replay buffer.
        processes: the processes training together (set by the trainer; see
            :mod:`~modforge.continual.processes`): what the method remembers of a batch goes
            through ``processes.gather_rows``, what it draws to replay through ``processes.share``.
        distributed: why the method cannot train over several processes (its loss is not a mean
            over samples, so shards would not average to the whole batch's), or "" when it can.
        weight_average: why the method cannot be evaluated with ``train.ema``'s average (it changes
            the weights outside optimizer steps, or classifies with state built from the trained
            weights), or "" when it can.
    """

    uses_buffer = False
    cumulative = False  # True: task t trains on the data of tasks 0..t (JOINT)
    settings: tuple[str, ...] = ("class-il", "domain-il")  # the task sequences the method works on
    distributed = ""  # "": trains over several processes as over one; else the reason it cannot
    weight_average = ""  # "": evaluated with train.ema's average like any model; else the reason it cannot

    def __init__(self, model: torch.nn.Module, num_classes: int | None = None):
        self.model, self.num_classes = model, num_classes
        self.task = -1
        self.seen_classes: list[int] = []  # classes of the tasks begun so far, in order
        self.processes = Processes()

    # --------------------------------------------------------- task boundaries
    def begin_task(self, task: int, trainer: Any = None, classes: Sequence[int] = ()) -> None:
        """Called before the first step of task ``task`` (whose labels are ``classes``)."""
        self.task = task
        self.seen_classes += [int(c) for c in classes if int(c) not in self.seen_classes]

    def end_task(self, task: int, trainer: Any = None, loader: Any = None) -> None:
        """Called after the last step of task ``task`` (``loader``: that task's training data,
        in order, unshuffled)."""

    # ------------------------------------------------------------------- step
    def training_step(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor:
        """The loss of one batch; the trainer back-propagates it."""
        return trainer.forward(batch)["loss"]

    def before_step(self, trainer: Any) -> None:
        """Called once per optimizer step when its gradients are complete (after the backward
        of its last micro-batch), before clipping and ``optimizer.step()``: a method may read
        or change ``p.grad`` here. With fp16 precision they are still multiplied by
        ``trainer.scaler.get_scale()``."""

    def after_step(self, trainer: Any) -> None:
        """Called right after each optimizer step (parameters updated, gradients cleared)."""

    def draw(self, memory: Any, per_process: int, device: torch.device) -> dict[str, torch.Tensor] | None:
        """``per_process`` samples of ``memory`` (anything with ``len`` and ``sample(n)``: a
        buffer, exemplars) on ``device``, or all when it holds fewer; None when it is empty.
        With several processes, this process's share of one draw of ``N × per_process`` made
        alike on every process."""
        size = self.processes.draw_size(per_process, len(memory))
        if size == 0:
            return None
        return {k: v.to(device) for k, v in self.processes.share(memory.sample(size)).items()}

    # ------------------------------------------------------------- evaluation
    def class_scores(self, trainer: Any, loader: Any) -> dict[str, torch.Tensor]:
        """Per-class scores (``scores`` [N, classes]) and ``label`` on ``loader``: what the
        continual evaluation ranks. The model's logits, unless the method classifies another
        way (iCaRL: nearest mean of exemplars)."""
        out = trainer.collect(loader, ("logits", "label"))
        return {"scores": out["logits"], "label": out["label"]}

    # -------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {"task": self.task, "seen_classes": list(self.seen_classes)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.task = int(state["task"])
        self.seen_classes = [int(c) for c in state.get("seen_classes", [])]


class ReplayAlgorithm(Algorithm):
    """Base of the rehearsal methods: a :class:`~modforge.continual.buffer.Buffer` filled
    with the current batch after every step.

    Args:
        buffer_size: how many past samples are kept.
        minibatch_size: how many are replayed per step (None: the batch size).
        buffer_policy: 'reservoir', 'class_balanced' (CBRS) or 'greedy_balanced' (GDumb's sampler).
        seed: seeds the buffer's sampling (wired from the config's seed).
    """

    uses_buffer = True
    stored: tuple[str, ...] = ("input",)  # what is stored with each label (DER adds "logits")

    def __init__(
        self,
        model: torch.nn.Module,
        num_classes: int | None = None,
        buffer_size: PositiveInt = 200,
        minibatch_size: PositiveInt | None = None,
        buffer_policy: Policy = "reservoir",
        seed: int = 0,
    ):
        super().__init__(model, num_classes)
        check(at_least_one("minibatch_size", minibatch_size))
        self.buffer = Buffer(buffer_size, buffer_policy, seed)
        self.minibatch_size = minibatch_size

    def replay(self, batch: dict[str, Any]) -> dict[str, torch.Tensor] | None:
        """A replay minibatch (None while the buffer is empty), on the batch's device. With
        several processes, this process's share of one draw made alike on every process."""
        return self.draw(self.buffer, self.minibatch_size or len(batch["label"]), batch["label"].device)

    def remember(self, batch: dict[str, Any], out: dict[str, Any]) -> None:
        """Offer the current batch to the buffer (with its logits when the method stores them);
        with several processes, every process's batch, in the stream's order."""
        rows = {key: (out["logits"] if key == "logits" else batch[key]) for key in self.stored}
        rows = self.processes.gather_rows({**rows, "label": batch["label"]})
        labels = rows.pop("label")
        self.buffer.add(labels, **rows)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "buffer": self.buffer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.buffer.load_state_dict(state["buffer"])
