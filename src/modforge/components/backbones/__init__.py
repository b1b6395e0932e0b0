"""Built-in backbones (imported on first use of the backbone registry)."""

from . import aasist, attention_pool, cnn, ecapa_tdnn, mlp, nes2net, preact_resnet, resnet, tcm_conformer, vit  # noqa: F401 - registration
