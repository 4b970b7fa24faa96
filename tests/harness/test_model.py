"""The shared model's options that let a task match its paper's model (recall: Zoology's)."""

from __future__ import annotations

import pytest
import torch

from attnbench.toolkit.model import ModelConfig, SequenceModel

ZOOLOGY = dict(mlp=False, positions=False, short_conv=3, tie_embeddings=True, n_heads=1)


def _model(**kw):
    cfg = dict(d_model=16, n_layers=2, max_len=32, vocab_size=20, output_dim=20)
    return SequenceModel(ModelConfig(**{**cfg, **kw}), "softmax", {}).eval()


def test_zoology_configuration_is_causal_with_the_convolution():
    """Changing tokens from position 10 on leaves every output before 10 unchanged, and the
    convolution does carry the previous tokens (an output at 10 changes with token 9)."""
    torch.manual_seed(0)
    model = _model(**ZOOLOGY)
    x = torch.randint(0, 20, (3, 24))
    later = x.clone()
    later[:, 10:] = torch.randint(0, 20, (3, 14))
    torch.testing.assert_close(model(x)[:, :10], model(later)[:, :10])
    earlier = x.clone()
    earlier[:, 9] = (x[:, 9] + 1) % 20
    assert not torch.allclose(model(x)[:, 10], model(earlier)[:, 10])


def test_options_remove_and_share_what_they_say():
    plain = _model()
    names = {n for n, _ in plain.named_parameters()}
    assert "pos" in names and any(".mlp." in n for n in names) and "head.bias" in names
    zoo = _model(**ZOOLOGY)
    names = {n for n, _ in zoo.named_parameters()}
    assert "pos" not in names and not any(".mlp." in n for n in names)
    assert any(".conv.conv." in n for n in names)
    assert zoo.head.weight is zoo.embed.weight and zoo.head.bias is None
    assert zoo.embed.weight.std().item() == pytest.approx(0.02, rel=0.2)  # 320 draws: ±4% std
    # without positions there is no length limit from the table (the variant may still have one)
    assert zoo(torch.randint(0, 20, (1, 40))).shape == (1, 40, 20)


def test_tying_needs_matching_sizes():
    with pytest.raises(ValueError, match="tie_embeddings needs output_dim == vocab_size"):
        _model(tie_embeddings=True, output_dim=7)


def test_embedding_dropout_only_while_training():
    model = _model(**ZOOLOGY, embed_dropout=0.5)
    x = torch.randint(0, 20, (2, 12))
    torch.testing.assert_close(model(x), model(x))  # eval: deterministic
    model.train()
    assert not torch.allclose(model(x), model(x))
