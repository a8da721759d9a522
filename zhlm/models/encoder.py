"""The transformer stack: one ``nn.scan`` over layer applications, whatever the sharing.

Parameters are broadcast into the scan (``variable_broadcast='params'``) and each block picks
its set by the application index (see ``layers.py``), so BERT's L stacked layers and ALBERT's
shared layer are one compiled loop body: compile time does not grow with depth.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from zhlm.models.layers import ModelConfig, TransformerLayer, attention_mask_of

REMAT_POLICIES = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


class Encoder(nn.Module):
    """Runs ``config.applications`` post-LN layers over ``x`` [B,S,H] with key mask [B,S];
    with ``segment_ids`` [B,S] (packed rows), attention stays within each segment."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x, attention_mask, deterministic=True, segment_ids=None):
        cfg = self.config
        layer = TransformerLayer
        if cfg.remat != "none":
            layer = nn.remat(layer, policy=REMAT_POLICIES[cfg.remat], prevent_cse=False)
        stack = nn.scan(
            layer,
            variable_broadcast="params",
            split_rngs={"params": False, "dropout": True},
            in_axes=(0, nn.broadcast),
            length=cfg.applications,
        )
        mask = attention_mask_of(attention_mask, segment_ids)
        steps = jnp.arange(cfg.applications, dtype=jnp.int32)
        x, _ = stack(cfg, deterministic, name="layers")(x, steps, mask)
        return x
