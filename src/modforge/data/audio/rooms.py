"""Reverberation: ``rir`` (impulse responses from a folder) and ``simulated_rir`` (a random
shoebox room simulated by pyroomacoustics' image source method).

Why: replayed and far-field audio carries a room; convolving with a room impulse response
is the standard way to train for it. Real RIRs come from a folder (e.g. the RIRS_NOISES or
BUT ReverbDB collections; read through :class:`.audio_folder.AudioFolder`, links never
followed); simulated ones from pyroomacoustics, with the room's size, RT60 and the source
and microphone positions drawn from the per-(seed, epoch, index) generator. Convolution is
scipy's ``fftconvolve``. The response is shifted so its direct path (its peak) lands on
sample 0, keeping the speech aligned; the output keeps the input's length and power.
"""

from __future__ import annotations

import numpy as np

from ...core.registries import register_augmentation
from .audio_folder import AudioFolder
from .augment_base import Augmentation, check_sample_rate, mean_square

__all__ = ["RoomImpulse", "SimulatedRoom", "reverberate"]


def reverberate(x: np.ndarray, rir: np.ndarray) -> np.ndarray:
    """``x`` convolved with ``rir`` from its peak on (direct path at lag 0), same length and
    mean power as ``x`` (a silent or all-zero response leaves ``x`` unchanged)."""
    from scipy.signal import fftconvolve

    rir = np.asarray(rir, dtype=np.float64)
    if rir.size == 0 or not np.any(rir):
        return x.astype(np.float64)
    rir = rir[int(np.argmax(np.abs(rir))) :]
    y = fftconvolve(x.astype(np.float64), rir)[: x.shape[0]]
    before, after = mean_square(x), mean_square(y)
    if after > 0.0 and before > 0.0:
        y *= np.sqrt(before / after)
    return y


@register_augmentation("rir")
class RoomImpulse(Augmentation):
    """Convolve with a room impulse response picked at random from the audio files under
    ``rir_dir`` (recursively; multi-channel files are mixed to mono; resampled to
    ``sample_rate``). Responses are decoded once and kept in memory.

    Args:
        rir_dir: folder of impulse responses (links out of it are never followed).
        subfolders: only these relative sub-folders of rir_dir (None: all of it).
        sample_rate: sampling rate in Hz (wired by the builder).
    """

    def __init__(self, rir_dir: str, subfolders: list[str] | None = None, sample_rate: int = 16000):
        check_sample_rate(sample_rate)
        self.rir_dir = rir_dir
        self.subfolders = subfolders
        self.sample_rate = sample_rate
        self._folder = AudioFolder(rir_dir, sample_rate, subfolders, what="rir_dir", cache=True)

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return reverberate(x, self._folder.pick(rng))


@register_augmentation("simulated_rir")
class SimulatedRoom(Augmentation):
    """Convolve with the impulse response of a random shoebox room simulated by
    pyroomacoustics (image source method; walls' absorption from the drawn RT60 by Sabine's
    formula). Room size, RT60 and source/microphone positions (at least 0.5 m from walls
    and apart) are drawn from ``rng``.

    Args:
        rt60_min: shortest reverberation time in seconds.
        rt60_max: longest reverberation time in seconds.
        room_min: smallest room edge lengths in metres (x, y, z; None: [3, 3, 2.4]).
        room_max: largest room edge lengths in metres (x, y, z; None: [10, 8, 4]).
        max_order: cap on the image source order (higher: longer tails, slower).
        sample_rate: sampling rate in Hz (wired by the builder).
    """

    def __init__(
        self,
        rt60_min: float = 0.2,
        rt60_max: float = 0.8,
        room_min: list[float] | None = None,
        room_max: list[float] | None = None,
        max_order: int = 8,
        sample_rate: int = 16000,
    ):
        check_sample_rate(sample_rate)
        if not 0 < rt60_min <= rt60_max:
            raise ValueError(f"need 0 < rt60_min <= rt60_max, got {rt60_min}, {rt60_max}")
        room_min = [3.0, 3.0, 2.4] if room_min is None else room_min
        room_max = [10.0, 8.0, 4.0] if room_max is None else room_max
        lo, hi = np.asarray(room_min, dtype=float), np.asarray(room_max, dtype=float)
        if lo.shape != (3,) or hi.shape != (3,) or np.any(lo < 1.5) or np.any(lo > hi):
            raise ValueError(
                f"room_min/room_max must be 3 lengths in metres, 1.5 <= min <= max, got {room_min}, {room_max}"
            )
        if max_order < 0:
            raise ValueError(f"max_order must be >= 0, got {max_order}")
        import pyroomacoustics  # noqa: F401 - fail at build time, not in a worker

        self.rt60_min, self.rt60_max = rt60_min, rt60_max
        self.room_min, self.room_max = lo.tolist(), hi.tolist()
        self.max_order = max_order
        self.sample_rate = sample_rate

    def room_response(self, rng: np.random.Generator) -> np.ndarray:
        """One random room's impulse response (mono, at ``sample_rate``)."""
        import pyroomacoustics as pra

        dims = rng.uniform(self.room_min, self.room_max)
        rt60 = float(rng.uniform(self.rt60_min, self.rt60_max))
        source = rng.uniform(0.5, dims - 0.5)
        mic = rng.uniform(0.5, dims - 0.5)
        while np.linalg.norm(mic - source) < 0.5:  # rare; the redraw is still from rng
            mic = rng.uniform(0.5, dims - 0.5)
        try:
            absorption, order = pra.inverse_sabine(rt60, dims)
        except ValueError:  # RT60 too short for this room by Sabine: take the most absorbent walls
            absorption, order = 0.99, 0
        room = pra.ShoeBox(
            dims, fs=self.sample_rate, materials=pra.Material(float(min(absorption, 0.99))),
            max_order=int(min(order, self.max_order)),
        )  # fmt: skip
        room.add_source(source)
        room.add_microphone(mic)
        room.compute_rir()
        return np.asarray(room.rir[0][0], dtype=np.float64)

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return reverberate(x, self.room_response(rng))
