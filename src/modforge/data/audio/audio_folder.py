"""A folder of audio files from someone else (noise, babble, room impulse responses), read safely.

Why a module of its own: background noise (MUSAN-style ``noise/``, ``music/``, ``speech/``
sub-folders) and RIR collections are downloaded archives, so — as everywhere modforge reads
folders it does not own (:mod:`modforge.core.safe_files`) — links are never followed out of
the folder, files are opened without following links and must be plain regular files, and
an unreadable file is one error naming it. Files are listed once, sorted, so a random index
drawn from the per-(seed, epoch, index) generator picks the same file on every machine.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ...core.safe_files import UnsafePathError, folder_below, open_regular

__all__ = ["AudioFolder", "audio_suffixes", "list_audio_files"]


def audio_suffixes() -> frozenset[str]:
    """The file suffixes soundfile reads (``.wav``, ``.flac``, …; headerless RAW left out)."""
    import soundfile

    return frozenset("." + fmt.lower() for fmt in soundfile.available_formats() if fmt.upper() != "RAW")


def list_audio_files(folder: str | os.PathLike, what: str, subfolders: list[str] | None = None) -> list[str]:
    """The audio files under ``folder`` (or only under its ``subfolders``), recursively, sorted per folder.

    Links found in the walk are not descended into and linked files are skipped.

    Raises:
        ValueError: ``folder`` is not a folder, a sub-folder is missing or leads out, or no audio file is found
            (the message names the folder as ``what`` — the argument's name).
    """
    root = Path(folder)
    if not root.is_dir():
        raise ValueError(f"{what} {str(folder)!r} does not exist or is not a folder")
    suffixes = audio_suffixes()
    files: list[str] = []
    for start in [root] if not subfolders else [_subfolder(root, name, what) for name in subfolders]:
        for here, dirs, names in os.walk(start, followlinks=False):
            dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(here, d)))
            for name in sorted(names):
                path = os.path.join(here, name)
                if os.path.splitext(name)[1].lower() in suffixes and not os.path.islink(path):
                    files.append(path)
    if not files:
        raise ValueError(
            f"{what} {str(folder)!r} holds no audio files (looked for {', '.join(sorted(suffixes))}, recursively)"
        )
    return files


def _subfolder(root: Path, name: str, what: str) -> Path:
    """The sub-folder ``name`` of ``root``: it must be a folder resolving inside ``root`` (it may be
    a link that stays inside; :func:`~modforge.core.safe_files.folder_below`).

    Raises:
        ValueError: missing, or leading outside ``root`` (an augmentation's argument error).
    """
    try:
        start = folder_below(root, name, f"{what} {str(root)!r}, sub-folder")
    except UnsafePathError as exc:
        raise ValueError(str(exc)) from None
    if not start.is_dir():
        raise ValueError(f"{what} {str(root)!r}: sub-folder {name!r} is missing (expected a folder {start})")
    return start


class AudioFolder:
    """The audio files under ``folder`` (recursively, optionally only in ``subfolders``),
    decoded to mono float64 at ``sample_rate`` on demand (and kept in memory when ``cache``).

    Links found in the walk are not descended into and linked files are skipped: a name that
    resolves outside the folder is never opened. A sub-folder named in ``subfolders`` may be a
    link that stays inside the folder; one leading out of it is refused.

    Args:
        folder: the root folder.
        sample_rate: rate files are resampled to (soxr).
        subfolders: only files under these relative sub-folders (e.g. ``["speech"]`` for
            MUSAN babble); None: the whole folder.
        what: how messages name the folder (the argument's name, e.g. ``noise_dir``).
        cache: keep decoded files in memory (RIRs are short: True is the right choice).
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        sample_rate: int,
        subfolders: list[str] | None = None,
        what: str = "folder",
        cache: bool = True,
    ):
        root = Path(folder)
        files = [Path(f) for f in list_audio_files(folder, what, subfolders)]
        self.folder, self.files, self.sample_rate, self.what, self.cache = root, files, sample_rate, what, cache
        self._decoded: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.files)

    def read(self, i: int) -> np.ndarray:
        """File ``i`` as mono float64 at the folder's rate, never empty.

        Raises:
            ValueError: the file cannot be read as audio or holds no samples (naming it).
        """
        cached = self._decoded.get(i)
        if cached is not None:
            return cached
        import soundfile

        path = self.files[i]
        try:
            with open_regular(path) as handle:
                data, rate = soundfile.read(handle, dtype="float64", always_2d=True)
        except Exception as exc:  # noqa: BLE001 - soundfile/OS errors vary; one message naming the file
            raise ValueError(f"{self.what}: cannot read audio file {str(path)!r} ({exc})") from None
        if data.shape[0] == 0:
            raise ValueError(f"{self.what}: audio file {str(path)!r} holds no samples")
        mono = data.mean(axis=1)
        if rate != self.sample_rate:
            import soxr

            mono = soxr.resample(mono, rate, self.sample_rate, quality="HQ")
        if not np.all(np.isfinite(mono)):
            raise ValueError(f"{self.what}: audio file {str(path)!r} holds NaN or infinite samples")
        if self.cache:
            self._decoded[i] = mono
        return mono

    def pick(self, rng: np.random.Generator) -> np.ndarray:
        """A random file's samples."""
        return self.read(int(rng.integers(len(self.files))))

    def segment(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` samples of a random file from a random offset (looped when the file is shorter)."""
        whole = self.pick(rng)
        start = int(rng.integers(whole.shape[0]))
        if start + n <= whole.shape[0]:
            return whole[start : start + n]
        reps = -(-(start + n) // whole.shape[0])
        return np.tile(whole, reps)[start : start + n]
