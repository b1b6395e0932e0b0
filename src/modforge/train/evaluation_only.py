"""What a trainer that only evaluates (``modforge test``, ``export``, ``predict``) holds as its
optimizer: the model's parameters in one group at rate 0, and nothing to step.

A real ``torch.optim.SGD(lr=0)`` would do the same, but building a process's first torch optimizer
imports ``torch._dynamo`` (its ``add_param_group`` is wrapped to disable dynamo) — 1–2 CPU-seconds
of every such command spent on a module evaluation never uses.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["EvaluationOnly"]


class EvaluationOnly:
    """An optimizer's surface for a trainer that never steps: ``param_groups`` (one, ``lr`` 0),
    ``state``, ``zero_grad`` and ``state_dict``; :meth:`step` refuses, naming why."""

    def __init__(self, params: Iterable[torch.nn.Parameter]):
        self.param_groups: list[dict[str, Any]] = [{"params": list(params), "lr": 0.0}]
        self.state: dict[Any, Any] = {}
        self.defaults: dict[str, Any] = {"lr": 0.0}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.param_groups[0]["params"]:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()

    def step(self, closure: Any = None) -> None:
        raise RuntimeError("this trainer only evaluates (modforge test, export, predict): it has no optimizer to step")

    def state_dict(self) -> dict[str, Any]:
        count = len(self.param_groups[0]["params"])
        return {"state": {}, "param_groups": [{"lr": 0.0, "params": list(range(count))}]}
