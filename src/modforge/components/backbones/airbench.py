"""``airbench`` — the network of Keller Jordan's CIFAR-10 speed runs (``airbench94``).

Matches ``airbench94.py`` of KellerJordan/cifar10-airbench (PyPI ``airbench`` 0.1.8,
``make_net94``), layer for layer and in the same parameter order:

* a 2×2 convolution without padding from the input's channels to ``2 · C · 2 · 2`` (24 for
  RGB) channels with a bias, then GELU — the *whitening* layer. Its weights are frozen
  (``requires_grad=False``): they are set from the training data before the first step by
  the ``whitening_init`` callback (:mod:`modforge.train.callbacks.whitening_init`); its bias
  trains (the recipe freezes it after a few epochs with ``freeze_parameters``);
* three groups ``conv3×3 → max-pool 2 → BN → GELU → conv3×3 → BN → GELU`` of widths 64,
  256, 256. The convolutions have no bias and start from PyTorch's default initialisation
  with a Dirac (identity) kernel in their first ``in_channels`` filters; BatchNorm has
  ``eps=1e-12``, running averages that keep 0.6 of the old value per step (PyTorch's
  ``momentum=0.4``) and a frozen scale of 1 (only its shift trains);
* a global max-pool (airbench's ``MaxPool2d(3)`` on the final 3×3 map of a 32×32 input) and
  a multiplication by ``scale`` (airbench's ``Mul(1/9)`` after its bias-free classifier). It is
  a max-pool over the whole map, as airbench's, rather than ``amax``: a pooling layer remembers
  where each maximum was, so its gradient reaches one position per channel, as airbench's does;
  ``amax``'s gradient finds the maxima again by comparing the map with them, which under
  torch.compile with 16-bit activations compares values Inductor recomputed in float32 with
  the maxima it stored in 16 bits — no position matches, and the gradient becomes 0/0 (NaN
  from the first step; measured on the CPU with ``precision: 16-true`` and ``bf16-true``).

The classifier is the ``linear`` head with ``bias: false``: ``W(x) / 9`` and ``W(x / 9)`` are
the same function, so the scale sits here, before the head.

Test-time augmentation (``tta``). In eval mode the features of the flipped picture (and,
for ``flip_translate``, of the picture shifted by one pixel either way, reflect-padded) are
averaged with the plain ones, with airbench's weights (``infer_mirror_translate``). The
head is linear, so averaging features gives exactly the average of the logits airbench
computes — the whole model's output is the test-time augmented one, under every task,
engine and export, with no code in the evaluation loop. Training is never augmented here.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.constraints import PositiveFloat, PositiveInt, Probability
from ...core.registries import register_backbone
from ..base import Backbone
from ..layouts import Layout

__all__ = ["Airbench", "ConvGroup"]

TTA = Literal["none", "flip", "flip_translate"]


def _dirac_conv(c_in: int, c_out: int, kernel: int, padding: int | str, bias: bool) -> nn.Conv2d:
    """A convolution with PyTorch's default initialisation, then identity kernels in its
    first ``c_in`` filters (airbench's ``Conv``): the group starts close to passing its input on."""
    conv = nn.Conv2d(c_in, c_out, kernel, padding=padding, bias=bias)
    with torch.no_grad():
        if conv.bias is not None:
            conv.bias.zero_()
        nn.init.dirac_(conv.weight[: min(c_in, c_out)])
    return conv


def _batch_norm(width: int, momentum: float, eps: float) -> nn.BatchNorm2d:
    """BatchNorm with a frozen scale of 1 (only the shift trains)."""
    norm = nn.BatchNorm2d(width, eps=eps, momentum=momentum)
    norm.weight.requires_grad_(False)
    return norm


class ConvGroup(nn.Module):
    """``conv3×3 → max-pool 2 → BN → GELU → conv3×3 → BN → GELU``."""

    def __init__(self, c_in: int, c_out: int, momentum: float, eps: float):
        super().__init__()
        # registration order = airbench's parameter order (conv1, norm1, conv2, norm2)
        self.conv1 = _dirac_conv(c_in, c_out, 3, "same", bias=False)
        self.pool = nn.MaxPool2d(2)
        self.norm1 = _batch_norm(c_out, momentum, eps)
        self.conv2 = _dirac_conv(c_out, c_out, 3, "same", bias=False)
        self.norm2 = _batch_norm(c_out, momentum, eps)
        self.activ = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.activ(self.norm1(self.pool(self.conv1(x))))
        return self.activ(self.norm2(self.conv2(x)))


@register_backbone("airbench")
class Airbench(Backbone):
    """airbench94's network: 2×2 whitening conv, three conv groups, global max-pool, scale.

    Takes [B, C, H, W] pictures of at least 16×16 (32×32 for CIFAR); outputs [B, widths[-1]].

    Args:
        in_dim: input channels (wired by the builder).
        widths: output channels of the three conv groups (airbench94: 64, 256, 256).
        whiten_kernel: size of the whitening convolution's square kernel (airbench: 2).
        bn_momentum: BatchNorm's running-average momentum in PyTorch's sense (airbench's
            ``batchnorm_momentum`` 0.6 is 1 − this).
        bn_eps: BatchNorm's epsilon.
        scale: multiplies the pooled features (airbench's 1/9 on the logits).
        tta: test-time views averaged in eval mode: none, flip, or flip_translate (airbench's
            ``tta_level`` 0, 1, 2).
    """

    accepts = (Layout.IMAGE,)
    produces = Layout.VECTOR
    out_dim_rule = "the last of widths"

    def __init__(
        self,
        in_dim: int,
        widths: tuple[PositiveInt, PositiveInt, PositiveInt] = (64, 256, 256),
        whiten_kernel: PositiveInt = 2,
        bn_momentum: Probability = 0.4,
        bn_eps: PositiveFloat = 1e-12,
        scale: PositiveFloat = 1 / 9,
        tta: TTA = "none",
    ):
        super().__init__()
        if len(widths) != 3 or any(w <= 0 for w in widths):
            raise ValueError(f"widths must be three positive channel counts, got {tuple(widths)}")
        if not 0.0 <= bn_momentum <= 1.0:
            raise ValueError(f"bn_momentum must be in [0, 1], got {bn_momentum}")
        if tta not in ("none", "flip", "flip_translate"):
            raise ValueError(f"tta must be none, flip or flip_translate, got {tta!r}")
        whiten_width = 2 * in_dim * whiten_kernel**2
        self.whiten = _dirac_conv(in_dim, whiten_width, whiten_kernel, 0, bias=True)
        self.whiten.weight.requires_grad_(False)  # set from the data (whitening_init), never trained
        self.activ = nn.GELU()
        groups, width = [], whiten_width
        for out in widths:
            groups.append(ConvGroup(width, out, bn_momentum, bn_eps))
            width = out
        self.groups = nn.ModuleList(groups)
        self.scale, self.tta = float(scale), str(tta)
        self.min_size = 8 * whiten_kernel  # three halvings after the whitening conv leave at least 1×1
        self.out_dim = widths[-1]

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2] < self.min_size or x.shape[-1] < self.min_size:
            raise ValueError(f"airbench needs pictures of at least {self.min_size}×{self.min_size}, "
                             f"got {x.shape[-2]}×{x.shape[-1]}")  # fmt: skip
        x = self.activ(self.whiten(x))
        for group in self.groups:
            x = group(x)
        return self._pooled(x)

    def _pooled(self, x: torch.Tensor) -> torch.Tensor:
        """The features of the last group's map: its maximum per channel (see the module docstring), scaled."""
        return F.adaptive_max_pool2d(x, 1).flatten(1) * self.scale

    def _mirror(self, x: torch.Tensor) -> torch.Tensor:
        """The picture and its mirror image, equally (airbench's ``infer_mirror``)."""
        return 0.5 * self._features(x) + 0.5 * self._features(x.flip(-1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training or self.tta == "none":
            return self._features(x)
        if self.tta == "flip":
            return self._mirror(x)
        # flip_translate: half the mirror pair, half the mean of the pairs shifted one pixel up-left
        # and down-right with reflect padding (airbench's ``infer_mirror_translate``)
        h, w = x.shape[-2], x.shape[-1]
        padded = F.pad(x, [1, 1, 1, 1], mode="reflect")
        shifted = 0.5 * self._mirror(padded[:, :, 0:h, 0:w]) + 0.5 * self._mirror(padded[:, :, 2 : h + 2, 2 : w + 2])
        return 0.5 * self._mirror(x) + 0.5 * shifted
