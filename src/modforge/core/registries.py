"""One registry per kind of part, and the ``register_<kind>`` decorators.

Each registry knows which constructor arguments its builder injects, so those are never
asked of the user (and never become command-line flags):

=========== ================================= ========================================
kind        registry                          injected by the builder
=========== ================================= ========================================
frontend    ``FRONTENDS``                     ``in_dim``, ``in_layout``, ``sample_rate``
backbone    ``BACKBONES``                     ``in_dim``, ``in_layout``, ``num_classes``
neck        ``NECKS``                         ``in_dim``, ``in_layout``
head        ``HEADS``                         ``in_dim``, ``in_layout``, ``num_classes``
loss        ``LOSSES``                        ``in_dim``, ``num_classes``
dataset     ``DATASETS``                      ``seed``
metric      ``METRICS``                       ``num_classes``, ``class_names``
optimizer   ``OPTIMIZERS``                    ``params``
scheduler   ``SCHEDULERS``                    ``optimizer``, ``total_steps``, ``warmup_unit``
engine      ``ENGINES``                       —
callback    ``CALLBACKS``                     ``monitor``, ``mode`` (defaults from ``train.monitor``)
algorithm   ``ALGORITHMS``                    ``model``, ``num_classes``, ``seed``
model       ``MODELS``                        ``in_dim``, ``num_classes``
augmentation ``AUGMENTATIONS``                ``sample_rate``
checkpoint_format ``CHECKPOINT_FORMATS``      — (see :mod:`.weight_formats`)
trainer     ``TRAINERS``                      — (``Trainer`` subclasses: ``train.trainer``)
task        ``TASKS``                         — (what a run is for: ``task:``)
extension   ``EXTENSIONS``                    — (run features, ``train.<name>``)
=========== ================================= ========================================
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import UnknownComponentError
from .registry import Registry

T = TypeVar("T")
MODULE = "torch.nn:Module"
"""What every model part derives from (a function that builds one is also accepted)."""

FRONTENDS = Registry("frontend", injected=("in_dim", "in_layout", "sample_rate"), base=MODULE)
BACKBONES = Registry("backbone", injected=("in_dim", "in_layout", "num_classes"), base=MODULE)
NECKS = Registry("neck", injected=("in_dim", "in_layout"), base=MODULE)
HEADS = Registry("head", injected=("in_dim", "in_layout", "num_classes"), base=MODULE)
LOSSES = Registry("loss", injected=("in_dim", "num_classes"), base=MODULE)
DATASETS = Registry("dataset", injected=("seed",))
METRICS = Registry("metric", injected=("num_classes", "class_names"))
OPTIMIZERS = Registry("optimizer", injected=("params",))
SCHEDULERS = Registry("scheduler", injected=("optimizer", "total_steps", "warmup_unit"))
ENGINES = Registry("engine")
CALLBACKS = Registry("callback", injected=("monitor", "mode"))
ALGORITHMS = Registry("algorithm", injected=("model", "num_classes", "seed"))
MODELS = Registry("model", injected=("in_dim", "num_classes"))
AUGMENTATIONS = Registry("augmentation", injected=("sample_rate",))
CHECKPOINT_FORMATS = Registry("checkpoint_format")
TRAINERS = Registry("trainer", base="modforge.train.trainer:Trainer")
TASKS = Registry("task", base="modforge.tasks.base:Task")
EXTENSIONS = Registry("extension", base="modforge.train.extension:RunExtension")

REGISTRIES: dict[str, Registry] = {
    r.kind: r
    for r in (
        FRONTENDS,
        BACKBONES,
        NECKS,
        HEADS,
        LOSSES,
        DATASETS,
        METRICS,
        OPTIMIZERS,
        SCHEDULERS,
        ENGINES,
        CALLBACKS,
        ALGORITHMS,
        MODELS,
        AUGMENTATIONS,
        CHECKPOINT_FORMATS,
        TRAINERS,
        TASKS,
        EXTENSIONS,
    )
}
"""Every registry, by kind (in the order ``modforge list`` shows them)."""


def registry_for(kind: str) -> Registry:
    """The registry of ``kind``; plurals (``backbones``) are accepted.

    Raises:
        UnknownComponentError: an unknown kind, with the closest ones.
    """
    if kind in REGISTRIES:
        return REGISTRIES[kind]
    singular = kind[:-1] if kind.endswith("s") else kind
    if singular in REGISTRIES:
        return REGISTRIES[singular]
    close = difflib.get_close_matches(kind, list(REGISTRIES), n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise UnknownComponentError(f"no kind of part named {kind!r}{hint} (kinds: {', '.join(REGISTRIES)})")


def _decorator_for(registry: Registry) -> Callable[..., Any]:
    def register(name: str | Callable | None = None, *, force: bool = False) -> Any:
        return registry.register(name, force=force)

    register.__name__ = f"register_{registry.kind}"
    register.__qualname__ = register.__name__
    register.__doc__ = (
        f"Register a class or function as a {registry.kind}.\n\n"
        f'Use ``@register_{registry.kind}("name")``, ``@register_{registry.kind}()`` or bare '
        f"``@register_{registry.kind}``; the name defaults to the object's ``__name__``. "
        "Pass ``force=True`` to replace an existing entry of another definition."
    )
    return register


register_frontend = _decorator_for(FRONTENDS)
register_backbone = _decorator_for(BACKBONES)
register_neck = _decorator_for(NECKS)
register_head = _decorator_for(HEADS)
register_loss = _decorator_for(LOSSES)
register_dataset = _decorator_for(DATASETS)
register_metric = _decorator_for(METRICS)
register_optimizer = _decorator_for(OPTIMIZERS)
register_scheduler = _decorator_for(SCHEDULERS)
register_engine = _decorator_for(ENGINES)
register_callback = _decorator_for(CALLBACKS)
register_algorithm = _decorator_for(ALGORITHMS)
register_model = _decorator_for(MODELS)
register_augmentation = _decorator_for(AUGMENTATIONS)
register_checkpoint_format = _decorator_for(CHECKPOINT_FORMATS)
register_trainer = _decorator_for(TRAINERS)
register_task = _decorator_for(TASKS)
register_extension = _decorator_for(EXTENSIONS)

__all__ = [
    "ALGORITHMS",
    "AUGMENTATIONS",
    "BACKBONES",
    "CALLBACKS",
    "CHECKPOINT_FORMATS",
    "DATASETS",
    "ENGINES",
    "EXTENSIONS",
    "FRONTENDS",
    "HEADS",
    "LOSSES",
    "METRICS",
    "MODELS",
    "NECKS",
    "OPTIMIZERS",
    "REGISTRIES",
    "SCHEDULERS",
    "TASKS",
    "TRAINERS",
    "registry_for",
    *(f"register_{kind}" for kind in REGISTRIES),
]
