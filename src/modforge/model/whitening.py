"""Patch whitening: convolution weights that decorrelate the pixels of small patches.

The first layer of airbench's network (Keller Jordan's CIFAR-10 speed runs, after tysam-code's
hlb-CIFAR10) is a frozen k×k convolution whose filters are the eigenvectors of the
second-moment matrix of the training pictures' k×k patches, each divided by the square root
of its eigenvalue (plus ``eps``): its outputs have (close to) the identity as second-moment
matrix on the data, so the network starts from decorrelated, equally scaled inputs. Each
filter comes twice, as itself and negated, so that the GELU after it keeps both signs.

The moment matrix is the uncentred ``XᵀX / n`` of the flattened patches, in float32, and the
filters are ordered by decreasing eigenvalue — what airbench computes.
"""

from __future__ import annotations

import torch
import torch.nn as nn

__all__ = ["image_patches", "patch_whitening_weight", "whiten_conv_"]


def image_patches(images: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Every ``size`` patch of ``images`` [N, C, H, W] (stride 1, no padding) as [P, C, h, w], float32."""
    h, w = size
    channels = images.shape[1]
    return images.unfold(2, h, 1).unfold(3, w, 1).transpose(1, 3).reshape(-1, channels, h, w).float()


def patch_whitening_weight(
    images: torch.Tensor, size: tuple[int, int], *, eps: float = 5e-4, negated: bool = True
) -> torch.Tensor:
    """Whitening filters for ``size`` patches of ``images`` [N, C, H, W]: [C·h·w, C, h, w]
    scaled eigenvectors by decreasing eigenvalue, followed by their negatives when ``negated``
    ([2·C·h·w, C, h, w])."""
    patches = image_patches(images, size)
    n, c, h, w = patches.shape
    flat = patches.view(n, -1)
    moments = (flat.T @ flat) / n
    values, vectors = torch.linalg.eigh(moments, UPLO="U")
    values = values.flip(0).view(-1, 1, 1, 1)
    vectors = vectors.T.reshape(c * h * w, c, h, w).flip(0)
    scaled = vectors / torch.sqrt(values + eps)
    return torch.cat((scaled, -scaled)) if negated else scaled


@torch.no_grad()
def whiten_conv_(conv: nn.Conv2d, images: torch.Tensor, *, eps: float = 5e-4) -> None:
    """Set ``conv``'s weights to the whitening filters of ``images`` (in place).

    Raises:
        ValueError: ``conv`` is not a stride-1 convolution without groups, or its output
            channels are neither ``C·h·w`` nor ``2·C·h·w``, or ``images`` do not fit it.
    """
    if not isinstance(conv, nn.Conv2d) or conv.groups != 1 or conv.stride != (1, 1):
        raise ValueError(f"whitening needs a plain stride-1 Conv2d, got {conv!r}")
    c, (h, w) = conv.in_channels, conv.kernel_size
    basis = c * h * w
    if conv.out_channels not in (basis, 2 * basis):
        raise ValueError(f"a whitening conv of {c} channels and a {h}×{w} kernel has {basis} or {2 * basis} "
                         f"output channels, this one has {conv.out_channels}")  # fmt: skip
    if images.dim() != 4 or images.shape[1] != c or images.shape[2] < h or images.shape[3] < w:
        raise ValueError(f"whitening needs pictures [N, {c}, ≥{h}, ≥{w}], got {tuple(images.shape)}")
    weight = patch_whitening_weight(images.to(conv.weight.device), (h, w), eps=eps,
                                    negated=conv.out_channels == 2 * basis)  # fmt: skip
    conv.weight.copy_(weight.to(conv.weight.dtype))
