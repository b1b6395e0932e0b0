"""Built-in backbones (imported on first use of the backbone registry)."""

from . import attention_pool, cnn, mlp, preact_resnet, resnet, vit  # noqa: F401 - registration
