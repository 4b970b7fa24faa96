"""`fit_token_model`'s batches: full, distinct within an epoch, reshuffled between epochs, so
that ``examples_seen`` (steps × batch) counts the sequences a run trained on exactly."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnbench.toolkit.training import TrainConfig, fit_token_model


class Recorder(nn.Module):
    """A token model that remembers the first token of every sequence it was given (each
    training sequence starts with its own index)."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.table = nn.Embedding(vocab, vocab)
        self.seen: list[list[int]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.seen.append(x[:, 0].tolist())
        return self.table(x)


@pytest.mark.parametrize("n, batch", [(10, 4), (12, 4), (5, 5)])
def test_every_step_is_a_full_batch_of_distinct_sequences_and_epochs_drop_the_remainder(n, batch):
    inputs = torch.arange(n).unsqueeze(1).repeat(1, 3)
    model = Recorder(n)
    steps = 7
    cfg = TrainConfig(steps=steps, batch_size=batch, lr=1e-3)
    outcome = fit_token_model(model, inputs, inputs, cfg, device=torch.device("cpu"), seed=0)
    assert [len(b) for b in model.seen] == [batch] * steps
    assert outcome.examples == steps * batch
    per_epoch = n // batch
    for epoch in range(0, steps, per_epoch):
        drawn = sum(model.seen[epoch : epoch + per_epoch], [])
        assert len(set(drawn)) == len(drawn)  # no sequence twice in one epoch


def test_fewer_sequences_than_a_batch_is_refused():
    inputs = torch.zeros(3, 2, dtype=torch.long)
    cfg = TrainConfig(steps=1, batch_size=4)
    with pytest.raises(ValueError, match="a batch of 4 needs at least as many sequences; got 3"):
        fit_token_model(Recorder(1), inputs, inputs, cfg, device=torch.device("cpu"), seed=0)
