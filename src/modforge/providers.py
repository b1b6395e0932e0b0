"""Which modules hold modforge's built-in parts, per registry.

The registries (in :mod:`modforge.core`) import nothing from the layers above them;
this table, at the package root, tells each registry which modules to import the first
time its contents are asked for.  A new built-in family is one line here.
"""

from __future__ import annotations

from .core.registries import REGISTRIES

BUILTIN_PROVIDERS: dict[str, tuple[str, ...]] = {
    "frontend": ("modforge.components.frontends",),
    "backbone": ("modforge.components.backbones",),
    "neck": ("modforge.components.necks",),
    "head": ("modforge.components.heads",),
    "loss": ("modforge.components.losses",),
    "dataset": ("modforge.data.digits", "modforge.data.synthetic", "modforge.data.audio.datasets", "modforge.continual.benchmarks",
                "modforge.data.detection.coco", "modforge.data.images.corpora", "modforge.data.audio.asvspoof2021"),
    "metric": ("modforge.train.metrics", "modforge.tasks.spoofing.metrics", "modforge.tasks.spoofing.sasv_metrics",
               "modforge.tasks.detection.metrics"),
    "callback": ("modforge.train.callbacks",),
    "optimizer": ("modforge.train.optimizers",),
    "scheduler": ("modforge.train.schedulers", "modforge.train.warmup", "modforge.train.triangular"),
    "augmentation": ("modforge.data.audio.augment", "modforge.data.audio.codecs", "modforge.data.audio.rooms",
                     "modforge.data.audio.channel_augment"),
    "algorithm": ("modforge.continual.algorithms",),
    "checkpoint_format": ("modforge.model.formats", "modforge.components.backbones", "modforge.components.frontends"),
    "trainer": ("modforge.train.trainers",),
    "task": ("modforge.tasks.base", "modforge.tasks.spoofing.task", "modforge.tasks.detection.task",
             "modforge.tasks.continual.task"),
    "extension": ("modforge.train.ema", "modforge.train.qat", "modforge.experiment.distillation"),
    "engine": ("modforge.engines.eager", "modforge.engines.torchscript", "modforge.engines.compile", "modforge.engines.onnx"),
}


def wire_providers() -> None:
    """Tell every registry where its built-in parts are defined (idempotent)."""
    for kind, modules in BUILTIN_PROVIDERS.items():
        for module in modules:
            REGISTRIES[kind].add_provider(module)
