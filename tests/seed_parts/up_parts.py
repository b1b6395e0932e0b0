"""United Perception's "Model flow" example (CustomNet), as a modforge user writes it.

UP's ``type: custom_net, kwarg: {depth: 3, out_planes: [64, 128, 256]}`` becomes
``type: custom_net, args: {...}``; the layer count and channel list are typed, so a
wrong value is caught when the config is read, not inside ``nn.Conv2d``.
"""

import torch.nn as nn

import modforge as mf


@mf.register_backbone("custom_net")
class CustomNet(nn.Module):
    """A plain CNN of ``depth`` 3×3 conv layers.

    Args:
        depth: number of conv layers.
        out_planes: output channels of each layer (``depth`` entries).
        in_channels: channels of the input image.
    """

    def __init__(self, depth: int, out_planes: list[int], in_channels: int = 3):
        super().__init__()
        if len(out_planes) != depth:
            raise ValueError(f"out_planes needs {depth} entries (one per layer), got {len(out_planes)}")
        layers, planes = [], in_channels
        for width in out_planes:
            layers += [nn.Conv2d(planes, width, kernel_size=3, padding=1), nn.ReLU(inplace=True)]
            planes = width
        self.layers = nn.Sequential(*layers)
        self.out_dim = out_planes[-1]

    def forward(self, x):
        return self.layers(x)
