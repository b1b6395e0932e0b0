"""``build_model``: a ``model:`` config section → one wired :class:`ModularModel`.

For each stage in order the builder

1. finds the layout the part accepts (its ``accepts``; for a part that declares none,
   the default of its kind: heads and losses take vectors, the rest anything) and, if
   the previous output has another layout, inserts a documented adapter
   (:mod:`.adapters`) — or stops with an error naming both parts and both layouts;
2. builds the part with the previous output size as ``in_dim`` (plus ``num_classes``
   and ``in_layout`` where the part's signature asks for them);
3. runs a tiny example through it (eval mode, no gradients) to check it works on that
   input and to measure ``out_dim`` when the part does not declare it — or to catch a
   declared ``out_dim`` that is wrong.

So a mistake is found when the model is built, with the stage named, never as a shape
error inside torch at the first training step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.nn as nn

from ..components.layouts import Layout, example_input, infer_layout, out_dim_of
from ..core.config import Config
from ..core.downloads import no_downloads
from ..core.errors import ConfigError
from ..core.plugins import load_config_plugins
from ..core.registries import LOSSES, REGISTRIES
from .adapters import make_adapter
from .errors import ModelBuildError
from .init import apply_init, parse_init
from .introspect import accepted_layouts, declared_out_dim, is_dict_io, output_key, takes_returnt
from .modular import LossInfo, ModularModel, StageInfo, describe_value
from .spec import parse_model_section

__all__ = ["build_model", "fit_layout"]


def fit_layout(source: Layout, accepts: Sequence[Layout], in_dim: Any) -> tuple[Layout, nn.Module | None, Any] | None:
    """The layout a part will see, the adapter to get there and the new ``in_dim``.

    An accepted layout equal to ``source`` wins; otherwise the first accepted layout an
    adapter reaches. ``None`` when the part cannot take ``source`` at all.
    """
    if not accepts or source in accepts:
        return source, None, in_dim
    for target in accepts:
        made = make_adapter(source, target, in_dim)
        if made is not None:
            adapter, dim = made
            return target, adapter, dim
    return None


def _resolve(registry: Any, spec: dict[str, Any], path: str, common: dict[str, Any]) -> Any:
    """The class or function a stage/loss spec names (before building it), located for errors."""
    obj, _sig = registry.resolve(
        spec["type"],
        allowed_modules=common["allowed_modules"],
        base_dir=common["base_dir"],
        path=f"{path}.type",
        source=common["origin_of"](f"{path}.type"),
    )
    return obj


def _dry_run(module: nn.Module, *args: Any) -> Any:
    """Call ``module`` once in eval mode without gradients, restoring its mode after."""
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            return module(*args)
    finally:
        module.train(was_training)


def _first_layout(layout: Any, input_shape: Sequence[int] | None, first_accepts: Sequence[Layout]) -> Layout:
    if layout is not None:
        try:
            return Layout(layout)
        except ValueError:
            raise ConfigError(f"unknown input layout {layout!r}; one of {', '.join(v.value for v in Layout)}") from None
    if first_accepts:
        return first_accepts[0]
    if input_shape is not None:
        return {1: Layout.VECTOR, 2: Layout.SEQUENCE, 3: Layout.IMAGE}.get(len(input_shape), Layout.VECTOR)
    return Layout.VECTOR


def _spatial(layout: Layout, input_shape: Sequence[int] | None) -> tuple[int, ...] | None:
    if input_shape is None:
        return None
    shape = tuple(int(s) for s in input_shape)
    if layout is Layout.IMAGE and len(shape) == 3:
        return shape[1:]
    if layout is Layout.SEQUENCE and len(shape) == 2:
        return shape[:1]
    if layout is Layout.CHANNELS and len(shape) == 2:
        return shape[1:]
    if layout is Layout.WAVEFORM and len(shape) == 1:
        return shape
    return None


def _section(model_cfg: Any) -> tuple[Mapping[str, Any], Any, list[str], str | None, dict]:
    """(model section, origin function, plug-ins, base dir, plug-in sources) of whatever was
    passed; a mapping vouches for no plug-in (see :mod:`modforge.core.plugins`)."""
    if isinstance(model_cfg, Config):
        return (model_cfg.data.get("model") or {}, model_cfg.where, model_cfg.plugins, str(model_cfg.base_dir),
                model_cfg.plugin_sources)  # fmt: skip
    if isinstance(model_cfg, Mapping) and "model" in model_cfg:
        plugins = model_cfg.get("plugins") or []
        return model_cfg["model"] or {}, None, [plugins] if isinstance(plugins, str) else list(plugins), None, {}
    return model_cfg, None, [], None, {}


def build_model(
    model_cfg: Any,
    *,
    in_dim: int | Sequence[int],
    num_classes: int | None = None,
    layout: Layout | str | None = None,
    input_shape: Sequence[int] | None = None,
    plugins: Iterable[str] = (),
    base_dir: str | None = None,
    sample_rate: int | None = None,
    scores: bool = False,
    init_weights: bool = True,
    label_shape: tuple[int, ...] = (),
) -> ModularModel:
    """Assemble the parts named in ``model_cfg`` into one module.

    Args:
        model_cfg: the ``model:`` section (a mapping), a whole config mapping, or a
            :class:`~modforge.core.config.Config`.
        in_dim: size of the input (features of a vector/sequence, channels of an image).
        num_classes: passed to every part and loss that asks for it.
        layout: the input's layout; default: the first stage's first accepted layout,
            else guessed from ``input_shape``.
        input_shape: one sample's shape (e.g. ``(1, 8, 8)``), sizing the dry runs.
        plugins: plug-in modules whose objects a ``type:`` may name by import path.
        base_dir: directory relative plug-in paths are resolved against.
        sample_rate: audio sample rate, passed to every part that asks for it (frontends).
        scores: add ``score`` (a detection score, higher = positive class) to the model's
            dict output, from the first loss that defines ``score()``.
        label_shape: one sample's label shape for the losses' dry runs: ``()`` for a class
            index, ``(H, W)`` for a per-pixel mask (a segmentation task).
        init_weights: load the weights ``model.init`` names (:mod:`.init`); False when a
            checkpoint's weights replace them anyway (testing, resuming): parts then build
            without downloading anything (:func:`~modforge.core.downloads.no_downloads`). What
            was loaded is in the model's ``init_records``.

    Raises:
        ConfigError: any problem, naming the stage (``model.head``...) and the cause.
    """
    with contextlib.nullcontext() if init_weights else no_downloads():
        return _assemble(model_cfg, in_dim=in_dim, num_classes=num_classes, layout=layout, input_shape=input_shape,
                         plugins=plugins, base_dir=base_dir, sample_rate=sample_rate, scores=scores,
                         init_weights=init_weights, label_shape=label_shape)  # fmt: skip


def _assemble(model_cfg: Any, *, in_dim: int | Sequence[int], num_classes: int | None, layout: Layout | str | None,
              input_shape: Sequence[int] | None, plugins: Iterable[str], base_dir: str | None, sample_rate: int | None,
              scores: bool, init_weights: bool, label_shape: tuple[int, ...]) -> ModularModel:  # fmt: skip
    """:func:`build_model`'s work."""
    section, where, cfg_plugins, cfg_base, sources = _section(model_cfg)
    allowed = [*cfg_plugins, *plugins]
    base_dir = base_dir or cfg_base
    load_config_plugins(cfg_plugins, sources=sources, origin="the config's plugins:")
    where = where or (lambda _p: None)
    stages, losses = parse_model_section(section, origin_of=where)
    common = dict(origin_of=where, allowed_modules=allowed, base_dir=base_dir)

    first_obj = _resolve(REGISTRIES[stages[0].kind], stages[0].spec, stages[0].path, common)
    in_layout = _first_layout(layout, input_shape, accepted_layouts(first_obj, stages[0].kind))
    generator = torch.Generator().manual_seed(0)
    example = example_input(in_layout, in_dim, spatial=_spatial(in_layout, input_shape), generator=generator)
    outputs: dict[str, tuple[Layout, Any, Any]] = {"input": (in_layout, in_dim, example)}
    inputs: dict[str, Any] = {}
    label = torch.randint(0, num_classes, (2, *label_shape), generator=generator) if num_classes else None
    dry_batch: dict[str, Any] = {"input": example}  # one batch through every stage, as in forward
    if label is not None:
        dry_batch["label"] = label
    built: list[tuple[StageInfo, nn.Module, nn.Module | None]] = []
    for stage in stages:
        src_name = stage.prev or "input"
        src_layout, src_dim, src_example = outputs[src_name]
        registry = REGISTRIES[stage.kind]
        obj = _resolve(registry, stage.spec, stage.path, common)
        accepts = accepted_layouts(obj, stage.kind)
        fitted = fit_layout(src_layout, accepts, src_dim)
        if fitted is None:
            raise ModelBuildError(
                f"{stage.kind} '{stage.spec['type']}' accepts {', '.join(str(a) for a in accepts)}, but "
                f"{_producer(src_name, built)} produces {src_layout} and no adapter converts between them"
                f"{_fitting_parts_hint(registry, stage.kind, src_layout, src_dim)}",
                path=stage.path,
                source=where(stage.path),
            )
        target, adapter, dim = fitted
        part = registry.build(
            stage.spec,
            path=stage.path,
            in_dim=dim,
            num_classes=num_classes,
            in_layout=target,
            sample_rate=sample_rate,
            **common,
        )
        if not isinstance(part, nn.Module):
            raise ModelBuildError(
                f"{stage.kind} '{stage.spec['type']}' built a {type(part).__name__}, not a torch.nn.Module",
                path=stage.path,
                source=where(stage.path),
            )
        dict_io = is_dict_io(part)
        arg = adapter(src_example) if adapter is not None else src_example
        if dict_io:
            if stage is stages[-1] and stage.kind == "head":
                dry_batch["embedding"] = dry_batch["features"] = arg  # what ModularModel hands its head in forward
            arg = dry_batch
        try:
            out = _dry_run(part, arg)
            if dict_io:
                out = _dict_io_output(out, dry_batch, part, stage, where)
            declared_layout = getattr(part, "produces", None)
            out_layout = Layout(declared_layout) if declared_layout else infer_layout(out, hint=target)
            measured = out_dim_of(out, out_layout)
        except ConfigError:
            raise
        except Exception as exc:
            raise ModelBuildError(
                f"{stage.kind} '{stage.spec['type']}' failed its dry run on {describe_value(arg)} ({target}): "
                f"{type(exc).__name__}: {exc}",
                path=stage.path,
                source=where(stage.path),
            ) from exc
        declared = declared_out_dim(part)
        if declared is not None and declared != measured:
            raise ModelBuildError(
                f"{stage.kind} '{stage.spec['type']}' declares out_dim {declared} but its output "
                f"{describe_value(out)} has {measured} ({out_layout})",
                path=stage.path,
                source=where(stage.path),
            )
        info = StageInfo(
            name=stage.name,
            kind=stage.kind,
            type=stage.spec["type"],
            prev=stage.prev,
            in_layout=target,
            out_layout=out_layout,
            in_dim=dim,
            out_dim=measured,
            dict_io=dict_io,
            output_key=output_key(part, stage.kind) if dict_io else None,
            takes_returnt=takes_returnt(part),
            has_intermediates=callable(getattr(part, "forward_intermediates", None)),
        )
        built.append((info, part, adapter))
        outputs[stage.name] = (out_layout, measured, out)
        inputs[stage.name] = arg
        dry_batch[stage.name] = out
    loss_parts = _build_losses(losses, built, outputs, inputs, num_classes, label, common)
    model = ModularModel(built, loss_parts, num_classes, scores=scores)
    if model.classifier_loss is None:  # a margin loss that owns its classifier sizes its own logits
        last = next(stage for stage in stages if stage.name == built[-1][0].name)
        _check_class_count(built[-1][0], outputs[last.name][2], num_classes, last, "stages" in section, where)
    model.input_layout = in_layout  # what the model takes, before any adapter of the first stage
    model.init_records = []
    if init_weights and section.get("init") is not None:
        model.init_records = apply_init(model, parse_init(section["init"], origin_of=where, base_dir=base_dir))
    return model


def _check_class_count(info: StageInfo, logits: Any, num_classes: int | None, stage: Any, general: bool,
                       where: Any) -> None:  # fmt: skip
    """Refuse a model whose logits do not have one column per class — before any training step
    (a backbone of 256 features with ``head: null`` would otherwise train as a 256-class model and
    fail in the first confusion matrix)."""
    if num_classes is None or not isinstance(logits, torch.Tensor) or logits.dim() != 2:
        return
    width = int(logits.shape[1])
    if width == num_classes:
        return
    part = f"{info.kind} '{info.type}'"
    if info.kind == "head":
        message = (f"{part} outputs {width} logits per sample but the data has {num_classes} classes; a head gets "
                   "num_classes from the data (its num_classes argument) — make it use that")  # fmt: skip
        path = stage.path
    else:
        message = (f"the model has no head, so its logits are the output of {part}: {width} values per sample, "
                   f"but the data has {num_classes} classes; add a head (e.g. 'head: linear'), use a backbone that "
                   "classifies (one taking num_classes), or a loss that owns its classifier (am_softmax...)")  # fmt: skip
        path = stage.path if general else "model.head"
    raise ModelBuildError(message, path=path, source=where(path) or where(stage.path))


def _dict_io_output(returned: Any, batch: dict[str, Any], part: nn.Module, stage: Any, where: Any) -> Any:
    """The output of a dict-in/dict-out (UP-style) part's dry run, or one clear error when the
    part broke that contract: it must return the batch dict (or the keys it adds) with its
    ``output_key`` (``logits`` for a head, ``features`` otherwise) set to its output."""
    key = output_key(part, stage.kind)
    label = f"{stage.kind} '{stage.spec['type']}' is dict_io (batch dict in, batch dict out)"
    if not isinstance(returned, Mapping):
        raise ModelBuildError(
            f"{label}: its forward must return the batch dict with {key!r} set, but it returned "
            f"{describe_value(returned) if returned is not None else 'None'} (end forward with 'return input')",
            path=stage.path,
            source=where(stage.path),
        )
    if returned is not batch:
        batch.update(returned)
    if batch.get(key) is None:
        written = sorted(k for k in returned if k not in ("input", "label"))
        raise ModelBuildError(
            f"{label}: it must write its output to batch[{key!r}] (set output_key = '...' to read another key), "
            f"but {key!r} is {'None' if key in batch else 'missing'}; keys it returned: {', '.join(map(str, written)) or 'none'}",
            path=stage.path,
            source=where(stage.path),
        )
    return batch[key]


def _fitting_parts_hint(registry: Any, kind: str, layout: Layout, dim: Any) -> str:
    """``; necks that take vector [B, D]: identity, … (e.g. --neck identity)`` — what would fit
    instead (and, for a neck, that it may be left out)."""
    fits = [name for name in registry.list() if fit_layout(layout, accepted_layouts(registry.get(name), kind), dim)]
    if not fits:
        return ""
    shown = ", ".join(fits[:5]) + (", …" if len(fits) > 5 else "")
    hint = f"; {kind}s that take {layout}: {shown} (e.g. --{kind} {fits[0]})"
    return hint + (", or leave the neck out (model.neck=null)" if kind == "neck" else "")


def _producer(name: str, built: list[tuple[StageInfo, nn.Module, Any]]) -> str:
    if name == "input":
        return "the input"
    info = next(i for i, _, _ in built if i.name == name)
    return f"{info.kind} '{info.type}'"


def _build_losses(losses, built, outputs, inputs, num_classes, label, common) -> list[tuple[LossInfo, nn.Module]]:
    """Build the configured losses (``in_dim`` = size of what each reads) and dry-run them."""
    last = built[-1][0]
    examples = {"logits": outputs[last.name][2]}
    examples["embedding"] = examples["features"] = inputs[last.name] if last.kind == "head" else examples["logits"]
    dims = {"logits": last.out_dim}
    dims["embedding"] = dims["features"] = last.in_dim if last.kind == "head" else last.out_dim
    out = []
    for spec in losses:
        obj = _resolve(LOSSES, spec.spec, spec.path, common)
        input_key = getattr(obj, "input_key", "logits")
        target_key = getattr(obj, "target_key", "label")
        fn = LOSSES.build(
            spec.spec, path=spec.path, in_dim=dims.get(input_key, last.out_dim), num_classes=num_classes, **common
        )
        example = examples.get(input_key)
        if label is not None and target_key == "label" and isinstance(example, torch.Tensor):
            try:
                value = _dry_run(fn, example, label)
            except Exception as exc:
                raise ModelBuildError(
                    f"loss '{spec.spec['type']}' failed its dry run on {input_key} {describe_value(example)}: "
                    f"{type(exc).__name__}: {exc}",
                    path=spec.path,
                    source=common["origin_of"](spec.path),
                ) from exc
            if not isinstance(value, torch.Tensor) or value.numel() != 1:
                raise ModelBuildError(
                    f"loss '{spec.spec['type']}' returned {describe_value(value)}, not a scalar tensor",
                    path=spec.path,
                    source=common["origin_of"](spec.path),
                )
        out.append((LossInfo(spec.key, spec.spec["type"], spec.weight, input_key, target_key), fn))
    return out
