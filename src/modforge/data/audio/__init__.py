"""Audio data: reading and resampling, fixed-length cropping, variable-length batches,
dataset formats (ASVspoof, manifests, In-the-Wild), augmentation and a synthetic
spoofing corpus."""
