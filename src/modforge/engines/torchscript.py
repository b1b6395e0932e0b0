"""``torchscript`` — every stage part compiled by TorchScript (delira's TorchScript backend).

Each part is scripted with ``torch.jit.script``; a part that cannot be scripted is traced
on the example batch instead, with a warning saying what tracing loses. A traced part is
traced once per mode (train and eval) when the model will be trained, because a trace
freezes mode-dependent behaviour such as dropout and batch-norm statistics. The parts
share the model's parameters, so the trainer, the optimizer and checkpoints work as in
eager mode; the dict flow and the losses stay in Python. The saved artifact is one
``torch.jit.save`` file (input tensor → logits) with the metadata inside, loadable without
modforge's code; its zip records' CRC-32 are verified before it is loaded.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn as nn

from ..core.integrity import torch_zip_checksums
from ..core.registries import register_engine
from .artifact import ARTIFACT_FORMAT, check_zip_artifact, warn_unverified, write_atomically
from .base import Capabilities, Engine, EngineError, first_sentence
from .common import LogitsOnly, example_from_metadata, example_input, isolated, stage_inputs, training_mode

METADATA_FILE = "modforge.json"
log = logging.getLogger("modforge.engines")

NOT_SCRIPTABLE_NOTE = "Not scriptable by ``torch.jit.script``"
"""What a zoo part's docstring says when it is traced on purpose (and why): no warning then."""


def _says_it_is_traced(part: Any) -> bool:
    return any(NOT_SCRIPTABLE_NOTE in (cls.__doc__ or "") for cls in type(part).__mro__)


TRACING_LOSES = (
    "a trace records one run on the example batch: Python control flow and data-dependent branches are "
    "frozen to the path that run took, and arguments other than the input tensor (e.g. returnt) cannot change"
)


class TracedByMode(nn.Module):
    """A traced part in train mode and in eval mode (a trace freezes the mode it ran in)."""

    def __init__(self, train_trace: nn.Module, eval_trace: nn.Module):
        super().__init__()
        self.train_trace, self.eval_trace = train_trace, eval_trace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.train_trace(x) if self.training else self.eval_trace(x)


@register_engine("torchscript")
class TorchScript(Engine):
    """TorchScript: stage parts scripted (traced, with a warning, where scripting fails).

    Args:
        strategy: 'auto' (script, else trace), 'script' (fail when a part cannot be
            scripted) or 'trace' (trace every part).
    """

    capabilities = Capabilities(can_train=True, multi_device=False, dynamic_shapes=True, needs_example_input=True)
    suffix = ".ts"

    def __init__(self, strategy: Literal["auto", "script", "trace"] = "auto"):
        self.strategy = strategy

    def prepare(self, model: Any, example: dict[str, Any] | None = None, *, train: bool = False) -> Callable:
        if not hasattr(model, "with_parts"):  # a plain module: compile it whole
            return self._compile_whole(model, example, train)
        inputs: dict[str, Any] | None = None
        compiled, traced = {}, []
        for info in model.stage_info:
            part = model.parts[info.name]
            scripted, reason = self._script(part) if self.strategy != "trace" else (None, "strategy 'trace'")
            if scripted is not None:
                compiled[info.name] = scripted
                continue
            if self.strategy == "script":
                raise EngineError(f"torchscript: stage '{info.name}' ({info.kind} '{info.type}') cannot be scripted: {reason}")
            if info.dict_io:
                raise EngineError(
                    f"torchscript: stage '{info.name}' ({info.kind} '{info.type}') takes the whole batch dict and "
                    f"cannot be scripted ({reason}); only tensor-in/tensor-out stages can be traced"
                )
            if inputs is None:
                inputs = stage_inputs(model, _example_batch(example))
            compiled[info.name] = self._trace(part, inputs[info.name], train)
            traced.append(info.name)
            if self.strategy == "auto" and _says_it_is_traced(part):  # expected, and its docstring says why
                log.debug("torchscript: stage '%s' (%s '%s') traced, as its documentation says", info.name, info.kind,
                          info.type)  # fmt: skip
            elif self.strategy == "auto":
                warnings.warn(
                    f"torchscript: stage '{info.name}' ({info.kind} '{info.type}') could not be scripted "
                    f"({reason}); traced it instead — {TRACING_LOSES}",
                    stacklevel=2,
                )
        return model.with_parts(compiled, plain=traced)

    def save(self, runnable: Callable, path: str | os.PathLike, metadata: dict[str, Any]) -> Path:
        example = example_from_metadata(metadata)
        wrapper = LogitsOnly(runnable).eval()
        with torch.no_grad(), _quiet():
            module = torch.jit.trace(wrapper, example, check_trace=False)
        files = {METADATA_FILE: json.dumps(metadata)}
        def write(tmp: str) -> None:
            with _quiet(), torch_zip_checksums():
                torch.jit.save(module, tmp, _extra_files=files)

        return write_atomically(path, write)

    def load(self, path: str | os.PathLike) -> tuple[Callable, dict[str, Any]]:
        path = Path(path)
        if not path.is_file():
            raise EngineError(f"artifact not found: {path}")
        verified = check_zip_artifact(path)  # torch.jit.load never checks the records' CRC-32
        files = {METADATA_FILE: ""}
        try:
            with _quiet():
                module = torch.jit.load(str(path), map_location="cpu", _extra_files=files)
        except (RuntimeError, ValueError) as exc:
            raise EngineError(f"{path} is not a TorchScript file ({first_sentence(exc)})") from None
        try:
            metadata = json.loads(files[METADATA_FILE] or "{}")
        except json.JSONDecodeError:
            metadata = {}
        if metadata.get("format") != ARTIFACT_FORMAT:
            raise EngineError(f"{path} is TorchScript but not a modforge artifact (no {METADATA_FILE} inside)")
        if not verified:
            warn_unverified(path)
        return _LogitsRunnable(module.eval()), metadata

    # ----------------------------------------------------------------- internals
    @staticmethod
    def _script(part: nn.Module) -> tuple[nn.Module | None, str]:
        try:
            with _quiet():
                return torch.jit.script(part), ""
        except Exception as exc:  # noqa: BLE001 - any scripting failure means "trace instead"
            first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            return None, first[:160]

    @staticmethod
    def _trace(part: nn.Module, x: Any, train: bool) -> nn.Module:
        if not isinstance(x, torch.Tensor):
            raise EngineError(f"torchscript: cannot trace a part whose input is {type(x).__name__}, not a tensor")

        def trace(training: bool) -> nn.Module:
            with training_mode(part, training), isolated(part), _quiet():
                return torch.jit.trace(part, x, check_trace=False)

        eval_trace = trace(False)
        return TracedByMode(trace(True), eval_trace) if train else eval_trace

    def _compile_whole(self, model: nn.Module, example: Any, train: bool) -> nn.Module:
        if getattr(model, "traced_on_purpose", None) and self.strategy != "script" and not train:
            return self._trace(model, example_input(example, "torchscript"), False)  # its docstring says why
        scripted, reason = self._script(model) if self.strategy != "trace" else (None, "strategy 'trace'")
        if scripted is not None:
            return scripted
        if self.strategy == "script":
            raise EngineError(f"torchscript: the model cannot be scripted: {reason}")
        warnings.warn(f"torchscript: the model could not be scripted ({reason}); traced it instead — {TRACING_LOSES}",
                      stacklevel=3)
        return self._trace(model, example_input(example, "torchscript"), train)


class _LogitsRunnable:
    """A loaded input → logits module behind the runnable contract (``{"input"}`` → ``{"logits"}``)."""

    def __init__(self, module: nn.Module):
        self.module = module

    def __call__(self, batch: Any) -> dict[str, Any]:
        x = batch["input"] if isinstance(batch, dict) else batch
        with torch.no_grad():
            return {"logits": self.module(torch.as_tensor(x))}


def _example_batch(example: Any) -> dict[str, Any]:
    return example if isinstance(example, dict) else {"input": example_input(example, "torchscript")}


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence PyTorch's per-call notices inside the engine: the deprecation of
    ``torch.jit`` (said once, in the README's engine section) and tracer warnings (the
    engine's own warning says what tracing loses)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.\w+` is deprecated.*")
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        yield
