"""Tests of training, checkpoints and the trainer's checks (``spmmgnn.training``)."""
