"""Range-checked number types for settings and part signatures.

A part's or setting's annotation says what values make sense, so a bad one is refused when
the config is validated — naming the key — instead of misbehaving at step 3 (a negative
dropout, an infinite learning rate). They are plain ``typing.Annotated`` pydantic
constraints: ``coerce`` and the settings schema validate them, and a user's part can use them
(or its own ``Annotated[float, Field(...)]``) the same way::

    from modforge.core.constraints import Probability, PositiveInt

    @mf.register_backbone("mine")
    class Mine(mf.Backbone):
        def __init__(self, in_dim: int, depth: PositiveInt = 2, dropout: Probability = 0.0): ...
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

__all__ = ["FiniteFloat", "NonNegativeFloat", "NonNegativeInt", "PositiveFloat", "PositiveInt", "Probability"]

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
"""Any finite number (not inf, not NaN)."""
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A finite number above 0 (learning rates, temperatures, scales)."""
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""A finite number of at least 0 (weight decay, margins, clipping norms)."""
Probability = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
"""A number in [0, 1] (dropout, mixing probabilities)."""
PositiveInt = Annotated[int, Field(gt=0)]
"""A whole number above 0 (sizes, counts, depths)."""
NonNegativeInt = Annotated[int, Field(ge=0)]
"""A whole number of at least 0."""
