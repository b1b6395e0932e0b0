"""The engine contract: how a built model is executed, saved and loaded.

An engine turns a model into a *runnable* with :meth:`Engine.prepare`. The trainer and
the predictor only call runnables, so a model trains and predicts the same way under
every engine:

* a trainable engine (``capabilities.can_train``) returns an ``nn.Module`` with the
  model's own contract — ``runnable(batch_dict)`` → output dict with ``logits``,
  ``embedding``/``features`` and the losses; ``runnable(x, returnt=...)`` for tensors —
  that **shares the model's parameters and buffers**, so the optimizer, gradient
  clipping and checkpoints keep working on the model itself;
* an inference-only engine returns any callable taking ``{"input": x}`` (a tensor or a
  numpy array) and returning ``{"logits": ...}`` of the same kind.

:meth:`Engine.save` writes the runnable in the engine's own format together with a
metadata dict (see :mod:`.artifact`); :meth:`Engine.load` reads both back. A user adds
an engine with ``@mf.register_engine("name")`` on a subclass.
"""

from __future__ import annotations

import abc
import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from ..core.errors import UsageError

__all__ = ["Capabilities", "Engine", "EngineError", "first_sentence"]


class EngineError(UsageError):
    """An engine cannot do what was asked (train, export this part, load this file...)."""


def first_sentence(exc: BaseException, limit: int = 160) -> str:
    """A library's error as one short line: whitespace folded, ANSI colour codes removed, cut
    after its first sentence (torch appends paragraphs of advice meant for its developers)."""
    import re

    text = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).split()) or type(exc).__name__
    end = text.find(". ")
    text = text[: end + 1] if end > 0 else text
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What an engine can do, declared up front so callers refuse or fall back early.

    Attributes:
        can_train: gradients flow through the runnable (the trainer can use it).
        multi_device: the runnable can be replicated across devices/processes (DDP).
        dynamic_shapes: one prepared runnable accepts any batch size (and sequence length).
        needs_example_input: :meth:`Engine.prepare` needs an example batch (tracing,
            compilation, export).
        prepared_under_autocast: what :meth:`Engine.prepare` makes is specialised to the autocast
            state it runs under (torch.compile's graphs), so a trainer prepares it under the run's
            own autocast; an engine that would bake the casts into its artifact (tracing) is
            prepared outside it.
    """

    can_train: bool
    multi_device: bool
    dynamic_shapes: bool
    needs_example_input: bool
    prepared_under_autocast: bool = False


class Engine(abc.ABC):
    """Base class of every engine (see the module docstring for the contract).

    Subclasses set :attr:`capabilities` and :attr:`suffix` and implement :meth:`prepare`,
    :meth:`save` and :meth:`load`. Their ``__init__`` arguments are the engine's options
    (``train.engine: {type: compile, args: {mode: max-autotune}}``).
    """

    capabilities: ClassVar[Capabilities]
    suffix: ClassVar[str] = ""  # the artifact's file suffix, e.g. ".onnx"
    registered_as: str | None = None  # set by :func:`~modforge.engines.build_engine`

    def arrange(self, model: Any) -> None:
        """Change ``model`` in place before training replicates it across processes (default:
        nothing; ``eager`` and ``compile`` lay the weights out as their ``memory_format``).
        :meth:`prepare` must still work on a model that was not arranged."""
        return None

    @property
    def name(self) -> str:
        """The name it was built by, else the class name."""
        return self.registered_as or type(self).__name__

    @abc.abstractmethod
    def prepare(self, model: Any, example: dict[str, Any] | None = None, *, train: bool = False) -> Callable:
        """The runnable for ``model``. ``example`` is one batch dict (needed when
        ``capabilities.needs_example_input``); ``train`` says the runnable will be trained."""

    @abc.abstractmethod
    def save(self, runnable: Callable, path: str | os.PathLike, metadata: dict[str, Any]) -> Path:
        """Write ``runnable`` and ``metadata`` to ``path`` (one self-describing file)."""

    @abc.abstractmethod
    def load(self, path: str | os.PathLike) -> tuple[Callable, dict[str, Any]]:
        """Read what :meth:`save` wrote: ``(runnable, metadata)``."""

    def single_device_note(self, device_type: str, visible_devices: int, world_size: int) -> str | None:
        """The warning to give when several devices or processes are available but this
        engine cannot use them (the caller then trains on one device); None otherwise."""
        if self.capabilities.multi_device:
            return None
        if world_size > 1:
            return (
                f"engine '{self.name}' cannot train across {world_size} processes (its modules cannot be "
                "replicated by DistributedDataParallel); training with the eager engine instead — export to "
                f"{self.name} afterwards with `modforge export RUN --engine {self.name}`, or train with compile"
            )
        if device_type == "cuda" and visible_devices > 1:
            return f"engine '{self.name}' cannot use several devices ({visible_devices} visible); training on one"
        return None

    def refuse_training(self) -> None:
        """Raise :class:`EngineError` unless this engine can train (called before any work)."""
        if not self.capabilities.can_train:
            raise EngineError(
                f"engine '{self.name}' runs inference only and cannot train; train with eager, "
                f"torchscript or compile, then `modforge export RUN --engine {self.name}`"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
