"""``xder`` — eXtended Dark Experience Replay (Boschini et al., "Class-Incremental Continual
Learning into the eXtended DER-verse", TPAMI 2022).

Following Mammoth's ``models/xder.py`` (aimagelab/mammoth, commit
e75a491c69fd729edeb01431afb753d9157d9a81). The logit columns are split into heads: the
*past* head (classes of the earlier tasks), the *present* head (this task's classes) and the
*future* head (classes not met yet). A training step adds up:

* **present head**: cross-entropy of the incoming batch over the present head's logits only;
* **DER** (``alpha``): MSE between the logits of a replayed minibatch and its stored logits,
  over every column;
* **DER++ on the past heads** (``beta``): cross-entropy of a second replayed minibatch over
  the past head's logits;
* **future constraint** (``constr_eta``, ``constr_margin``; ``future_constraint``): a hinge
  keeping the largest future logit ``constr_margin`` below the largest logit of the sample's
  own head, on the incoming batch and the replayed samples, averaged over the violations;
* **past constraint** (same weight and margin; ``past_constraint``, off by default): a hinge
  keeping the largest softmax probability of the past head (not back-propagated) below that
  of the present head, on the incoming batch.

The stored logits are kept up to date — "future-past" knowledge:

* when a replayed sample of an earlier task is used in a step, its stored logits of the
  present and future heads are replaced by what the model outputs now, scaled down by
  ``gamma · (stored logit of its class) / (largest new logit)`` when that new logit exceeds
  the stored one (a sample replayed for the k-th time in this task is updated with
  probability 1/k);
* at each task end the memory is rebuilt class-balanced (the earlier classes keep their
  first ``buffer_size // classes seen`` samples, the free slots go to this task's classes,
  drawn uniformly from its data, with their logits — their past head capped the same way),
  and every stored sample of an earlier task gets its present and future heads updated.

``align_bn`` (Mammoth's BatchNorm alignment): from the second task on, the incoming batch
alone and the second replayed minibatch do not update BatchNorm running statistics; the first
replayed minibatch is forwarded together with ``minibatch_size // task`` incoming samples,
which do. End-of-task forward passes run in training mode without updating them.

Not included: Mammoth's SimCLR consistency loss on the future heads (``lambd``,
``simclr_temp``, ``simclr_batch_size``, ``simclr_num_aug``) and the distance-preserving loss
built on it (``dp_weight``) — they need Mammoth's strong image augmentations applied inside
the step, which a modforge algorithm, working on any input the data pipeline gives, does not
have. The method here is X-DER with the present-head loss, DER/DER++ terms, the logit updates
(``gamma``) and the past/future constraints (``constr_eta``, ``constr_margin``).

The heads follow the tasks' classes as given at ``begin_task`` (any numbering); every task
must have the same number of classes, as in Mammoth. The buffer is filled only at task ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ...core.constraints import FiniteFloat, NonNegativeFloat, PositiveInt
from ...core.registries import register_algorithm
from ..buffer import stream_subset
from .base import ReplayAlgorithm
from .checks import check, non_negative, unit_interval
from .passes import batchnorm_statistics_frozen, in_chunks, prepared, stepped_batch_size, training_mode

__all__ = ["XDER", "batchnorm_statistics_frozen"]  # batchnorm_statistics_frozen: from .passes, where it lives now


@register_algorithm("xder")
class XDER(ReplayAlgorithm):
    """X-DER (without the SimCLR consistency term; see the module doc).

    Args:
        model: the model (wired by the runner).
        num_classes: number of classes (wired by the runner).
        alpha: weight of the logit MSE on replayed samples (Mammoth's ``--alpha``).
        beta: weight of the replayed labels' cross-entropy on the past heads (``--beta``).
        gamma: scale of the logit updates (``--gamma``), in [0, 1].
        constr_eta: weight of the past/future constraints (``--constr_eta``).
        constr_margin: margin of the past/future constraints (``--constr_margin``).
        past_constraint: add the past-head constraint (``--past_constraint``).
        future_constraint: add the future-head constraint (``--future_constraint``).
        align_bn: BatchNorm alignment (``--align_bn``).
        buffer_size: how many past samples (and their logits) are kept.
        minibatch_size: how many are replayed per step and term (None: the batch size).
        seed: seeds the buffer's draws (wired from the config's seed).
    """

    distributed = (  # why it trains in one process only
        "its constraint hinges are averaged over the violations each batch happens to hold, and it rewrites "
        "the stored logits of the samples each step replays, so shards would not add up to the whole batch's "
        "step"
    )

    settings = ("class-il",)

    def __init__(
        self,
        model: torch.nn.Module,
        num_classes: int | None = None,
        alpha: NonNegativeFloat = 0.3,
        beta: NonNegativeFloat = 0.8,
        gamma: NonNegativeFloat = 0.85,
        constr_eta: NonNegativeFloat = 0.1,
        constr_margin: FiniteFloat = 0.3,
        past_constraint: bool = False,
        future_constraint: bool = True,
        align_bn: bool = True,
        buffer_size: PositiveInt = 200,
        minibatch_size: PositiveInt | None = None,
        seed: int = 0,
    ):
        super().__init__(model, num_classes, buffer_size, minibatch_size, "reservoir", seed)
        check(non_negative("alpha", alpha), non_negative("beta", beta), non_negative("constr_eta", constr_eta))
        check(unit_interval("gamma", gamma))
        if num_classes is None:
            raise ValueError("xder needs num_classes (its future head is the classes not seen yet)")
        self.alpha, self.beta, self.gamma = alpha, beta, gamma
        self.constr_eta, self.constr_margin = constr_eta, constr_margin
        self.past_constraint, self.future_constraint = bool(past_constraint), bool(future_constraint)
        self.align_bn = bool(align_bn)
        self.task_classes: list[list[int]] = []  # each begun task's classes (its head), in task order
        self.update_counter = torch.zeros(buffer_size, dtype=torch.long)  # logit updates per slot this task
        self.train_batch = 0  # the largest training batch stepped on

    # ------------------------------------------------------------------ heads
    def begin_task(self, task: int, trainer: Any = None, classes: Sequence[int] = ()) -> None:
        classes = [int(c) for c in classes]
        if not classes:
            raise ValueError(f"xder.begin_task needs the classes of task {task}")
        repeated = sorted(set(classes) & {c for head in self.task_classes[:task] for c in head})
        if repeated:
            raise ValueError(f"xder needs class-incremental tasks; task {task} repeats classes {repeated}")
        if self.task_classes and len(classes) != len(self.task_classes[0]):
            raise ValueError(f"xder needs the same number of classes in every task: task {task} has "
                             f"{len(classes)}, task 0 had {len(self.task_classes[0])}")  # fmt: skip
        outside = [c for c in classes if not 0 <= c < self.num_classes]
        if outside:
            raise ValueError(f"task {task}'s classes {outside} are outside the model's {self.num_classes} classes")
        super().begin_task(task, trainer, classes)
        self.task_classes = self.task_classes[:task] + [classes]

    def _columns(self, task: int, device: torch.device) -> dict[str, torch.Tensor]:
        """The logit columns of task ``task``'s heads: ``past``, ``present``, ``future`` (the
        classes of no task up to ``task``), ``later`` (present + future), ``heads`` (each task's
        columns, [tasks, classes per task]) and ``task_of`` / ``place`` (each class's task and its
        position in its head, -1 when unknown)."""
        past = [c for head in self.task_classes[:task] for c in head]
        present = self.task_classes[task]
        known = set(past) | set(present)
        future = [c for c in range(self.num_classes) if c not in known]
        task_of = torch.full((self.num_classes,), -1, dtype=torch.long)
        place = torch.full((self.num_classes,), -1, dtype=torch.long)
        for t, head in enumerate(self.task_classes[: task + 1]):
            task_of[head] = t
            place[head] = torch.arange(len(head))
        past_place = torch.full((self.num_classes,), -1, dtype=torch.long)
        past_place[past] = torch.arange(len(past))

        def tensor(values: Any) -> torch.Tensor:
            return torch.as_tensor(values, dtype=torch.long).to(device)

        return {
            "past": tensor(past), "present": tensor(present), "future": tensor(future),
            "later": tensor(present + future), "heads": tensor(self.task_classes[: task + 1]),
            "task_of": task_of.to(device), "place": place.to(device), "past_place": past_place.to(device),
        }  # fmt: skip

    def capped(self, stored: torch.Tensor, new: torch.Tensor, labels: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """``stored`` logits with ``columns`` taken from ``new``; in the rows where the largest
        new value there exceeds the stored logit of the sample's class, those values are first
        scaled by ``gamma · stored class logit / largest new value`` (Mammoth's ``update_logits``)."""
        out = stored.clone()
        part = new[:, columns].clone()
        truth = stored[torch.arange(len(labels), device=stored.device), labels]
        top = part.max(1).values
        over = top > truth
        part[over] = part[over] * (self.gamma * truth[over] / top[over]).unsqueeze(1)
        out[:, columns] = part
        return out

    # ------------------------------------------------------------------- step
    def training_step(self, trainer: Any, batch: dict[str, Any]) -> torch.Tensor:
        task = self.task
        if not 0 <= task < len(self.task_classes):
            raise ValueError("xder: begin_task(task, trainer, classes) must come before the task's steps")
        inputs, labels = batch["input"], batch["label"]
        self.train_batch = max(self.train_batch, len(labels))
        cols = self._columns(task, labels.device)
        if bool((cols["task_of"][labels] != task).any()):
            raise ValueError(f"xder: a batch of task {task} holds classes outside the task's {self.task_classes[task]}; "
                             "its present head needs class-incremental batches (no blurry task boundaries)")
        with batchnorm_statistics_frozen(self.model, self.align_bn and task > 0):
            outputs = trainer.forward({"input": inputs})["logits"]
        loss = F.cross_entropy(outputs[:, cols["present"]], cols["place"][labels])

        replayed = None
        if not self.buffer.is_empty:
            size = self.minibatch_size or len(labels)
            index1, first = self.buffer.sample_with_index(size)
            device = labels.device
            first = {k: v.to(device) for k, v in first.items()}
            drawn = len(index1)
            forwarded = first["input"]
            if self.align_bn:
                forwarded = torch.cat([forwarded, inputs[: size // max(task, 1)]])
            out1 = trainer.forward({"input": forwarded})["logits"][:drawn]
            loss = loss + self.alpha * F.mse_loss(out1, first["logits"])

            index2, second = self.buffer.sample_with_index(size)
            second = {k: v.to(device) for k, v in second.items()}
            with batchnorm_statistics_frozen(self.model, self.align_bn):
                out2 = trainer.forward({"input": second["input"]})["logits"]
            if len(cols["past"]):
                loss = loss + self.beta * F.cross_entropy(out2[:, cols["past"]], cols["past_place"][second["label"]])

            index = torch.cat([index1, index2])
            met: set[int] = set()
            keep = torch.zeros(len(index), dtype=torch.bool)  # a slot drawn twice counts once (its first draw)
            for row, slot in enumerate(index.tolist()):
                keep[row] = slot not in met
                met.add(slot)
            replayed = {
                "index": index[keep], "label": torch.cat([first["label"], second["label"]])[keep.to(device)],
                "logits": torch.cat([first["logits"], second["logits"]])[keep.to(device)],
                "outputs": torch.cat([out1, out2])[keep.to(device)],
            }  # fmt: skip
            self._update_replayed(replayed, cols, task)

        if self.future_constraint and len(cols["future"]):
            bad, good = outputs[:, cols["future"]], outputs[:, cols["present"]]
            if replayed is not None:
                own = cols["heads"][cols["task_of"][replayed["label"]]]
                bad = torch.cat([bad, replayed["outputs"][:, cols["future"]]])
                good = torch.cat([good, replayed["outputs"].gather(1, own)])
            loss = loss + self._hinge(bad.max(1).values + self.constr_margin - good.max(1).values)

        if self.past_constraint and task > 0:
            seen = torch.cat([cols["past"], cols["present"]])
            probabilities = F.softmax(outputs[:, seen], 1)
            bad, good = probabilities[:, : len(cols["past"])], probabilities[:, len(cols["past"]) :]
            loss = loss + self._hinge(bad.max(1).values.detach() + self.constr_margin - good.max(1).values)
        return loss

    def _hinge(self, violation: torch.Tensor) -> torch.Tensor | float:
        """``constr_eta`` × the mean of the positive violations (0 when there are none)."""
        positive = violation > 0
        if not bool(positive.any()):
            return 0.0
        return self.constr_eta * violation[positive].mean()

    @torch.no_grad()
    def _update_replayed(self, replayed: dict[str, torch.Tensor], cols: dict[str, torch.Tensor], task: int) -> None:
        """Future-past update of the replayed samples of earlier tasks (the k-th replay of a
        sample in this task updates it with probability 1/k)."""
        index = replayed["index"]
        earlier = (cols["task_of"][replayed["label"]] < task).cpu()
        if not bool(earlier.any()):
            return
        self.update_counter[index[earlier]] += 1
        coins = torch.rand(int(earlier.sum()), generator=self.buffer.generator)
        chosen = earlier.clone()
        chosen[earlier] = coins * self.update_counter[index[earlier]].float() < 1
        if not bool(chosen.any()):
            return
        rows = chosen.to(replayed["label"].device)
        new = self.capped(replayed["logits"][rows], replayed["outputs"][rows].detach(), replayed["label"][rows],
                          cols["later"])  # fmt: skip
        self.buffer.update(index[chosen], logits=new, task=torch.full((int(chosen.sum()),), task, dtype=torch.long))

    # -------------------------------------------------------- task boundaries
    def _logits(self, inputs: torch.Tensor, batch_size: int) -> torch.Tensor:
        """The model's logits for ``inputs``, forwarded ``batch_size`` at a time."""
        return torch.cat([self.model(chunk)["logits"] for chunk in in_chunks({"input": inputs}, batch_size)])

    def end_task(self, task: int, trainer: Any = None, loader: Any = None) -> None:
        if loader is None:
            raise ValueError("xder.end_task needs the task's training loader (to fill its memory)")
        if not 0 <= task < len(self.task_classes):
            raise ValueError(f"xder.end_task: task {task} was never begun")
        batch_size = stepped_batch_size(self, loader)
        present = self.task_classes[task]
        with training_mode(self.model), torch.no_grad(), batchnorm_statistics_frozen(self.model):
            if task > 0:  # the earlier classes keep their first buffer_size // classes-seen samples
                share = self.buffer.capacity // len(self.seen_classes)
                held = self.buffer.all()
                self.buffer.clear()
                for label in held["label"].unique().tolist():
                    rows = (held["label"] == label).nonzero().reshape(-1)[:share]
                    self.buffer.add(held["label"][rows], **{k: v[rows] for k, v in held.items() if k != "label"})
            free = self.buffer.capacity - len(self.buffer)
            quota = torch.full((len(present),), free // len(present), dtype=torch.long)
            quota[torch.randperm(len(present), generator=self.buffer.generator)[: free % len(present)]] += 1
            drawn = stream_subset(prepared(trainer, loader), dict(zip(present, quota.tolist(), strict=True)),
                                  self.buffer.generator)  # fmt: skip
            if len(drawn["label"]):
                device = drawn["label"].device
                cols = self._columns(task, device)
                logits = self._logits(drawn["input"], batch_size)
                if task > 0:
                    logits = self.capped(logits, logits, drawn["label"], cols["past"])
                self.buffer.add(drawn["label"], input=drawn["input"], logits=logits, task=task)
            if not self.buffer.is_empty:  # future-past update of every stored sample of an earlier task
                held = self.buffer.all()
                cols = self._columns(task, held["label"].device)
                earlier = cols["task_of"][held["label"]] < task
                if bool(earlier.any()):
                    outputs = self._logits(held["input"], batch_size)
                    new = self.capped(held["logits"][earlier], outputs[earlier], held["label"][earlier],
                                      cols["later"])  # fmt: skip
                    slots = earlier.nonzero().reshape(-1)
                    self.buffer.update(slots, logits=new, task=torch.full((len(slots),), task, dtype=torch.long))
        self.update_counter.zero_()

    # -------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "task_classes": [list(head) for head in self.task_classes],
            "update_counter": self.update_counter.clone(),
            "train_batch": self.train_batch,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.task_classes = [[int(c) for c in head] for head in state.get("task_classes", [])]
        self.update_counter = state["update_counter"].clone().cpu()
        self.train_batch = int(state.get("train_batch", 0))
