"""``compile`` — ``torch.compile`` (TorchDynamo + a backend, Inductor by default).

The whole model is compiled, dict flow and losses included; the compiled module shares
the model's parameters. Compilation is lazy in PyTorch, so :meth:`Compile.prepare` runs
the example batch once (forward and, for training, backward; in train and eval mode)
without leaving a trace on the run (RNG, batch-norm statistics and gradients restored).
If that fails, the engine falls back to eager **with a warning** — never silently.
Artifacts are the eager weights plus metadata; loading compiles the rebuilt model again.

CUDA graphs (``mode: reduce-overhead`` or ``max-autotune`` on a CUDA model): the step's kernels
are replayed from a recording instead of launched one by one from Python, which removes most of
the host's work per step — what limits a small network trained in large batches on a fast GPU.
A replay writes its outputs into the same memory as the last one, so a loss or logits kept from
an earlier step (the trainer's per-batch losses, an evaluation's scores) would silently change, or
raise when read. The runnable therefore hands back copies of its tensor outputs
(:class:`OwnedOutputs`: one small copy kernel per output, against the ~100 launches a replay saves).
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
        emulate_precision_casts: in 16 bits (``precision`` ``bf16``, ``16``, ``-true``) Inductor
            rounds each operation's result to 16 bits as eager mode does (its
            ``emulate_precision_casts``). Left to itself it keeps float32 between fused operations
            but stores 16-bit values for the backward pass, so a gradient that compares the
            two — a maximum's (``amax``) after a fused operation — can find no maximum and is 0/0,
            NaN from the first step (pytorch#151352; measured on the CPU in bf16 with the airbench
            network; LCNN and RawNet2 stayed finite either way). False: Inductor's own rounding
            (a little faster, other numbers, and where it bites those NaNs).
        memory_format: ``channels_last`` lays the model's 4-D weights out NHWC before compiling
            (see the ``eager`` engine); ``contiguous`` (default) keeps them as built.
    """

    capabilities = Capabilities(can_train=True, multi_device=True, dynamic_shapes=True, needs_example_input=True,
                                prepared_under_autocast=True)  # fmt: skip

    def __init__(self, mode: Mode = "default", backend: str = "inductor", fullgraph: bool = False,
                 dynamic: Optional[bool] = None, fallback_random: bool = True, emulate_precision_casts: bool = True,
                 memory_format: MemoryFormat = "contiguous"):  # fmt: skip
        self.mode, self.backend, self.fullgraph, self.dynamic = mode, backend, fullgraph, dynamic
        self.fallback_random, self.memory_format = fallback_random, memory_format
        self.emulate_precision_casts = emulate_precision_casts

    def prepare(self, model: Any, example: dict[str, Any] | None = None, *, train: bool = False) -> Callable:
        import torch._inductor.config as inductor_config

        # read at every (re)compilation, so set for the process (the engine prepared last decides)
        inductor_config.fallback_random = self.fallback_random
        inductor_config.emulate_precision_casts = self.emulate_precision_casts
        apply_memory_format(model, self.memory_format)
        try:
            compiled = torch.compile(
                model,
                mode=None if self.mode == "default" else self.mode,
                backend=self.backend,
                fullgraph=self.fullgraph,
                dynamic=self.dynamic,
            )
            if replays_cuda_graphs(self.mode, model):
                compiled = OwnedOutputs(compiled)
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


GRAPH_MODES = ("reduce-overhead", "max-autotune")
"""torch.compile's modes that record CUDA graphs (cudagraph trees) for a model on a CUDA device."""


def replays_cuda_graphs(mode: str, model: Any) -> bool:
    """Whether torch.compile in ``mode`` replays CUDA graphs for ``model`` (its weights on CUDA;
    on the CPU Inductor skips the graphs and the outputs are fresh tensors already)."""
    if mode not in GRAPH_MODES:
        return False
    first = next(iter(model.parameters()), None) if isinstance(model, torch.nn.Module) else None
    return first is not None and first.device.type == "cuda"


class OwnedOutputs(torch.nn.Module):
    """A compiled model whose tensor outputs are the caller's to keep: copies of what the CUDA-graph
    replay wrote, so the next replay cannot change them. Gradients flow through the copies."""

    def __init__(self, compiled: torch.nn.Module):
        super().__init__()
        self.compiled = compiled

    @property
    def _orig_mod(self) -> torch.nn.Module:
        """The eager model, as on torch.compile's own wrapper (saving an artifact reads it)."""
        return self.compiled._orig_mod

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        given = {id(t): t for t in _tensors_in((args, kwargs))}  # the caller's own tensors, handed back as they are
        return owned(self.compiled(*args, **kwargs), given)


def _tensors_in(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors_in(v)]
    return []


def owned(out: Any, memo: dict[int, torch.Tensor] | None = None) -> Any:
    """``out`` with every tensor in it (in dicts, lists and tuples) replaced by a copy; a tensor met
    twice (``embedding`` and ``features``) by the same copy. ``memo`` (id → tensor) seeds what is
    handed back as it is (the caller's inputs) and collects the copies."""
    memo = {} if memo is None else memo
    if isinstance(out, torch.Tensor):
        if id(out) not in memo:
            memo[id(out)] = out.clone()
        return memo[id(out)]
    if isinstance(out, dict):
        return {k: owned(v, memo) for k, v in out.items()}
    if isinstance(out, tuple) and hasattr(out, "_fields"):  # a named tuple
        return type(out)(*(owned(v, memo) for v in out))
    if isinstance(out, (list, tuple)):
        return type(out)(owned(v, memo) for v in out)
    return out
