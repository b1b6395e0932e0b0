"""The assembled model: stages in order, a dictionary flowing through them, losses summed.

``model(batch_dict)`` returns the batch with every stage's output added under the
stage's name, plus ``embedding`` (the head's input; also under ``features``), ``logits``
(the last stage's output), each loss under its key and their weighted sum under
``loss``. ``model(x)`` with a tensor returns, by ``returnt``:

* ``"out"`` — logits;
* ``"features"`` — the embedding before the head;
* ``"both"`` — ``(logits, embedding)`` (Mammoth's order);
* ``"full"`` — every stage's output in order, each backbone preceded by its blocks' outputs.

A key holds a loss when it is named ``loss``, ``loss_*`` or ``*_loss``: every such key a
stage adds is summed into ``loss`` together with the configured ``losses:``.

A loss that owns its classifier (margin losses: ``input_key = "embedding"`` and a
``logits(embedding)`` method) stands in for the head of a model that has none: its
logits are the model's ``logits``. A model built with ``scores=True`` (detection tasks)
also adds ``score`` [B] — higher means the positive class (bona fide) — from the first
configured loss that defines ``score(inputs)``, else the log-odds of class 1 from the logits.

Padding masks. A batch of whole files padded to its longest carries ``mask`` [B, T] (True on
real samples). A part that handles padding takes it as a keyword, ``forward(x, mask=None)``,
and gives each row what it would give that row alone (``handles_mask = False`` declines, e.g.
for settings under which it cannot); it may say how its output's time axis
relates to its input's with ``output_mask(mask)`` (default: the same axis; a vector output has
none). The model hands every such part the mask at its input's resolution (adapters that
average over time average only real frames). ``model.mask_aware`` is True when every part that
sees a padded time axis takes the mask — only then are padded batches scored as files alone,
and only then do evaluation loaders batch whole files (``data.eval_max_samples``).

Frontends run in float32 even under mixed precision (``precision: bf16``/``16``): spectra
overflow half precision, and log floors round to zero in it.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import torch
import torch.nn as nn

from ..components.base import flat_grads, flat_params
from ..components.layouts import Layout
from ..components.losses.classification import log_odds
from ..core.errors import UsageError
from .errors import ModelOutputError, StageError
from .spec import is_loss_key

__all__ = ["RETURNT", "LossInfo", "ModularModel", "StageInfo"]

RETURNT = ("out", "features", "both", "full")


@dataclasses.dataclass
class StageInfo:
    """What the builder learned about one stage."""

    name: str
    kind: str
    type: str
    prev: str | None
    in_layout: Layout
    out_layout: Layout
    in_dim: Any
    out_dim: Any
    dict_io: bool = False
    output_key: str | None = None
    takes_returnt: bool = False
    has_intermediates: bool = False
    takes_mask: bool = False


@dataclasses.dataclass
class LossInfo:
    """One configured loss: where its output goes and what it reads."""

    key: str
    type: str
    weight: float
    input_key: str
    target_key: str


def describe_value(value: Any) -> str:
    """``tensor[2, 3, 32, 32] float32`` / ``list of 2 tensors`` — for messages."""
    if isinstance(value, torch.Tensor):
        return f"tensor{list(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__} of {len(value)} " + ", ".join(describe_value(v) for v in value[:3])
    return type(value).__name__


class ModularModel(nn.Module):
    """Parts wired into one module (built by :func:`modforge.build_model`)."""

    def __init__(
        self,
        stages: list[tuple[StageInfo, nn.Module, nn.Module | None]],
        losses: list[tuple[LossInfo, nn.Module]],
        num_classes: int | None = None,
        *,
        scores: bool = False,
    ):
        super().__init__()
        self.parts = nn.ModuleDict({info.name: part for info, part, _ in stages})
        self.adapters = nn.ModuleDict({info.name: adapter for info, _, adapter in stages if adapter is not None})
        self.loss_fns = nn.ModuleDict({info.key: fn for info, fn in losses})
        self.stage_info = [info for info, _, _ in stages]
        self.loss_info = [info for info, _ in losses]
        self.num_classes = num_classes
        last = self.stage_info[-1]
        self.has_head = last.kind == "head"
        self.out_dim = last.out_dim
        self.embedding_dim = last.in_dim if self.has_head else last.out_dim
        self._dict_stages = any(info.dict_io for info in self.stage_info)  # only they can add loss keys
        self.classifier_loss: str | None = None  # a loss whose logits() stand in for a missing head
        if not self.has_head:
            self.classifier_loss = next(
                (i.key for i, fn in losses if i.input_key in ("embedding", "features") and callable(getattr(fn, "logits", None))),
                None,
            )
        # (key, input key) of the loss whose score() gives batch["score"]
        self.scorer: tuple[str, str] | None = None
        if scores:
            first = ((i.key, i.input_key) for i, fn in losses if callable(getattr(fn, "score", None)))
            self.scorer = next(first, ("", "logits"))  # no scoring loss: log-odds of class 1
        self.input_layout: Layout = self.stage_info[0].in_layout  # the builder sets it (adapters come after)
        for info, part, _ in stages:
            info.takes_mask = _takes_mask(part)

    @property
    def mask_aware(self) -> bool:
        """Whether a padded batch (``mask`` [B, T]) is scored as each file alone: every stage
        that receives a padded time axis takes ``mask`` (see the module doc)."""
        masked = {"input": True}
        for info in self.stage_info:
            has = masked[info.prev or "input"]
            adapter = self.adapters[info.name] if info.name in self.adapters else None
            if has and adapter is not None and adapter.op in ("mean_time", "mean_last"):
                has = False  # averaged over real frames only
            if has and not info.takes_mask:
                return False
            masked[info.name] = has and info.out_layout is not Layout.VECTOR
        return True

    # ------------------------------------------------------------------ access
    def stage(self, name: str) -> nn.Module:
        """The part of stage ``name``."""
        return self.parts[name]

    @property
    def backbone(self) -> nn.Module:
        """The first stage of kind backbone."""
        return self.parts[next(i.name for i in self.stage_info if i.kind == "backbone")]

    @property
    def makes_loss(self) -> bool:
        """Whether a training batch can yield a ``loss``: a configured loss, or a ``dict_io``
        stage that may write loss keys. A model without either cannot be trained."""
        return bool(len(self.loss_fns)) or self._dict_stages

    def with_parts(self, replacements: Mapping[str, nn.Module], *, plain: Iterable[str] = ()) -> ModularModel:
        """A view of this model in which ``replacements`` (stage name → module, e.g. an
        engine's compiled parts) stand in for the stage parts; every other module, every
        parameter and buffer is shared. Stages named in ``plain`` are only ever called as
        ``part(x)`` (a traced part takes no ``returnt`` and has no ``forward_intermediates``)."""
        unknown = set(replacements) - set(self.parts)
        if unknown:
            raise UsageError(f"no stage named {', '.join(sorted(unknown))} (stages: {', '.join(self.parts)})")
        view = copy.copy(self)
        view._modules = dict(self._modules)  # its own module table; the modules in it are shared
        view.parts = nn.ModuleDict({name: replacements.get(name, part) for name, part in self.parts.items()})
        plain = set(plain)
        view.stage_info = [
            dataclasses.replace(info, takes_returnt=False, has_intermediates=False, takes_mask=False)
            if info.name in plain
            else info
            for info in self.stage_info
        ]
        return view

    def get_params(self) -> torch.Tensor:
        """Every parameter of the model as one flat vector."""
        return flat_params(self)

    def get_grads(self) -> torch.Tensor:
        """Every gradient as one flat vector (zeros where none)."""
        return flat_grads(self)

    # ----------------------------------------------------------------- forward
    def forward(self, x: Any, returnt: str = "out") -> Any:
        if returnt not in RETURNT:
            raise UsageError(f"returnt must be one of {', '.join(RETURNT)}, got {returnt!r}")
        dict_mode = isinstance(x, Mapping)
        batch: dict[str, Any] = dict(x) if dict_mode else {"input": x}
        if "input" not in batch:
            raise ModelOutputError(f"the batch has no 'input' key (it has: {', '.join(map(str, batch))})")
        given = set(batch)
        full: list[Any] | None = [] if returnt == "full" else None
        self._run_stages(batch, full, need_embedding=dict_mode or returnt in ("features", "both"))
        if dict_mode:
            self._add_losses(batch, given)
            if full is not None:
                batch["full"] = full
            return batch
        if returnt == "out":
            return batch["logits"]
        if returnt == "features":
            return batch["embedding"]
        if returnt == "both":
            return batch["logits"], batch["embedding"]
        return full

    def _run_stages(self, batch: dict[str, Any], full: list[Any] | None, need_embedding: bool) -> None:
        parts, adapters = self.parts, self.adapters if len(self.adapters) else None  # looked up once per call
        last = len(self.stage_info) - 1
        mask = batch.get("mask")
        masks: dict[str, Any] | None = None
        if isinstance(mask, torch.Tensor) and mask.dim() == 2 and self.mask_aware:
            masks = {"input": mask.to(torch.bool)}
        for i, info in enumerate(self.stage_info):
            src = batch["input"] if info.prev is None else batch[info.prev]
            src_mask = masks.get(info.prev or "input") if masks is not None else None
            if adapters is not None and info.name in adapters:
                src, src_mask = _adapt(adapters[info.name], src, src_mask)
            if src_mask is not None:
                if i == last and self.has_head:
                    batch["embedding"] = batch["features"] = src
                out = self._call_masked(parts[info.name], info, src, src_mask, batch, full)
                masks[info.name] = _output_mask(parts[info.name], info, src_mask, out)
                batch[info.name] = out
                continue
            is_last = i == last
            if is_last and self.has_head:
                batch["embedding"] = batch["features"] = src  # UP's heads read "features"
            want_embedding = need_embedding and is_last and not self.has_head
            try:
                if info.kind == "frontend" and isinstance(src, torch.Tensor) and _autocast_on(src.device.type):
                    with torch.autocast(src.device.type, enabled=False):  # features need float32's range
                        out = self._call(parts[info.name], info, src.float(), batch, full, want_embedding)
                else:
                    out = self._call(parts[info.name], info, src, batch, full, want_embedding)
            except UsageError:
                raise
            except Exception as exc:
                shown = "the batch" if info.dict_io else describe_value(src)
                raise StageError(
                    f"stage '{info.name}' ({info.kind} '{info.type}') failed on {shown}: {type(exc).__name__}: {exc}"
                ) from exc
            batch[info.name] = out
        batch.setdefault("embedding", out)
        batch["features"] = batch["embedding"]
        batch["logits"] = out if self.classifier_loss is None else self.loss_fns[self.classifier_loss].logits(out)
        if self.scorer is not None:
            key, input_key = self.scorer
            batch["score"] = log_odds(batch["logits"]) if not key else self.loss_fns[key].score(batch[input_key])

    def _call_masked(self, part: nn.Module, info: StageInfo, src: Any, mask: torch.Tensor, batch: dict[str, Any],
                     full: list[Any] | None) -> Any:  # fmt: skip
        """A mask-aware part on a padded input (frontends in float32, as in :meth:`_run_stages`)."""
        try:
            if info.kind == "frontend" and isinstance(src, torch.Tensor) and _autocast_on(src.device.type):
                with torch.autocast(src.device.type, enabled=False):
                    out = part(src.float(), mask=mask)
            else:
                out = part(src, mask=mask)
        except UsageError:
            raise
        except Exception as exc:
            raise StageError(
                f"stage '{info.name}' ({info.kind} '{info.type}') failed on {describe_value(src)} with its padding "
                f"mask {describe_value(mask)}: {type(exc).__name__}: {exc}"
            ) from exc
        if full is not None:
            full.append(out)
        if info is self.stage_info[-1] and not self.has_head:
            batch.setdefault("embedding", out)
        return out

    @staticmethod
    def _call(
        part: nn.Module, info: StageInfo, src: Any, batch: dict[str, Any], full: list[Any] | None, want_embedding: bool
    ) -> Any:
        if full is None and not want_embedding and not info.dict_io:  # the common case: a tensor in, a tensor out
            return part(src)
        if info.dict_io:
            result = part(batch)
            if isinstance(result, Mapping) and result is not batch:
                batch.update(result)
            out = batch.get(info.output_key) if info.output_key else None
            if full is not None:
                full.append(out)
            return out
        if full is not None and info.takes_returnt:  # the author's own "full" wins
            full.extend(part(src, returnt="full"))
            return part(src)
        if full is not None and info.has_intermediates:
            out, blocks = part.forward_intermediates(src)
            full.extend(blocks)
            full.append(out)
            return out
        if want_embedding and info.takes_returnt:
            out, embedding = part(src, returnt="both")
            batch["embedding"] = embedding
            return out
        out = part(src)
        if full is not None:
            full.append(out)
        return out

    def _add_losses(self, batch: dict[str, Any], given: set[str]) -> None:
        weighted: list[torch.Tensor] = []
        if "loss" in batch and "loss" not in given:  # a stage wrote the bare key: keep it as a component
            batch["loss_stage"] = batch.pop("loss")
        if self._dict_stages:
            for key in [k for k in batch if k not in given and isinstance(k, str) and is_loss_key(k)]:
                weighted.append(_scalar(batch[key], key))
        loss_fns = self.loss_fns
        for info in self.loss_info:
            if info.target_key not in batch:
                continue  # inference: no labels, no configured losses
            value = _scalar(loss_fns[info.key](batch[info.input_key], batch[info.target_key]), info.key)
            batch[info.key] = value
            weighted.append(value * info.weight if info.weight != 1.0 else value)
        if weighted:
            batch["loss"] = torch.stack(weighted).sum() if len(weighted) > 1 else weighted[0]

    def extra_repr(self) -> str:
        flow = " -> ".join(f"{i.name}:{i.type}" for i in self.stage_info)
        return f"flow: {flow}; losses: {', '.join(i.key for i in self.loss_info) or 'none'}"


def _takes_mask(part: nn.Module) -> bool:
    """True for a part whose ``forward`` has a ``mask`` parameter (it handles padding)."""
    import inspect

    try:
        takes = "mask" in inspect.signature(part.forward).parameters
    except (TypeError, ValueError):
        return False
    return takes and bool(getattr(part, "handles_mask", True))  # a part may decline for some settings


def _adapt(adapter: nn.Module, src: Any, mask: torch.Tensor | None) -> tuple[Any, torch.Tensor | None]:
    """An adapter applied to a possibly padded input: averages over time count real frames only."""
    if mask is None:
        return adapter(src), None
    op = getattr(adapter, "op", "")
    if op == "mean_time":  # [B, T, D]
        weights = mask.to(src.dtype).unsqueeze(-1)
        return (src * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0), None
    if op == "mean_last":  # [B, C, T]
        weights = mask.to(src.dtype).unsqueeze(1)
        return (src * weights).sum(dim=-1) / weights.sum(dim=-1).clamp_min(1.0), None
    return adapter(src), mask  # transposes and added channels keep the time axis


def _output_mask(part: nn.Module, info: StageInfo, mask: torch.Tensor, out: Any) -> torch.Tensor | None:
    """The padding mask of a mask-aware part's output (None: no time axis left)."""
    if info.out_layout is Layout.VECTOR:
        return None
    rule = getattr(part, "output_mask", None)
    return rule(mask) if callable(rule) else mask


def _autocast_on(device_type: str) -> bool:
    """Whether mixed precision is active for ``device_type`` (torch ≥ 2.4 and older spellings)."""
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # pragma: no cover - torch < 2.4
        return torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()


def _scalar(value: Any, key: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor) and value.dim() == 0 and value.is_floating_point():
        return value
    if not isinstance(value, torch.Tensor) or value.numel() != 1 or not value.is_floating_point():
        raise ModelOutputError(
            f"batch key '{key}' holds a loss by its name ('loss', 'loss_*', '*_loss') but is "
            f"{describe_value(value)}; a loss must be a floating-point scalar tensor"
        )
    return value.reshape(())
