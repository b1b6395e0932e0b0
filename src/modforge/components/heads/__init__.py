"""Built-in heads (imported on first use of the head registry)."""

from . import cosine, fcos, linear, mlp, retinanet  # noqa: F401 - registration
