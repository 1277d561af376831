"""Evaluation of a ``Trainer``'s model: loss and accuracy on the train / val / test splits
with dropout off, each split's sums computed where the logits are (the grid's backend: one
host copy of six numbers on a device) and summed over the ranks holding distinct rows."""

from __future__ import annotations

import torch

from .data import SPLITS
from .metrics import reduce_evaluation


class Evaluation:
    """The evaluation of a ``Trainer`` (its model, data and each split's row indices)."""

    def split_rows(self) -> list:
        """Each split's local row indices (in ``SPLITS`` order), found once."""
        return [torch.nonzero(self.backend.place(self.data.masks[s]), as_tuple=True)[0]
                for s in SPLITS]

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Global loss/accuracy on train/val/test with dropout off."""
        d = self.data
        self.model.eval()
        logits = self.forward(self.x, d.op, vertex_ids=self.vertex_ids,
                              label_input=self.label_input)
        local = self.backend.evaluation_sums(logits, self.labels, self.rows, d.op.stats)
        return reduce_evaluation(local, d.counts, self.reduce_comm)
