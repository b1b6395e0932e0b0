"""Quantization-aware training (``train.qat``): parts of a model trained with int8 fake quantization.

Each named part (``backbone``, ``neck``, ``head``…) is traced by torch.fx and prepared for QAT
(``torch.ao.quantization.quantize_fx.prepare_qat_fx``): weights quantized per output channel to
signed int8, activations per tensor to unsigned int8, each through a ``FakeQuantize`` with a moving
min/max observer — the non-fused kind, whose graph ``torch.onnx`` exports as ``QuantizeLinear`` /
``DequantizeLinear`` pairs, so ``modforge export --engine onnx`` of a QAT run is an int8 graph that
ONNX Runtime runs with integer kernels. The observers record ranges while the model trains and are
frozen while it is evaluated (:func:`observing`); their state — ranges, scales, zero points — is
part of the model's ``state_dict``, so checkpoints carry it and a resumed run continues bitwise.

A part torch.fx cannot trace (data-dependent control flow) is refused with the reason. The model is
prepared after ``model.init`` weights are loaded (QAT fine-tunes trained weights), and a checkpoint of
a QAT run is loaded into a model prepared the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ..core.errors import ConfigError

__all__ = ["QatSettings", "observing", "prepare_parts"]


@dataclasses.dataclass
class QatSettings:
    """The ``train.qat:`` section.

    Args:
        parts: the model's parts trained with fake quantization (``[backbone]``, ``[backbone, neck, head]``).
    """

    parts: list[str] = dataclasses.field(default_factory=lambda: ["backbone"])

    def __post_init__(self) -> None:
        if not self.parts or not all(isinstance(p, str) and p for p in self.parts):
            raise ValueError(f"parts must name at least one part of the model, got {self.parts!r}")


def _qconfig_mapping() -> Any:
    from torch.ao.quantization import (
        FakeQuantize,
        MovingAverageMinMaxObserver,
        MovingAveragePerChannelMinMaxObserver,
        QConfig,
        QConfigMapping,
    )

    activation = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255,
                                        dtype=torch.quint8, qscheme=torch.per_tensor_affine)  # fmt: skip
    weight = FakeQuantize.with_args(observer=MovingAveragePerChannelMinMaxObserver, quant_min=-128, quant_max=127,
                                    dtype=torch.qint8, qscheme=torch.per_channel_symmetric, ch_axis=0)  # fmt: skip
    return QConfigMapping().set_global(QConfig(activation=activation, weight=weight))


def prepare_parts(model: nn.Module, parts: Sequence[str], example: torch.Tensor) -> None:
    """Prepare the named parts of a modular model for QAT in place (``example``: one batch of the
    model's input, run once to give each part an input of its own shape)."""
    import warnings

    from torch.ao.quantization.quantize_fx import prepare_qat_fx

    stages = getattr(model, "parts", None)
    if not isinstance(stages, nn.ModuleDict):
        raise ConfigError("train.qat prepares parts of a modular model (frontend, backbone, neck, head)", path="train.qat")
    unknown = [name for name in parts if name not in stages]
    if unknown:
        raise ConfigError(f"train.qat.parts: {', '.join(unknown)} not in this model (its parts: {', '.join(stages)})",
                          path="train.qat.parts")  # fmt: skip
    inputs: dict[str, Any] = {}
    hooks = [stages[name].register_forward_pre_hook(lambda m, args, n=name: inputs.setdefault(n, args)) for name in parts]
    was = model.training
    try:
        model.eval()
        with torch.no_grad():
            model({"input": example})
    except Exception as exc:  # noqa: BLE001 - any model's failure on a plain input batch: one clear error
        raise ConfigError(f"train.qat: the model cannot run on a plain batch of its input shape {list(example.shape)} "
                          f"to trace its parts ({type(exc).__name__}: {str(exc)[:160]})", path="train.qat") from None
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was)
    for name in parts:
        if name not in inputs:
            raise ConfigError(f"train.qat.parts: the part '{name}' did not run on a batch", path="train.qat.parts")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prepared = prepare_qat_fx(stages[name].train(was), _qconfig_mapping(), inputs[name])
        except Exception as exc:  # noqa: BLE001 - torch.fx's many tracing failures: one clear error
            first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            raise ConfigError(f"train.qat.parts: the part '{name}' cannot be traced for quantization-aware training "
                              f"({type(exc).__name__}: {first[:200]}); leave it out of train.qat.parts",
                              path="train.qat.parts") from None  # fmt: skip
        stages[name] = prepared


def observing(model: nn.Module, on: bool) -> None:
    """Let the fake-quantization observers record ranges (training) or freeze them (evaluation,
    export: the ranges learned so far)."""
    from torch.ao.quantization import disable_observer, enable_observer

    model.apply(enable_observer if on else disable_observer)
