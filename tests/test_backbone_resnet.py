"""``resnet18``/``resnet34`` load torchvision weights exactly: the key map, and logits equal to the torchvision
forward (its module layout written out here in plain PyTorch — torchvision itself is not installed)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import modforge as mf
from modforge.components.backbones.resnet import torchvision_resnet_state_dict


class TorchvisionBasicBlock(nn.Module):
    """torchvision.models.resnet.BasicBlock: names and computation."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class TorchvisionResNet(nn.Module):
    """torchvision.models.resnet.ResNet with BasicBlocks (resnet18: 2-2-2-2, resnet34: 3-4-6-3)."""

    def __init__(self, layers: tuple[int, ...], num_classes: int = 1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes))
        layers = [TorchvisionBasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [TorchvisionBasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def torchvision_model(depth: int, seed: int = 0) -> TorchvisionResNet:
    """A torchvision-layout ResNet with random weights and BatchNorm statistics (eval mode)."""
    torch.manual_seed(seed)
    net = TorchvisionResNet({18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}[depth])
    with torch.no_grad():
        for module in net.modules():
            if isinstance(module, nn.BatchNorm2d):
                n = module.num_features
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0, 0.1)
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.num_batches_tracked.fill_(n)
    return net.eval()


def modforge_model(depth: int) -> nn.Module:
    return mf.build_model(
        {"backbone": {"type": f"resnet{depth}", "args": {"stem": "imagenet"}}, "head": "linear"},
        in_dim=3,
        num_classes=1000,
        input_shape=[3, 224, 224],
    ).eval()


@pytest.mark.parametrize("depth", [18, 34])
def test_torchvision_weights_give_torchvision_logits(depth):
    reference = torchvision_model(depth)
    state = reference.state_dict()
    assert len(state) == {18: 122, 34: 218}[depth]  # torchvision's resnet18/34 state dict sizes
    ours = modforge_model(depth)
    ours.load_state_dict(torchvision_resnet_state_dict(state, depth))  # strict: nothing missing or left over
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = reference(x)
        assert torch.allclose(ours(x), expected, rtol=1e-5, atol=1e-5)
        backbone = mf.BACKBONES.build({"type": f"resnet{depth}", "args": {"stem": "imagenet"}}, in_dim=3).eval()
        backbone.load_state_dict(torchvision_resnet_state_dict(state, depth, backbone_prefix="", head_prefix=None))
        features = backbone(x)
        assert features.shape == (2, 512, 7, 7)
        assert torch.allclose(F.linear(features.mean(dim=(2, 3)), state["fc.weight"], state["fc.bias"]), expected,
                              rtol=1e-5, atol=1e-5)


def test_the_map_is_total_and_one_to_one():
    state = torchvision_model(18).state_dict()
    mapped = torchvision_resnet_state_dict(state, 18)
    assert set(mapped) == set(modforge_model(18).state_dict())
    assert mapped["parts.backbone.stem.0.weight"] is state["conv1.weight"]
    assert mapped["parts.backbone.stem.1.running_var"] is state["bn1.running_var"]
    assert mapped["parts.backbone.layer3.0.shortcut.1.weight"] is state["layer3.0.downsample.1.weight"]
    assert mapped["parts.head.fc.bias"] is state["fc.bias"]


def test_older_weights_without_num_batches_tracked_load():
    state = {k: v for k, v in torchvision_model(18).state_dict().items() if not k.endswith("num_batches_tracked")}
    ours = modforge_model(18)
    ours.load_state_dict(torchvision_resnet_state_dict(state, 18))


def test_unmapped_and_missing_keys_are_reported_not_guessed():
    state = torchvision_model(18).state_dict()
    with pytest.raises(ValueError, match=r"2 unmapped .*resnet18.*: layer1.2.conv1.weight, module.fc.weight"):
        torchvision_resnet_state_dict({**state, "layer1.2.conv1.weight": torch.ones(1), "module.fc.weight": torch.ones(1)},
                                      18)
    partial = {k: v for k, v in state.items() if not k.startswith("layer4.1.bn2.")}
    with pytest.raises(ValueError, match=r"4 missing: layer4.1.bn2.weight, layer4.1.bn2.bias, layer4.1.bn2.running_mean"):
        torchvision_resnet_state_dict(partial, 18)
    with pytest.raises(ValueError, match=r"unmapped .*resnet34.*missing: layer1.2.conv1.weight"):
        torchvision_resnet_state_dict(state | {"layer5.0.conv1.weight": torch.ones(1)}, 34)
    with pytest.raises(ValueError, match="depth must be 18 or 34"):
        torchvision_resnet_state_dict(state, 50)
