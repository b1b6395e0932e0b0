"""``codec``: a lossy codec round trip (encode, decode) through PyAV's bundled FFmpeg.

Why: spoofing countermeasures meet telephone lines (A-law/µ-law, G.722, AMR-NB) and
streaming/compressed audio (MP3, AAC, Opus, Vorbis); training on codec round trips is the
standard channel robustness recipe (ASVspoof 2021 LA/DF). The DSP is FFmpeg's, through PyAV
(``av``) — GSM through pedalboard's bundled libgsm where PyAV's FFmpeg has none; this module resamples to the codec's rate (soxr), encodes, decodes, undoes the
encoder's delay (measured once per setting on a fixed probe signal) and trims/pads back to
the input length, so a step keeps the utterance aligned sample for sample.

Round trips are deterministic: FFmpeg's encoders run single-threaded on the same input and
settings; the only random choices (which codec, which bitrate) come from ``rng``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from ...core.registries import register_augmentation
from .augment_base import Augmentation, check_sample_rate

__all__ = ["CODECS", "Codec", "available_codecs", "codec_round_trip"]

# name -> (encoder candidates, decoder candidates, default rate, allowed rates or None, default bit rate or None)
CODECS: dict[str, tuple[tuple[str, ...], tuple[str, ...], int, tuple[int, ...] | None, int | None]] = {
    "alaw": (("pcm_alaw",), ("pcm_alaw",), 8000, None, None),
    "mulaw": (("pcm_mulaw",), ("pcm_mulaw",), 8000, None, None),
    "g722": (("g722",), ("g722",), 16000, (16000,), None),
    "gsm": (("libgsm",), ("gsm",), 8000, (8000,), None),
    "amr_nb": (("libopencore_amrnb",), ("amrnb", "libopencore_amrnb"), 8000, (8000,), 12200),
    "amr_wb": (("libvo_amrwbenc",), ("amrwb", "libopencore_amrwb"), 16000, (16000,), 23850),
    "mp3": (("libmp3lame",), ("mp3float", "mp3"), 16000, None, 32000),
    "aac": (("aac", "libfdk_aac"), ("aac",), 16000, None, 32000),
    "opus": (("libopus",), ("libopus", "opus"), 16000, (8000, 12000, 16000, 24000, 48000), 16000),
    "vorbis": (("libvorbis", "vorbis"), ("libvorbis", "vorbis"), 16000, None, 64000),
}
"""The codecs ``codec`` knows, by its name for them. Which of them work depends on the
FFmpeg build inside the installed PyAV wheel: :func:`available_codecs` says."""

_ENCODER_OPTIONS: dict[str, dict[str, str]] = {
    "vorbis": {"strict": "-2"},  # FFmpeg's own Vorbis encoder is marked experimental
    "libmp3lame": {"compression_level": "7"},  # LAME's fast quality setting, as audiomentations' default
}
_MAX_LEAD = 512  # samples a round trip's output may lead its input (pedalboard's GSM over-compensates)
_AMR_NB_RATES = (4750, 5150, 5900, 6700, 7400, 7950, 10200, 12200)
_AMR_WB_RATES = (6600, 8850, 12650, 14250, 15850, 18250, 19850, 23050, 23850)


def _find(kind: str, candidates: Sequence[str]) -> str | None:
    import av

    for name in candidates:
        try:
            av.codec.Codec(name, kind)
        except Exception:  # noqa: BLE001 - av raises UnknownCodecError / ValueError by version
            continue
        return name
    return None


def _pyav_has(codec: str) -> bool:
    try:
        import av  # noqa: F401
    except ImportError:
        return False
    encoders, decoders, *_ = CODECS[codec]
    return _find("w", encoders) is not None and _find("r", decoders) is not None


def _pedalboard_gsm() -> bool:
    """Whether pedalboard (Spotify's audio effects library, bundling libgsm) can stand in for GSM."""
    try:
        from pedalboard import GSMFullRateCompressor  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def available_codecs() -> tuple[str, ...]:
    """The names in :data:`CODECS` whose encoder and decoder the installed PyAV has (GSM also
    through pedalboard's ``GSMFullRateCompressor`` when PyAV's FFmpeg lacks libgsm)."""
    return tuple(name for name in CODECS if _pyav_has(name) or (name == "gsm" and _pedalboard_gsm()))


def _resample(x: np.ndarray, source: int, target: int) -> np.ndarray:
    if source == target:
        return x
    import soxr

    return soxr.resample(x, source, target, quality="HQ")


def _encode_decode(x: np.ndarray, codec: str, rate: int, bit_rate: int | None) -> np.ndarray:
    """Encode ``x`` (mono float at ``rate``) with ``codec`` and decode it again, float64 at ``rate``."""
    import av

    encoders, decoders, *_ = CODECS[codec]
    enc = av.CodecContext.create(_find("w", encoders), "w")
    layout = "stereo" if enc.name == "vorbis" else "mono"  # FFmpeg's own Vorbis encoder wants two channels
    fmt = enc.codec.audio_formats[0].name
    enc.sample_rate, enc.layout, enc.format = rate, layout, fmt
    if bit_rate:
        enc.bit_rate = bit_rate
    enc.thread_count = 1
    enc.options = dict(_ENCODER_OPTIONS.get(enc.name, {}))
    enc.open()
    dec = av.CodecContext.create(_find("r", decoders), "r")
    dec.sample_rate, dec.layout = rate, layout
    if enc.extradata:
        dec.extradata = enc.extradata
    channels = 2 if layout == "stereo" else 1
    frame_size = enc.frame_size or 1024
    n = x.shape[0]
    padded = np.zeros(math.ceil(n / frame_size) * frame_size, dtype=np.float32)
    padded[:n] = x
    to_codec = av.AudioResampler(format=fmt, layout=layout, rate=rate)
    packets = []
    for start in range(0, padded.shape[0], frame_size):
        chunk = np.tile(padded[None, start : start + frame_size], (channels, 1))
        frame = av.AudioFrame.from_ndarray(chunk, format="fltp", layout=layout)
        frame.sample_rate = rate
        for converted in to_codec.resample(frame):
            packets.extend(enc.encode(converted))
    for converted in to_codec.resample(None):
        packets.extend(enc.encode(converted))
    packets.extend(enc.encode(None))
    decoded, out_rate = [], rate
    from_codec = None
    for packet in [*packets, None]:
        for frame in dec.decode(packet):
            out_rate = frame.sample_rate
            if from_codec is None:
                from_codec = av.AudioResampler(format="fltp", layout="mono", rate=out_rate)
            decoded.extend(f.to_ndarray()[0] for f in from_codec.resample(frame))
    if from_codec is not None:
        decoded.extend(f.to_ndarray()[0] for f in from_codec.resample(None))
    y = np.concatenate(decoded).astype(np.float64) if decoded else np.zeros(0)
    return _resample(y, out_rate, rate)


def _fast_mp3(x: np.ndarray, rate: int, bit_rate: int | None) -> np.ndarray | None:
    """MP3 through fast-mp3-augment (LAME quality 7), or None where it is not installed or
    does not take this rate, bit rate or length."""
    try:
        import fast_mp3_augment as fm
    except ImportError:
        return None
    kbps = (bit_rate or 32000) // 1000
    if (bit_rate or 32000) % 1000 or kbps not in fm.SUPPORTED_BITRATES or rate not in fm.SUPPORTED_SAMPLE_RATES:
        return None
    try:
        y = fm.compress_roundtrip(
            np.ascontiguousarray(x, dtype=np.float32), sample_rate=rate, bitrate_kbps=kbps, preserve_delay=False,
            quality=7,
        )  # fmt: skip
    except fm.TooShortAudio:
        return None
    return np.asarray(y).reshape(-1)


def _raw_round_trip(x: np.ndarray, codec: str, rate: int, bit_rate: int | None) -> np.ndarray:
    """The codec's round trip before delay compensation: PyAV; pedalboard for GSM when
    FFmpeg lacks it; fast-mp3-augment for MP3 when installed (LAME + minimp3 in one native
    call, about 5x faster than the frame-by-frame PyAV path, output aligned already)."""
    if codec == "mp3":
        y = _fast_mp3(x, rate, bit_rate)
        if y is not None:
            return y
    if codec == "gsm" and not _pyav_has("gsm"):
        from pedalboard import GSMFullRateCompressor

        return GSMFullRateCompressor()(x.astype(np.float32), rate).reshape(-1).astype(np.float64)
    return _encode_decode(x, codec, rate, bit_rate)


@functools.lru_cache(maxsize=64)
def _delay(codec: str, rate: int, bit_rate: int | None) -> int:
    """The encoder+decoder delay in samples at ``rate``: the lag that best aligns the round
    trip of a fixed probe (seeded noise through a band-pass, so every codec passes it)."""
    probe_rng = np.random.default_rng(12345)
    n = rate  # one second
    probe = probe_rng.standard_normal(n)
    spectrum = np.fft.rfft(probe)
    freqs = np.fft.rfftfreq(n, 1.0 / rate)
    spectrum[(freqs < 300) | (freqs > min(3400.0, rate / 2 * 0.8))] = 0.0
    probe = 0.3 * np.fft.irfft(spectrum, n) / np.std(np.fft.irfft(spectrum, n))
    y = _raw_round_trip(probe.astype(np.float32), codec, rate, bit_rate)
    y = np.pad(y, (_MAX_LEAD, max(0, n + 4096 - y.shape[0])))  # a negative lag: the output leads
    lags = range(-_MAX_LEAD, 4096)
    return lags[int(np.argmax([float(np.dot(probe, y[_MAX_LEAD + lag : _MAX_LEAD + lag + n])) for lag in lags]))]


def codec_round_trip(
    x: np.ndarray, sample_rate: int, codec: str, *, codec_rate: int | None = None, bit_rate: int | None = None
) -> np.ndarray:
    """``x`` (mono float at ``sample_rate``) through ``codec`` and back, aligned and exactly as long.

    Raises:
        ValueError: ``codec`` unknown or not in this PyAV build (the message lists those that are).
    """
    check_codec(codec)
    _, _, default_rate, _, default_bit_rate = CODECS[codec]
    rate = codec_rate or default_rate
    bit_rate = bit_rate if bit_rate is not None else default_bit_rate
    x = np.asarray(x)
    at_rate = (
        x.astype(np.float32, copy=False)
        if sample_rate == rate
        else _resample(x.astype(np.float64), sample_rate, rate).astype(np.float32)
    )
    y = _raw_round_trip(at_rate, codec, rate, bit_rate)
    lag = _delay(codec, rate, bit_rate)
    y = y[lag : lag + at_rate.shape[0]] if lag >= 0 else np.concatenate([np.zeros(-lag), y[: at_rate.shape[0] + lag]])
    y = _resample(y, rate, sample_rate)
    n = x.shape[0]
    return y[:n] if y.shape[0] >= n else np.pad(y, (0, n - y.shape[0]))


def check_codec(codec: str) -> None:
    """Raise one clear ValueError when ``codec`` is unknown or missing from the installed PyAV."""
    if codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r}; known: {', '.join(CODECS)}")
    have = available_codecs()
    if codec not in have:
        encoders, decoders, *_ = CODECS[codec]
        raise ValueError(
            f"codec {codec!r} is not available: the installed PyAV/FFmpeg lacks encoder {'/'.join(encoders)} "
            f"or decoder {'/'.join(decoders)}{' (and pedalboard is not installed)' if codec == 'gsm' else ''}; "
            f"available here: {', '.join(have) or 'none (pip install av)'}"
        )


@register_augmentation("codec")
class Codec(Augmentation):
    """Encode and decode with a lossy codec picked at random from ``codecs``, at a bit rate
    picked at random from ``bit_rates`` (when given; else the codec's default).

    Known codecs: alaw, mulaw (G.711, 8 kHz), g722 (16 kHz), gsm (8 kHz), amr_nb (8 kHz),
    amr_wb (16 kHz), mp3, aac, opus, vorbis — those whose encoder the installed PyAV wheel
    bundles (:func:`available_codecs`); naming one it lacks is an error listing those it has.
    The signal is resampled to the codec's rate (telephony codecs thus also band-limit it)
    and back, the codec's delay is removed and the length kept.

    Args:
        codecs: names to choose from, uniformly (one name is fine).
        bit_rates: bit rates in bit/s to choose from, uniformly (None: each codec's default;
            ignored by the fixed-rate codecs alaw, mulaw, g722, gsm; AMR takes its nearest mode).
            Every codec and bit rate is tried once when the step is built, so a setting the
            encoder refuses fails the config, not a training worker.
        codec_rate: sampling rate in Hz to run the codec at (None: each codec's default).
        sample_rate: sampling rate in Hz (wired by the builder).
    """

    def __init__(
        self,
        codecs: list[str] | str = "mp3",
        bit_rates: list[int] | None = None,
        codec_rate: int | None = None,
        sample_rate: int = 16000,
    ):
        check_sample_rate(sample_rate)
        names = [codecs] if isinstance(codecs, str) else list(codecs)
        if not names:
            raise ValueError("codecs needs at least one codec name")
        for name in names:
            check_codec(name)
            allowed = CODECS[name][3]
            if codec_rate is not None and allowed is not None and codec_rate not in allowed:
                raise ValueError(f"codec {name!r} runs at {allowed} Hz, not codec_rate={codec_rate}")
        if bit_rates is not None and (not bit_rates or any(int(b) <= 0 for b in bit_rates)):
            raise ValueError(f"bit_rates must be a non-empty list of positive bit/s, got {bit_rates!r}")
        self.codecs = names
        self.bit_rates = [int(b) for b in bit_rates] if bit_rates else None
        self.codec_rate = codec_rate
        self.sample_rate = sample_rate
        for name in names:  # every setting once now: a refused bit rate fails the build, and delays are cached
            for bit_rate in self.bit_rates or [None]:
                rate = codec_rate or CODECS[name][2]
                chosen = self._bit_rate(name, bit_rate)
                try:
                    _delay(name, rate, chosen if chosen is not None else CODECS[name][4])
                except Exception as exc:  # noqa: BLE001 - FFmpeg refuses settings with assorted errors
                    raise ValueError(f"codec {name!r} refused bit rate {chosen} at {rate} Hz: {exc}") from None

    @staticmethod
    def _bit_rate(codec: str, bit_rate: int | None) -> int | None:
        """The bit rate ``codec`` runs at when ``bit_rate`` is asked for: None for the fixed-rate
        codecs; for AMR the nearest of its modes."""
        if bit_rate is None or codec in ("alaw", "mulaw", "g722", "gsm"):
            return None
        if codec == "amr_nb":
            return min(_AMR_NB_RATES, key=lambda mode: abs(mode - bit_rate))
        if codec == "amr_wb":
            return min(_AMR_WB_RATES, key=lambda mode: abs(mode - bit_rate))
        return bit_rate

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        codec = self.codecs[int(rng.integers(len(self.codecs)))]
        bit_rate = None
        if self.bit_rates:
            bit_rate = self._bit_rate(codec, self.bit_rates[int(rng.integers(len(self.bit_rates)))])
        return codec_round_trip(x, self.sample_rate, codec, codec_rate=self.codec_rate, bit_rate=bit_rate)
