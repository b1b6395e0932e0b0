"""United Perception's "Model flow" example (CustomNet + CustomHead), as a modforge user
writes it.

As in UP, both parts take the batch dictionary and add to it: the backbone writes
``features`` (a list of maps) and ``strides``; the head writes ``logits`` and a
``ce_loss``, which modforge finds by its name and back-propagates. Differences: the
decorators are modforge's, ``kwarg:`` is ``args:``, the head's input size arrives as
``in_dim`` (UP: first constructor parameter), and the image is under ``input``.
"""

import torch.nn as nn
import torch.nn.functional as F

import modforge as mf
from modforge.components import Layout


@mf.register_backbone("custom_net")
class CustomNet(nn.Module):
    """A plain CNN of ``depth`` 3×3 conv layers that adds ``features``/``strides`` to the batch.

    Args:
        depth: number of conv layers.
        out_planes: output channels of each layer (``depth`` entries).
        in_dim: channels of the input image (wired by the builder).
    """

    dict_io = True
    accepts = (Layout.IMAGE,)
    produces = Layout.MULTISCALE

    def __init__(self, depth: int, out_planes: list[int], in_dim: int = 3):
        super().__init__()
        if len(out_planes) != depth:
            raise ValueError(f"out_planes needs {depth} entries (one per layer), got {len(out_planes)}")
        layers, planes = [], in_dim
        for width in out_planes:
            layers += [nn.Conv2d(planes, width, kernel_size=3, padding=1), nn.ReLU()]
            planes = width
        self.layers = nn.Sequential(*layers)
        self.out_planes = out_planes

    def get_outplanes(self):
        return [self.out_planes[-1]]

    def forward(self, input: dict) -> dict:
        input["features"] = [self.layers(input["input"])]
        input["strides"] = [1]
        return input


@mf.register_head("custom_head")
class CustomHead(nn.Module):
    """Global average pooling and a linear layer; adds ``logits`` and ``ce_loss``.

    Args:
        in_dim: channels of the backbone's first feature map (wired by the builder).
        num_classes: number of classes.
    """

    dict_io = True
    accepts = (Layout.MULTISCALE,)
    output_key = "logits"

    def __init__(self, in_dim: list[int], num_classes: int):
        super().__init__()
        self.fc = nn.Linear(in_dim[0], num_classes)
        self.out_dim = num_classes

    def forward(self, input: dict) -> dict:
        logits = self.fc(input["features"][0].mean(-1).mean(-1))
        input["logits"] = logits
        if "label" in input:
            input["ce_loss"] = F.cross_entropy(logits, input["label"])
        return input
