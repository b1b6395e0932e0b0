"""Experiments: a config turned into data + model + trainer; run folders; test; k-fold."""

from .schema import PART_SLOTS, SECTIONS, PartSlot, apply_overrides, normalize_slots, validate_config

__all__ = ["PART_SLOTS", "SECTIONS", "PartSlot", "apply_overrides", "normalize_slots", "validate_config"]
