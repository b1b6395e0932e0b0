"""Built-in backbones (imported on first use of the backbone registry)."""

from . import (  # noqa: F401 - registration
    aasist,
    airbench,
    attention_pool,
    cnn,
    ecapa_tdnn,
    lcnn,
    mlp,
    nes2net,
    preact_resnet,
    published_weights,
    rawnet2,
    resnet,
    tcm_conformer,
    timm_models,
    torchvision_models,
    vit,
)
