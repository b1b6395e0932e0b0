"""The zoo: frontends, backbones, necks, heads and losses — one file per family."""

from .base import Backbone, Frontend, Head, Loss, Neck, Part, flat_grads, flat_params
from .layouts import Layout

__all__ = ["Backbone", "Frontend", "Head", "Layout", "Loss", "Neck", "Part", "flat_grads", "flat_params"]
