"""The ``train:`` and ``data:`` sections as typed settings.

Both are validated by the same signature machinery as the parts, so a typo or a wrong
type gets the same precise message (``train.max_epochs: expected int, got 'ten' (in
configs/x.yaml:7)``).
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from ..core.arguments import signature_of
from ..core.config import Config
from ..core.registries import CALLBACKS, DATASETS, ENGINES, METRICS, OPTIMIZERS, SCHEDULERS
from ..data.loader import LoaderSettings
from ..train.distributed import DistributedSettings

__all__ = ["LOADER_KEYS", "TrainSettings", "validate_data_section", "validate_train_section"]

LOADER_KEYS = tuple(a.name for a in signature_of(LoaderSettings).args)


class TrainSettings:
    """How to train.

    Args:
        max_epochs: number of epochs.
        max_steps: stop after this many optimizer steps (None: no limit).
        optimizer: ``{type, args, param_groups}``; default AdamW.
        scheduler: ``{type, args, interval: epoch|step, monitor}``, or None.
        metrics: metric specs computed on validation and test (None: the task's defaults —
            accuracy and loss; eer, min_dcf, accuracy and loss for spoofing).
        monitor: metric that picks ``best.pt`` and drives early stopping (None: the task's choice
            when there is a validation split — ``val_accuracy``, or ``val_eer`` for spoofing — else
            ``val_loss``/``train_loss``).
        callbacks: extra callback specs (early_stopping, lr_monitor, ...).
        checkpoint: arguments of the checkpoint callback (every_n_epochs, every_n_steps, keep_last).
        grad_clip: clip the gradient norm to this value.
        accumulate: micro-batches per optimizer step.
        precision: '32', 'bf16' (autocast, works on CPU) or '16'.
        device: 'auto', 'cpu', 'cuda', 'cuda:1', ...
        num_threads: torch intra-op threads (None: torch's default).
        log_every: steps between reads of the loss on the host (progress, NaN checks).
        nan_guard: stop at the first non-finite loss.
        progress: 'auto' (a bar on a terminal), 'always' or 'never'.
        engine: how the model is executed: eager, torchscript or compile (an engine spec;
            onnx runs inference only — export to it after training).
        async_checkpoints: commit checkpoints in the background (the commit helper process); False: on the training thread.
        distributed: multi-process settings (torchrun): ``{backend: auto|gloo|nccl, timeout: seconds,
            find_unused_parameters: bool}``; ignored with one process.
    """

    def __init__(
        self,
        max_epochs: int = 10,
        max_steps: Optional[int] = None,
        optimizer: Any = None,
        scheduler: Any = None,
        metrics: Any = None,
        monitor: Optional[str] = None,
        callbacks: Any = None,
        checkpoint: Optional[dict[str, Any]] = None,
        grad_clip: Optional[float] = None,
        accumulate: int = 1,
        precision: Literal["32", "bf16", "16"] = "32",
        device: str = "auto",
        num_threads: Optional[int] = None,
        log_every: int = 50,
        nan_guard: bool = True,
        progress: Literal["auto", "always", "never"] = "auto",
        engine: Any = "eager",
        async_checkpoints: bool = True,
        distributed: Optional[dict[str, Any]] = None,
    ):
        self.max_epochs, self.max_steps = max_epochs, max_steps
        self.optimizer = optimizer or {"type": "adamw", "args": {}}
        self.scheduler = scheduler
        self.metrics = metrics  # None: the task's defaults (accuracy and loss for classification)
        self.monitor = monitor
        self.callbacks = callbacks or []
        self.checkpoint = checkpoint or {}
        self.grad_clip, self.accumulate, self.precision = grad_clip, accumulate, precision
        self.device, self.num_threads, self.log_every = device, num_threads, log_every
        self.nan_guard, self.progress, self.engine = nan_guard, progress, engine
        self.async_checkpoints = async_checkpoints
        self.distributed = DistributedSettings(**(distributed or {}))


def _spec_list(value: Any) -> list[Any]:
    return [] if value is None else value if isinstance(value, list) else [value]


def validate_train_section(cfg: Config) -> dict[str, Any]:
    """Check ``train:`` (settings and every part spec in it); return it normalized."""
    where = cfg.where
    section = cfg.data.get("train") or {}
    common = dict(origin_of=where, allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir))
    values = signature_of(TrainSettings).validate(section, path="train", origin_of=where, plain=True)
    if values.get("optimizer") is not None:
        values["optimizer"] = OPTIMIZERS.validate(
            values["optimizer"], path="train.optimizer", extras=("param_groups",), **common
        )
    if values.get("scheduler") is not None:
        spec = SCHEDULERS.validate(
            values["scheduler"], path="train.scheduler", extras=("interval", "monitor"), **common
        )
        interval = spec.get("interval", "epoch")
        if interval not in ("epoch", "step"):
            from ..core.errors import ConfigValueError

            raise ConfigValueError(
                f"expected 'epoch' or 'step', got {interval!r}",
                path="train.scheduler.interval",
                source=where("train.scheduler.interval"),
            )
        values["scheduler"] = spec
    if "metrics" in values:
        values["metrics"] = [
            METRICS.validate(m, path=f"train.metrics.{i}", **common)
            for i, m in enumerate(_spec_list(values["metrics"]))
        ]
    if "callbacks" in values:
        values["callbacks"] = [
            CALLBACKS.validate(c, path=f"train.callbacks.{i}", **common)
            for i, c in enumerate(_spec_list(values["callbacks"]))
        ]
    if values.get("engine") is not None:
        values["engine"] = ENGINES.validate(values["engine"], path="train.engine", **common)
        engine_class = ENGINES.get(values["engine"]["type"])
        capabilities = getattr(engine_class, "capabilities", None)
        if capabilities is not None and not capabilities.can_train:
            from ..core.errors import ConfigValueError

            raise ConfigValueError(
                f"engine '{values['engine']['type']}' runs inference only and cannot train; train with eager, "
                f"torchscript or compile, then `modforge export RUN --engine {values['engine']['type']}`",
                path="train.engine",
                source=where("train.engine"),
            )
    if values.get("checkpoint") is not None:
        spec = CALLBACKS.validate(
            {"type": "checkpoint", "args": values["checkpoint"]}, path="train.checkpoint", **common
        )
        values["checkpoint"] = spec["args"]
    if values.get("distributed") is not None:
        values["distributed"] = signature_of(DistributedSettings).validate(
            values["distributed"], path="train.distributed", origin_of=where, plain=True
        )
        try:
            DistributedSettings(**values["distributed"])
        except ValueError as exc:
            from ..core.errors import ConfigValueError

            raise ConfigValueError(str(exc), path="train.distributed", source=where("train.distributed")) from None
    return values


def validate_data_section(cfg: Config) -> dict[str, Any] | None:
    """Check ``data:`` (the dataset spec and the loader settings); return it normalized."""
    value = cfg.data.get("data")
    if value is None:
        return None
    where = cfg.where
    spec = DATASETS.validate(
        value, path="data", extras=LOADER_KEYS, origin_of=where, allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir)
    )
    loader = {k: spec.pop(k) for k in LOADER_KEYS if k in spec}
    spec.update(signature_of(LoaderSettings).validate(loader, path="data", origin_of=where, plain=True))
    return spec
