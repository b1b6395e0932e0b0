"""Audio deepfake (spoofing) detection: detection scores, ASVspoof metrics, score files
and DET curves."""
