"""What a conformance check runs on: a part, a way to build it again, and an example input."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
import torch.nn as nn

from ..components.layouts import Layout, example_input, infer_layout
from ..core.plugins import import_object, load_plugin
from ..core.registries import REGISTRIES
from ..core.registry import Registry
from ..model.introspect import accepted_layouts, is_dict_io, output_key

__all__ = ["DEFAULT_IN_DIM", "PART_KINDS", "Subject", "subjects_for"]

PART_KINDS = ("frontend", "backbone", "neck", "head", "loss")
"""The kinds the conformance suite checks."""

DEFAULT_IN_DIM: dict[Layout, Any] = {
    Layout.WAVEFORM: 1,
    Layout.VECTOR: 16,
    Layout.SEQUENCE: 12,
    Layout.CHANNELS: 12,
    Layout.IMAGE: 3,
    Layout.MULTISCALE: [8, 16, 32],
}
NUM_CLASSES = 5
BATCH = 4
_PROBE_ORDER = (Layout.VECTOR, Layout.SEQUENCE, Layout.IMAGE, Layout.CHANNELS, Layout.WAVEFORM)


@dataclasses.dataclass
class Subject:
    """One part under test, for one input layout.

    Attributes:
        kind, name: what is checked (``backbone``, ``resnet18``).
        layout: the input layout of :attr:`example`.
        build: builds a fresh instance with the same arguments (seeded differently each time).
        example: an input batch of :data:`BATCH` samples (for losses: the scores).
        target: labels, for losses.
        layout_note: how the layout was chosen (declared, or probed for a plain module).
        built: an instance already built while the subject was made (to see whether it is
            dict-in/dict-out); :meth:`instance` hands it out once instead of building again.
    """

    kind: str
    name: str
    layout: Layout
    in_dim: Any
    build: Callable[[], nn.Module]
    example: Any
    target: torch.Tensor | None = None
    layout_note: str = "declared"
    dict_io: bool = False
    output_key: str = "features"
    built: nn.Module | None = dataclasses.field(default=None, repr=False)

    def instance(self) -> nn.Module:
        """The instance built while probing the part, the first time; a fresh :attr:`build` after that
        (a large part costs as much to build as several of the checks)."""
        part, self.built = self.built, None
        return part if part is not None else self.build()

    @property
    def is_loss(self) -> bool:
        return self.kind == "loss"

    def run(self, part: nn.Module, example: Any | None = None, target: torch.Tensor | None = None) -> Any:
        """Call ``part`` on the example (with the target for losses).

        A dict-in/dict-out part (UP style) gets a batch ``{"input": x, "features": x,
        "label": y}`` — ``x`` in the layout it declares — and its output is the batch's
        ``output_key`` afterwards.
        """
        example = self.example if example is None else example
        target = self.target if target is None else target
        if self.is_loss:
            return part(example, target)
        if not self.dict_io:
            return part(example)
        batch = {"input": example, "features": example, "embedding": example}
        if target is not None:
            batch["label"] = target
        result = part(batch)
        if not isinstance(result, Mapping):
            raise TypeError(
                f"a dict_io part must return the batch dict with {self.output_key!r} set, "
                f"but it returned {type(result).__name__}"
            )
        if result.get(self.output_key) is None:
            raise KeyError(f"a dict_io {self.kind} must write its output to batch[{self.output_key!r}]; it did not")
        return result[self.output_key]


def _registry_with(kind: str, target: str | Any, plugins: Iterable[str]) -> tuple[Registry, str]:
    """The registry to build from: the kind's own, or a scratch one holding an import path's object."""
    registry = REGISTRIES[kind]
    if isinstance(target, str) and (target in registry or not (":" in target or "." in target)):
        registry.entry(target)  # unknown names raise here, with suggestions
        return registry, target
    if isinstance(target, str):
        load_plugin(_module_of(target), origin="the part to check")  # named by the user: vouched for
        obj = import_object(target, kind=kind, allowed_modules=[_module_of(target), *plugins], base=registry.base)
    else:
        obj = target
    scratch = Registry(kind, injected=registry.injected)
    name = getattr(obj, "__name__", "part")
    scratch.add(obj, name)
    return scratch, name


def _module_of(path: str) -> str:
    return path.rpartition(":")[0] if ":" in path else path.rpartition(".")[0]


def _factory(
    registry: Registry, name: str, args: dict[str, Any], in_dim: Any, layout: Layout
) -> Callable[[], nn.Module]:
    counter = iter(range(1, 1 << 30))

    def build() -> nn.Module:
        torch.manual_seed(next(counter))
        return registry.build(
            {"type": name, "args": dict(args)},
            path=f"{registry.kind} '{name}'",
            in_dim=in_dim,
            num_classes=NUM_CLASSES,
            in_layout=layout,
        )

    return build


def _mark_dict_io(subject: Subject, gen: torch.Generator) -> None:
    """Detect a UP-style part (batch dict in, batch dict out) and give it labels; the instance built
    for this is kept for the checks (:meth:`Subject.instance`)."""
    try:
        part = subject.build()
    except Exception:
        return  # the 'builds' check reports it
    subject.built = part
    if is_dict_io(part):
        subject.dict_io = True
        subject.output_key = output_key(part, subject.kind)
        subject.target = torch.randint(0, NUM_CLASSES, (BATCH,), generator=gen)


def _loss_subject(registry: Registry, name: str, args: dict[str, Any]) -> Subject:
    obj = registry.get(name)
    width = (
        DEFAULT_IN_DIM[Layout.VECTOR]
        if getattr(obj, "input_key", "logits") in ("embedding", "features")
        else NUM_CLASSES
    )
    gen = torch.Generator().manual_seed(0)
    example = torch.randn(BATCH, width, generator=gen)
    target = torch.randint(0, NUM_CLASSES, (BATCH,), generator=gen)
    build = _factory(registry, name, args, width, Layout.VECTOR)
    return Subject("loss", name, Layout.VECTOR, width, build, example, target)


def subjects_for(
    kind: str,
    target: str | Any,
    args: dict[str, Any] | None = None,
    *,
    layouts: Iterable[Layout | str] | None = None,
    in_dim: Any = None,
    plugins: Iterable[str] = (),
) -> list[Subject]:
    """One :class:`Subject` per input layout the part accepts.

    Args:
        kind: registry kind.
        target: a registered name, an import path (``pkg.mod:Class``, ``file.py:Class``)
            or the class/function itself.
        args: constructor arguments beyond the injected ones.
        layouts: restrict/choose the input layouts (default: every declared one; for a
            part that declares none, the first layout a dry run accepts).
        in_dim: the input size (default: a small size per layout).
        plugins: plug-in modules an import path may point into.
    """
    args = dict(args or {})
    registry, name = _registry_with(kind, target, plugins)
    if kind == "loss":
        return [_loss_subject(registry, name, args)]
    chosen = [Layout(layout) for layout in layouts] if layouts else list(accepted_layouts(registry.get(name), kind))
    note = "declared" if chosen else "probed"
    subjects = []
    for layout in chosen or _PROBE_ORDER:
        dim = in_dim if in_dim is not None else DEFAULT_IN_DIM[layout]
        gen = torch.Generator().manual_seed(0)
        example = example_input(layout, dim, batch=BATCH, generator=gen)
        build = _factory(registry, name, args, dim, layout)
        subject = Subject(kind, name, layout, dim, build, example, layout_note=note)
        _mark_dict_io(subject, gen)
        if chosen:
            subjects.append(subject)
            continue
        try:  # a plain module declares nothing: take the first layout it runs on
            probe = subject.built if subject.built is not None else build()  # kept for the checks: it ran once, in eval
            with torch.no_grad():
                out = probe.eval()(example)
            infer_layout(out)
        except Exception:
            continue
        return [subject]
    if not subjects:
        subjects.append(
            Subject(
                kind,
                name,
                Layout.VECTOR,
                DEFAULT_IN_DIM[Layout.VECTOR],
                _factory(registry, name, args, DEFAULT_IN_DIM[Layout.VECTOR], Layout.VECTOR),
                example_input(Layout.VECTOR, DEFAULT_IN_DIM[Layout.VECTOR], batch=BATCH),
                layout_note="no layout worked",
            )
        )
    return subjects
