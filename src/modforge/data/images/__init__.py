"""Image data: the standard corpora read from their official files (MNIST family, CIFAR,
Tiny-ImageNet), folders and manifests of pictures, torchvision v2 transforms seeded per
sample, batch mixing (MixUp/CutMix), verified downloads.

Nothing here imports torchvision until a transform or a picture decoder is used.
"""
