"""``preact_resnet18``: kuangliu/pytorch-cifar's PreActResNet18 exactly with ``post_activation=False`` (its forward written
out here), and the paper's final BatchNorm + ReLU by default."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import modforge as mf


def kuangliu_forward(net, x: torch.Tensor) -> torch.Tensor:
    """models/preact_resnet.py PreActResNet.forward up to the pooled features (eval mode)."""
    out = net.stem(x)  # conv1
    for layer in (net.layer1, net.layer2, net.layer3, net.layer4):
        for block in layer:
            pre = F.relu(block.bn1(out))
            shortcut = block.shortcut(pre) if block.shortcut is not None else out
            y = block.conv2(F.relu(block.bn2(block.conv1(pre))))
            out = y + shortcut
    return F.avg_pool2d(out, 4).view(out.size(0), -1)


def test_without_post_activation_it_is_kuangliu_preactresnet18():
    torch.manual_seed(0)
    net = mf.BACKBONES.build({"type": "preact_resnet18", "args": {"post_activation": False}}, in_dim=3).eval()
    assert sum(p.numel() for p in net.parameters()) == 11_171_146 - (512 * 10 + 10)  # kuangliu's, less its linear
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(net(x).mean(dim=(2, 3)), kuangliu_forward(net, x), rtol=1e-5, atol=1e-6)


def test_default_adds_the_papers_final_activation():
    torch.manual_seed(0)
    net = mf.BACKBONES.build("preact_resnet18", in_dim=3).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        plain = net.layer4(net.layer3(net.layer2(net.layer1(net.stem(x)))))
        assert torch.equal(net(x), F.relu(net.post[0](plain)))
