"""The one pretraining model every recipe uses: embeddings -> scanned encoder -> heads.

What differs between BERT, RoBERTa-wwm, ERNIE, SpanBERT, ALBERT and MacBERT here is only
``ModelConfig``: embedding factorisation, sharing, activation, epsilon and which heads exist.
"""

import flax.linen as nn
import jax.numpy as jnp

from zhlm.models.encoder import Encoder
from zhlm.models.heads import MLMHead, Pooler, SpanBoundaryHead, dense, gather
from zhlm.models.layers import Embeddings, ModelConfig


class Model(nn.Module):
    """``apply(variables, input_ids, token_type_ids, attention_mask, masked_positions=None,
    deterministic=True)`` -> dict with ``sequence_output`` [B,S,H], ``pooled_output`` [B,H],
    ``mlm_logits`` ([B,P,V] at ``masked_positions``, else [B,S,V]), ``sentence_logits`` [B,2]
    when the recipe has NSP/SOP, and ``sbo_logits`` [B,P,V] when it has the span boundary head
    and ``span_left``, ``span_right``, ``span_offset`` [B,P] are given. Logits are float32.

    Packed rows (``zhlm.data.packing``) also give ``segment_ids`` [B,S] (positions restart and
    attention stays within each instance) and ``instance_starts`` [B,K] (each instance's [CLS]):
    then ``pooled_output`` is [B,K,H] and ``sentence_logits`` [B,K,2]."""

    config: ModelConfig

    def setup(self):
        cfg = self.config
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg)
        self.pooler = Pooler(cfg)
        self.mlm = MLMHead(cfg)
        if cfg.sentence_head != "none":
            self.sentence = dense(cfg, 2, ("embed", "norm"), None)
        if cfg.span_boundary_head:
            self.sbo = SpanBoundaryHead(cfg)

    def encode(
        self, input_ids, token_type_ids, attention_mask, deterministic=True, segment_ids=None
    ):
        """The sequence output [B,S,H]. The fine-tuning models (``zhlm.finetune.kinds``)
        subclass this model and call it too, so their encoder is this one by construction."""
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        if attention_mask is None:
            attention_mask = jnp.ones_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids, deterministic, segment_ids)
        return self.encoder(x, attention_mask, deterministic, segment_ids)

    def __call__(
        self,
        input_ids,
        token_type_ids=None,
        attention_mask=None,
        masked_positions=None,
        deterministic=True,
        span_left=None,
        span_right=None,
        span_offset=None,
        segment_ids=None,
        instance_starts=None,
    ):
        sequence_output = self.encode(
            input_ids, token_type_ids, attention_mask, deterministic, segment_ids
        )
        pooled_output = self.pooler(sequence_output, instance_starts)
        picked = (
            sequence_output
            if masked_positions is None
            else gather(sequence_output, masked_positions)
        )
        out = dict(
            sequence_output=sequence_output,
            pooled_output=pooled_output,
            mlm_logits=self.mlm(picked, self.embeddings.attend),
        )
        if self.config.sentence_head != "none":
            out["sentence_logits"] = self.sentence(pooled_output).astype(jnp.float32)
        if self.config.span_boundary_head and span_left is None and self.is_initializing():
            # The SBO head's parameters must exist even when init sees no spans.
            span_left = span_right = span_offset = jnp.zeros_like(input_ids[:, :1])
        if self.config.span_boundary_head and span_left is not None:
            out["sbo_logits"] = self.sbo(
                sequence_output, span_left, span_right, span_offset, self.embeddings.attend
            )
        return out
