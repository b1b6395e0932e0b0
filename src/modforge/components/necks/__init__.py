"""Built-in necks (imported on first use of the neck registry)."""

from . import attentive_stats_pool, basic, fpn, stats_pool  # noqa: F401 - registration
