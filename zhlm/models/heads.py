"""Pretraining heads on top of the encoder: pooler, MLM, NSP/SOP and SpanBERT's SBO.

The MLM and SBO decoders are tied to the word embeddings (plus their own output bias) and are
applied only at the gathered prediction positions, so the [B,S,V] logits never exist when
``masked_positions`` is given.
"""

import flax.linen as nn
import jax.numpy as jnp

from zhlm.models.layers import (
    ACTIVATION_AXES,
    ACTIVATIONS,
    LOGIT_AXES,
    LayerNorm,
    ModelConfig,
    dense,
)


def gather(x, positions):
    """x [B,S,H], positions [B,P] -> [B,P,H]."""
    return jnp.take_along_axis(x, positions[..., None].astype(jnp.int32), axis=1)


class Pooler(nn.Module):
    """tanh(W h_[CLS] + b), the input of the sentence head and of classification tasks.

    ``starts`` [B,K] (packed rows): the [CLS] of each instance, pooled [B,K,H]; None: the
    [CLS] at position 0, pooled [B,H]."""

    config: ModelConfig

    @nn.compact
    def __call__(self, sequence_output, starts=None):
        cfg = self.config
        cls = sequence_output[:, 0] if starts is None else gather(sequence_output, starts)
        return jnp.tanh(dense(cfg, cfg.hidden_size, ("embed", "mlp"), "dense")(cls))


class OutputBias(nn.Module):
    """The decoder's own bias over the vocabulary (the weight is the tied embedding), added to
    the logits of the ``vocab_size`` real tokens. The parameter keeps the padded size, so
    checkpoints and shardings do not change with how it is used."""

    config: ModelConfig

    @nn.compact
    def __call__(self, logits):
        bias = self.param(
            "bias",
            nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
            (self.config.padded_vocab_size,),
            self.config.param_dtype,
        )
        return logits.astype(jnp.float32) + bias[: self.config.vocab_size].astype(jnp.float32)


class MLMHead(nn.Module):
    """Transform (Dense, activation, LayerNorm) then the tied decoder; ALBERT's projects H -> E."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x, attend):
        cfg = self.config
        width = cfg.embed_dim or cfg.hidden_size
        axes = ("embed", "factor") if cfg.embed_dim else ("embed", "mlp")
        x = nn.with_logical_constraint(x, ACTIVATION_AXES)
        x = ACTIVATIONS[cfg.hidden_act](dense(cfg, width, axes, "transform")(x))
        x = nn.with_logical_constraint(LayerNorm(cfg, width, name="layer_norm")(x), ACTIVATION_AXES)
        logits = nn.with_logical_constraint(attend(x), LOGIT_AXES)
        return OutputBias(cfg, name="decoder")(logits)


class SpanBoundaryHead(nn.Module):
    """SpanBERT's SBO: predict each span token from the two boundary tokens outside the span
    (positions s-1 and e+1) and a learned embedding of its offset inside the span, through two
    Dense + GELU + LayerNorm layers and the tied decoder with its own bias."""

    config: ModelConfig

    @nn.compact
    def __call__(self, sequence_output, span_left, span_right, span_offset, attend):
        cfg = self.config
        offsets = nn.Embed(
            cfg.sbo_max_span,
            cfg.sbo_position_dim,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            embedding_init=nn.with_logical_partitioning(
                nn.initializers.normal(cfg.initializer_range), ("norm", "factor")
            ),
            name="position_embeddings",
        )(jnp.clip(span_offset, 0, cfg.sbo_max_span - 1))
        x = jnp.concatenate(
            [gather(sequence_output, span_left), gather(sequence_output, span_right), offsets], -1
        )
        x = nn.with_logical_constraint(x, ACTIVATION_AXES)
        for i in range(2):
            x = dense(cfg, cfg.hidden_size, ("mlp", "embed"), f"dense_{i}")(x)
            x = LayerNorm(cfg, cfg.hidden_size, name=f"layer_norm_{i}")(ACTIVATIONS["gelu"](x))
            x = nn.with_logical_constraint(x, ACTIVATION_AXES)
        logits = nn.with_logical_constraint(attend(x), LOGIT_AXES)
        return OutputBias(cfg, name="decoder")(logits)
