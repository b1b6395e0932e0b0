"""What ``modforge predict --help`` says about the inputs: generically, what each kind of file
becomes; with an artifact named before ``--help``, what *that* artifact takes (read from its
metadata: shape, picture size and channels, ink, the training pictures' look, audio rate)."""

from __future__ import annotations

from typing import Any

from ...engines.inputs import AUDIO_SUFFIXES, IMAGE_SUFFIXES

__all__ = ["GENERIC_INPUTS", "artifact_inputs"]

GENERIC_INPUTS = (
    "INPUT files:\n"
    "  .npy     one sample of the model's input shape, or a stack N × shape, with values as\n"
    "           the model takes them (already normalised)\n"
    f"  picture  {' '.join(IMAGE_SUFFIXES)}\n"
    "           converted to the model's channels (grey or RGB) and size (or resized and\n"
    "           cropped as evaluation did), inverted when the artifact expects dark ink on a\n"
    "           light ground, normalised as in training; then compared with the training\n"
    "           pictures the artifact records: one that looks inverted, has other channels\n"
    "           or transparency, is resized more than ×4 or stretched, or is constant gets a\n"
    "           one-line warning naming the fix\n"
    f"  audio    {' '.join(AUDIO_SUFFIXES)}\n"
    "           mono, resampled to the model's sample rate, cut as 'modforge test' cut it\n"
    "           (the scores of its windows averaged)\n"
    "Name the artifact before --help (modforge predict ARTIFACT --help) to see what it takes."
)


def artifact_inputs(metadata: dict[str, Any], shown: str) -> str:
    """The inputs the artifact ``shown`` takes, as a few lines of help text."""
    spec = metadata.get("input") if isinstance(metadata.get("input"), dict) else {}
    shape, layout = list(spec.get("shape") or []), spec.get("layout")
    lines = [f"{shown} takes:", f"  .npy     {layout or 'model'} inputs of shape {shape} (or N × {shape})"]
    image = spec.get("image")
    if metadata.get("task") == "detection":
        lines.append("  picture  any size; one JSON line of boxes per picture (--out DIR draws them)")
    elif isinstance(image, dict):
        lines += [("  picture  " if i == 0 else "           ") + line for i, line in enumerate(_picture_lines(image))]
    normalisation = spec.get("normalisation") if isinstance(spec.get("normalisation"), dict) else {}
    if layout == "waveform" and normalisation.get("sample_rate"):
        mode = normalisation.get("eval_mode", "full")
        seconds = normalisation.get("seconds")
        cut = {"fixed": f"its first {seconds} s", "windows": f"windows of {seconds} s, scores averaged"}.get(
            mode, "the whole file"
        )
        lines.append(f"  audio    mono at {normalisation['sample_rate']} Hz; the model hears {cut}")
    return "\n".join(lines)


def _picture_lines(image: dict[str, Any]) -> list[str]:
    channels = int(image.get("channels", 1))
    size = f"{image.get('width')}×{image.get('height')}"
    lines = [f"{'grey (1 channel)' if channels == 1 else f'{channels}-channel colour'}, made {size} pixels"]
    if image.get("steps"):
        lines.append("(resized on the shorter side and centre-cropped as evaluation did)")
    contract = image.get("contract") if isinstance(image.get("contract"), dict) else None
    if image.get("ink") == "dark":
        lines.append("dark strokes on a light ground, inverted for the model (--invert: light on dark)")
    elif contract and contract.get("polarity") != "mixed":
        lines.append(f"taken as they are: {contract['polarity'].replace('-', ' ')}, like the training pictures")
    if contract:
        height, width = contract.get("size") or (image.get("height"), image.get("width"))
        low, high = contract.get("range") or (None, None)
        look = {
            "light-on-dark": ", light strokes on a dark ground",
            "dark-on-light": ", dark strokes on a light ground",
        }
        lines.append(f"trained on {width}×{height} pictures (as the model sees them: values {low}..{high}"
                     f"{look.get(contract.get('polarity'), '')})")  # fmt: skip
    return lines
