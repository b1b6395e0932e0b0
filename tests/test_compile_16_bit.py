"""The ``compile`` engine in 16 bits rounds as eager mode does (``emulate_precision_casts``): Inductor
otherwise keeps float32 between fused operations but saves 16-bit values for the backward pass,
and a maximum's gradient, which compares the two, finds no maximum — 0/0 (pytorch#151352)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from modforge.engines.compile import Compile


class MaxOfGelu(torch.nn.Module):
    """A projection, GELU and a maximum over the features (as AASIST's and LCNN's max-pooling)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(16, 16, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ self.weight).amax(dim=-1)


def test_a_compiled_maximum_of_16_bit_activations_has_the_eager_gradient():
    torch.manual_seed(0)
    model, x = MaxOfGelu(), torch.randn(64, 16, dtype=torch.bfloat16)
    model(x).float().sum().backward()
    eager, model.weight.grad = model.weight.grad, None
    compiled = Compile().prepare(model)
    compiled(x).float().sum().backward()
    assert torch.isfinite(model.weight.grad).all()
    assert torch.equal(model.weight.grad, eager)  # rounded where eager rounds: the same maxima, the same numbers
