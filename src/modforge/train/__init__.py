"""Training: the Trainer, callbacks, checkpoints, metrics, optimizers and schedulers."""
