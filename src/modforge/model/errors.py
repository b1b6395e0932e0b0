"""Errors raised while assembling or running a model."""

from __future__ import annotations

from ..core.errors import ConfigError, UsageError

__all__ = ["ModelBuildError", "ModelOutputError", "StageError"]


class ModelBuildError(ConfigError):
    """Parts that cannot be assembled: incompatible layouts, a failed dry run, a bad ``prev``."""


class StageError(UsageError):
    """A stage's forward raised; the message names the stage, its part and the input shape."""


class ModelOutputError(UsageError):
    """A stage produced something unusable, e.g. a non-scalar value under a loss key."""
