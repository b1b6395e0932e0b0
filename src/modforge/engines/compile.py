"""``compile`` — ``torch.compile`` (TorchDynamo + a backend, Inductor by default).

The whole model is compiled, dict flow and losses included; the compiled module shares
the model's parameters. Compilation is lazy in PyTorch, so :meth:`Compile.prepare` runs
the example batch once (forward and, for training, backward; in train and eval mode)
without leaving a trace on the run (RNG, batch-norm statistics and gradients restored).
If that fails, the engine falls back to eager **with a warning** — never silently.
Artifacts are the eager weights plus metadata; loading compiles the rebuilt model again.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any, Literal, Optional

import torch

from ..core.registries import register_engine
from .base import Capabilities
from .common import MemoryFormat, apply_memory_format, example_from_metadata, isolated, training_mode
from .weights import WeightsEngine

Mode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


@register_engine("compile")
class Compile(WeightsEngine):
    """torch.compile, falling back to eager with a warning when compilation fails.

    Args:
        mode: torch.compile's mode ('default', 'reduce-overhead', 'max-autotune', ...).
        backend: the compiler backend ('inductor'; 'aot_eager' and 'eager' compile faster
            and help find whether a failure is in tracing or in code generation).
        fullgraph: fail instead of splitting the graph where Python code cannot be traced.
        dynamic: compile for dynamic shapes up front (None: PyTorch decides, recompiling
            once when a shape changes).
        fallback_random: random operations (dropout) draw from PyTorch's generator exactly
            as in eager mode, so a compiled run reproduces (and resumes) an eager one;
            False lets Inductor generate its own random numbers (a little faster, other numbers).
        memory_format: ``channels_last`` lays the model's 4-D weights out NHWC before compiling
            (see the ``eager`` engine); ``contiguous`` (default) keeps them as built.
    """

    capabilities = Capabilities(can_train=True, multi_device=True, dynamic_shapes=True, needs_example_input=True,
                                prepared_under_autocast=True)  # fmt: skip

    def __init__(self, mode: Mode = "default", backend: str = "inductor", fullgraph: bool = False,
                 dynamic: Optional[bool] = None, fallback_random: bool = True,
                 memory_format: MemoryFormat = "contiguous"):  # fmt: skip
        self.mode, self.backend, self.fullgraph, self.dynamic = mode, backend, fullgraph, dynamic
        self.fallback_random, self.memory_format = fallback_random, memory_format

    def prepare(self, model: Any, example: dict[str, Any] | None = None, *, train: bool = False) -> Callable:
        if self.fallback_random:
            import torch._inductor.config as inductor_config

            inductor_config.fallback_random = True  # read at every (re)compilation, so set for the process
        apply_memory_format(model, self.memory_format)
        try:
            compiled = torch.compile(
                model,
                mode=None if self.mode == "default" else self.mode,
                backend=self.backend,
                fullgraph=self.fullgraph,
                dynamic=self.dynamic,
            )
            if example is None:
                return compiled
            self._warm_up(model, compiled, example, train)
        except Exception as exc:  # noqa: BLE001 - any compiler failure: fall back, loudly
            first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
            warnings.warn(
                f"compile: torch.compile (backend '{self.backend}') failed on the example batch "
                f"({type(exc).__name__}: {first[:200]}); running the model in eager mode instead",
                stacklevel=2,
            )
            return model
        return compiled

    def load(self, path: str | os.PathLike) -> tuple[Callable, dict[str, Any]]:
        model, metadata = super().load(path)  # compiled again, warmed up on an example of the recorded input
        example = {"input": example_from_metadata(metadata)} if metadata.get("input", {}).get("shape") else None
        return self.prepare(model, example), metadata

    @staticmethod
    def _warm_up(model: Any, compiled: Callable, example: dict[str, Any], train: bool) -> None:
        with isolated(model):
            if train:
                with training_mode(model, True):
                    out = compiled(example)
                    loss = out.get("loss") if isinstance(out, dict) else None
                    if loss is not None and loss.requires_grad:
                        loss.backward()
            with training_mode(model, False), torch.no_grad():
                compiled(example)
