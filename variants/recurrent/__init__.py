"""Recurrent mixers with data-dependent gates (issue #42): the delta rule and its gated form
(`delta`), gated linear attention and Mamba-2's state-space duality (`gla`), the mesa layer
(`mesa`). Each is a variant core: the shared layer projects q, k, v and the gates."""
