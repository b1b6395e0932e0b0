"""Frontends: waveform → features, first in the chain (importing this package registers them).

=============  ==========================================  ====================================
name           what                                        output
=============  ==========================================  ====================================
raw            the waveform (optional normalisation)       waveform ``[B, T]``
spectrogram    (log) magnitude/power STFT                  sequence ``[B, frames, n_fft//2+1]``
log_mel        log mel filterbank energies                 sequence ``[B, frames, n_mels]``
lfcc           linear-frequency cepstra (ASVspoof)         sequence ``[B, frames, 60]``
mfcc           mel-frequency cepstra                       sequence ``[B, frames, n_mfcc(×3)]``
sinc           SincNet/RawNet2 learnable band-pass convs   channels ``[B, C, T']``
ssl            wav2vec 2.0 / HuBERT / WavLM (transformers)  sequence ``[B, frames, hidden]``
=============  ==========================================  ====================================

The spectral frontends share one base (``spectral.py``: STFT settings, pre-emphasis, masking, the
floored log and the mel filterbank), one STFT (a convolution with a windowed DFT basis, ``stft.py``),
the filterbanks (``filterbanks.py``) and the cepstral helpers (``cepstral.py``).
"""

from . import fairseq_weights  # noqa: F401 - registers the fairseq_wav2vec2 checkpoint format
from .lfcc import LFCC
from .log_mel import LogMel
from .mfcc import MFCC
from .raw import RawWaveform
from .sinc import SincFrontend
from .spectrogram import Spectrogram
from .ssl import SSLFrontend

__all__ = ["LFCC", "MFCC", "LogMel", "RawWaveform", "SSLFrontend", "SincFrontend", "Spectrogram"]
