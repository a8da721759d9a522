"""The building blocks of the encoder: embeddings, attention, feed-forward, the post-LN layer.

Every parameter is created with logical axis names (``vocab, embed, mlp, heads, kv, layers,
factor, norm``) so that one rules table maps the whole model onto a device mesh.

Layer parameters are *parameter sets* stacked on a leading ``layers`` axis: a block owns
``num_sets`` copies and each application of the layer picks one by index. Stacked BERT layers
(``num_sets = L``), ALBERT's fully shared stack (``num_sets = 1``), ALBERT's layer groups and the
attention-only / FFN-only sharing of ALBERT Table 4 are then the same code with different set
counts, run by one ``nn.scan`` in ``encoder.py``.
"""

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from zhlm.errors import UserError

# Sharding constraints on activations. Besides steering layouts, they are needed for
# correctness: without them on the heads' inputs and logits, XLA picked a layout for the tied
# decoder's [B,P,H] x [V,H] product that gave wrong gradients (loss right, embedding and head
# gradients off by up to 0.18) on a (data=2, fsdp=2, tensor=2) mesh, with Shardy and GSPMD
# alike; tests/train/test_step.py::test_sharded_equals_unsharded is the guard.
ACTIVATION_AXES = ("batch", "length", None)  # [B,S,H] hidden states, [B,P,H] head inputs
LOGIT_AXES = ("batch", "length", "vocab")  # [B,P,V] vocabulary logits

ACTIVATIONS = {
    "gelu": functools.partial(jax.nn.gelu, approximate=False),  # HF "gelu": exact erf
    "gelu_new": functools.partial(jax.nn.gelu, approximate=True),  # HF "gelu_new": tanh
    "relu": jax.nn.relu,  # ERNIE 1.0
}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The encoder's dimensions and options, resolved from ``config.model`` by ``build``."""

    num_layers: int
    hidden_size: int
    num_heads: int
    mlp_dim: int
    embed_dim: int  # 0: embeddings are hidden_size wide, no projection (BERT)
    vocab_size: int  # tokens the vocabulary has: logits, sampling and exports use exactly these
    vocab_multiple: int  # word-embedding rows are padded to a multiple of this (MXU tiles)
    max_position_embeddings: int
    type_vocab_size: int
    hidden_act: str
    layer_norm_eps: float
    dropout_rate: float
    attention_dropout_rate: float
    initializer_range: float
    share_layers: str
    num_groups: int
    inner_group_num: int
    sentence_head: str
    span_boundary_head: bool
    sbo_position_dim: int
    sbo_max_span: int
    dtype: jnp.dtype
    param_dtype: jnp.dtype
    remat: str
    dropout_rng: str  # PRNG of dropout's bits: threefry (exact on any mesh) or rbg
    attention_impl: str  # the attention core: xla, or flash (zhlm.models.flash, on TPU)

    @property
    def padded_vocab_size(self) -> int:
        """Rows of the word embedding and the decoder bias: ``vocab_size`` rounded up to
        ``vocab_multiple``, so the decoder matmul tiles the MXU and a tensor axis up to that
        size divides the vocabulary. The padded rows are never looked up (ids < vocab_size),
        their logits are cut off before any loss or output, and exports drop them."""
        return -(-self.vocab_size // self.vocab_multiple) * self.vocab_multiple

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def applications(self) -> int:
        """Layer applications per forward pass: ALBERT runs every inner layer of a group."""
        return self.num_layers * self.inner_group_num

    def num_sets(self, block: str) -> int:
        """How many distinct parameter sets ``block`` ('attention' or 'ffn') has."""
        shared = self.share_layers == "all" or self.share_layers == block
        return self.num_groups * self.inner_group_num if shared else self.applications

    def set_index(self, block: str, application):
        """Which parameter set of ``block`` application ``j`` uses (traced or Python int).

        ALBERT (HF ``AlbertTransformer``): hidden layer ``i = j // inner`` uses group
        ``i * G // L`` and within it inner layer ``j % inner``.
        """
        if self.num_sets(block) == self.applications:
            return application
        inner = self.inner_group_num
        group = (application // inner) * self.num_groups // self.num_layers
        return group * inner + application % inner


def init_normal(config: ModelConfig):
    return nn.initializers.truncated_normal(config.initializer_range)


def stacked_param(module, name, init, shape, axes, num_sets, dtype):
    """A parameter with ``num_sets`` copies on a leading 'layers' axis."""
    return module.param(
        name,
        nn.with_logical_partitioning(init, ("layers",) + axes),
        (num_sets,) + tuple(shape),
        dtype,
    )


class StackedDense(nn.Module):
    """Dense map over the last ``len(in_shape)`` input dims, one of ``num_sets`` weight sets.

    ``in_shape`` / ``features`` may be multi-dimensional (heads x head_dim) so attention keeps
    named head axes for tensor parallelism without reshapes.
    """

    in_shape: tuple
    features: tuple
    axes: tuple  # logical names of the kernel dims (input dims, then output dims)
    num_sets: int
    config: ModelConfig

    @nn.compact
    def __call__(self, x, index):
        cfg = self.config
        kernel = stacked_param(
            self,
            "kernel",
            init_normal(cfg),
            self.in_shape + self.features,
            self.axes,
            self.num_sets,
            cfg.param_dtype,
        )
        bias = stacked_param(
            self,
            "bias",
            nn.initializers.zeros,
            self.features,
            self.axes[len(self.in_shape) :],
            self.num_sets,
            cfg.param_dtype,
        )
        kernel = jax.lax.dynamic_index_in_dim(kernel, index, keepdims=False)
        bias = jax.lax.dynamic_index_in_dim(bias, index, keepdims=False)
        x, kernel, bias = nn.dtypes.promote_dtype(x, kernel, bias, dtype=cfg.dtype)
        n_in = len(self.in_shape)
        y = jax.lax.dot_general(
            x, kernel, ((tuple(range(x.ndim - n_in, x.ndim)), tuple(range(n_in))), ((), ()))
        )
        return y + bias


class StackedLayerNorm(nn.Module):
    """LayerNorm with the configured epsilon (Flax's default 1e-6 differs from BERT's 1e-12)."""

    num_sets: int
    config: ModelConfig

    @nn.compact
    def __call__(self, x, index):
        cfg = self.config
        h = cfg.hidden_size
        scale = stacked_param(
            self, "scale", nn.initializers.ones, (h,), ("norm",), self.num_sets, cfg.param_dtype
        )
        bias = stacked_param(
            self, "bias", nn.initializers.zeros, (h,), ("norm",), self.num_sets, cfg.param_dtype
        )
        scale = jax.lax.dynamic_index_in_dim(scale, index, keepdims=False)
        bias = jax.lax.dynamic_index_in_dim(bias, index, keepdims=False)
        return layer_norm(x, scale, bias, cfg)


def layer_norm(x, scale, bias, config: ModelConfig):
    """Statistics in float32 whatever the compute dtype; output in the compute dtype."""
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = jnp.square(x32 - mean).mean(-1, keepdims=True)
    y = (x32 - mean) * jax.lax.rsqrt(var + config.layer_norm_eps)
    y = y * scale.astype(jnp.float32) + bias.astype(jnp.float32)
    return y.astype(config.dtype)


class LayerNorm(nn.Module):
    """Unstacked LayerNorm (embeddings and heads), same numerics as ``StackedLayerNorm``."""

    config: ModelConfig
    features: int

    @nn.compact
    def __call__(self, x):
        cfg = self.config
        scale = self.param(
            "scale",
            nn.with_logical_partitioning(nn.initializers.ones, ("norm",)),
            (self.features,),
            cfg.param_dtype,
        )
        bias = self.param(
            "bias",
            nn.with_logical_partitioning(nn.initializers.zeros, ("norm",)),
            (self.features,),
            cfg.param_dtype,
        )
        return layer_norm(x, scale, bias, cfg)


def dense(config: ModelConfig, features, axes, name):
    """An ordinary (unstacked) Dense with logical axes, for embeddings and heads."""
    return nn.Dense(
        features,
        dtype=config.dtype,
        param_dtype=config.param_dtype,
        kernel_init=nn.with_logical_partitioning(init_normal(config), axes),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, axes[1:]),
        name=name,
    )


class Embeddings(nn.Module):
    """Word + position + token-type embeddings, LayerNorm, dropout; ALBERT's E -> H projection.

    With ``embed_dim > 0`` the tables are E wide and a Dense maps them to H (HF ALBERT's
    ``embedding_hidden_mapping_in``), so E = H still has the projection, as in ALBERT.
    """

    config: ModelConfig

    def setup(self):
        cfg = self.config
        width = cfg.embed_dim or cfg.hidden_size
        axes = ("vocab", "factor") if cfg.embed_dim else ("vocab", "embed")
        embed = functools.partial(
            nn.Embed,
            features=width,
            dtype=cfg.dtype,
            param_dtype=cfg.param_dtype,
            embedding_init=nn.with_logical_partitioning(init_normal(cfg), axes),
        )
        self.word_embeddings = embed(cfg.padded_vocab_size)
        self.position_embeddings = embed(cfg.max_position_embeddings)
        self.token_type_embeddings = embed(cfg.type_vocab_size)
        self.layer_norm = LayerNorm(cfg, width)
        self.dropout = nn.Dropout(cfg.dropout_rate)
        if cfg.embed_dim:
            self.projection = dense(cfg, cfg.hidden_size, ("factor", "embed"), None)

    def __call__(self, input_ids, token_type_ids, deterministic, segment_ids=None):
        """``segment_ids`` [B,S] (packed rows, ``zhlm.data.packing``): positions restart at 0
        where the segment changes; None: positions 0..S-1."""
        seq_len = input_ids.shape[-1]
        if seq_len > self.config.max_position_embeddings:
            raise UserError(
                f"sequence length {seq_len} exceeds max_position_embeddings "
                f"{self.config.max_position_embeddings}"
            )
        x = jnp.take(self._table(), input_ids, axis=0)
        if segment_ids is None:
            x = x + self.position_embeddings(jnp.arange(seq_len))[None]
        else:
            x = x + self.position_embeddings(segment_positions(segment_ids))
        x = x + self.token_type_embeddings(token_type_ids)
        x = self.dropout(self.layer_norm(x), deterministic=deterministic)
        if self.config.embed_dim:
            x = self.projection(x)
        return x

    def _table(self):
        """The word embedding in the compute dtype, split over the vocabulary only. Stored,
        its hidden axis is split too (the 'embed' rule, fsdp); used in that layout, XLA
        resharded the looked-up activations with all-to-alls and gathered the table again for
        each use by the tied decoder. One constraint gives the lookup and both decoders the
        same gathered copy."""
        table = self.word_embeddings.embedding.astype(self.config.dtype)
        return nn.with_logical_constraint(table, ("vocab", None))

    def attend(self, x):
        """The tied MLM decoder: scores against the ``vocab_size`` real word embeddings. The
        padded rows are cut from the table, not from the [.., V] scores: slicing the scores
        copies the largest tensor of the step forward and pads its gradient back."""
        table = self._table()[: self.config.vocab_size]
        return jnp.dot(x.astype(self.config.dtype), table.T)


def segment_positions(segment_ids):
    """[B,S] position of each token within its segment: 0 where the segment id changes."""
    pos = jnp.arange(segment_ids.shape[-1], dtype=jnp.int32)
    before = jnp.concatenate([segment_ids[:, :1] - 1, segment_ids[:, :-1]], axis=1)
    start = jax.lax.cummax(jnp.where(segment_ids != before, pos, 0), axis=1)
    return pos - start


def attention_mask_of(attention_mask, segment_ids=None):
    """The boolean mask attention takes: [B,1,1,S] over keys from ``attention_mask`` [B,S];
    with ``segment_ids`` [B,S], block-diagonal [B,1,S,S]: a token attends to the tokens of its
    own segment only (padding, segment 0, to padding, so no row is empty)."""
    if segment_ids is None:
        return attention_mask[:, None, None, :].astype(jnp.bool_)
    return (segment_ids[:, :, None] == segment_ids[:, None, :])[:, None]


def attention(q, k, v, mask, dropout: nn.Dropout, deterministic: bool):
    """Scaled dot-product attention; the fused ``jax.nn`` path whenever no dropout applies."""
    if deterministic or dropout.rate == 0.0:
        return jax.nn.dot_product_attention(q, k, v, mask=mask)
    return attention_with_dropout(q, k, v, mask, lambda p: dropout(p, deterministic=False))


def attention_flash(q, k, v, mask, rate: float, rng):
    """The attention core as :mod:`zhlm.models.flash`'s kernels, with dropout ``rate`` drawn
    from ``rng`` (None: no dropout) as a [B, H, S, S] keep mask sharded like the scores."""
    b, s, h, _ = q.shape
    keep = None
    if rate and rng is not None:
        keep = jax.random.bernoulli(rng, 1.0 - rate, (b, h, s, s))
        keep = nn.with_logical_constraint(keep, ("batch", "heads", None, None))
    else:
        rate = 0.0
    # Imported here: Pallas' TPU lowering takes about half a second to import, which every
    # program on the CPU (the xla core) would pay for nothing.
    from zhlm.models import flash

    return flash.sharded(q, k, v, mask, keep, rate)


def attention_with_dropout(q, k, v, mask, drop):
    """The unfused path: ``jax.nn.dot_product_attention`` has no dropout on the probabilities.
    Softmax in float32 whatever the compute dtype, as the fused path does."""
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) * q.shape[-1] ** -0.5
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    probs = drop(jax.nn.softmax(logits, axis=-1)).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


class TransformerLayer(nn.Module):
    """One post-LN BERT layer, written as an ``nn.scan`` body over layer applications.

    ``carry`` is the hidden state; ``application`` is this step's index, which picks each
    block's parameter set. ``mask`` is the [B,1,1,S] boolean key mask, or [B,1,S,S] for packed
    rows (``attention_mask_of``).
    """

    config: ModelConfig
    deterministic: bool

    @nn.compact
    def __call__(self, carry, application, mask):
        cfg = self.config
        h, a, d = cfg.hidden_size, cfg.num_heads, cfg.head_dim
        drop = nn.Dropout(cfg.dropout_rate)
        # Activations: batch over the data axes, hidden replicated ('embed' would map it to
        # 'fsdp', which the batch already uses).
        x = nn.with_logical_constraint(carry, ACTIVATION_AXES)

        sets, idx = cfg.num_sets("attention"), cfg.set_index("attention", application)
        qkv = functools.partial(StackedDense, (h,), (a, d), ("embed", "heads", "kv"), sets, cfg)
        q = qkv(name="query")(x, idx)
        k = qkv(name="key")(x, idx)
        v = qkv(name="value")(x, idx)
        if cfg.attention_impl == "flash":
            train = not self.deterministic and cfg.attention_dropout_rate
            rng = self.make_rng("dropout") if train else None
            ctx = attention_flash(q, k, v, mask, cfg.attention_dropout_rate, rng)
        else:
            ctx = attention(
                q, k, v, mask, nn.Dropout(cfg.attention_dropout_rate), self.deterministic
            )
        out = StackedDense(
            (a, d), (h,), ("heads", "kv", "embed"), sets, cfg, name="attention_output"
        )(ctx, idx)
        out = drop(out, deterministic=self.deterministic)
        x = StackedLayerNorm(sets, cfg, name="attention_layer_norm")(x + out, idx)

        sets, idx = cfg.num_sets("ffn"), cfg.set_index("ffn", application)
        y = StackedDense((h,), (cfg.mlp_dim,), ("embed", "mlp"), sets, cfg, name="intermediate")(
            x, idx
        )
        y = ACTIVATIONS[cfg.hidden_act](y)
        y = StackedDense((cfg.mlp_dim,), (h,), ("mlp", "embed"), sets, cfg, name="output")(y, idx)
        y = drop(y, deterministic=self.deterministic)
        x = StackedLayerNorm(sets, cfg, name="output_layer_norm")(x + y, idx)
        return nn.with_logical_constraint(x, ACTIVATION_AXES), None
