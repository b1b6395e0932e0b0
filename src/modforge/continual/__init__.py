"""Continual learning: task sequences built from classification datasets, replay buffers."""
