"""From ``config.model`` to a ``Model``: resolve the size table, check every option once.

Checks that would otherwise surface as a shape error deep inside XLA (hidden not divisible by
heads, unknown activation, impossible group counts) fail here with a message naming the key.
"""

import math

import flax.linen as nn
import flax.traverse_util
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from zhlm.errors import UserError
from zhlm.models.encoder import REMAT_POLICIES
from zhlm.models.layers import ACTIVATIONS, ModelConfig
from zhlm.models.model import Model
from zhlm.models.sizes import SIZES

SHARING = ("none", "all", "attention", "ffn")
SENTENCE_HEADS = ("nsp", "sop", "none")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
DROPOUT_RNGS = ("threefry", "rbg")
ATTENTION_IMPLS = ("xla", "flash")
# Parameters with a vocabulary axis first, padded to ModelConfig.padded_vocab_size rows.
VOCAB_LEAVES = ("embeddings/word_embeddings/embedding", "mlm/decoder/bias", "sbo/decoder/bias")


def _choice(name, value, allowed):
    if value not in allowed:
        raise UserError(f"config.model.{name}={value!r}; expected one of {', '.join(allowed)}")
    return value


def _positive(name, value):
    if int(value) < 1:
        raise UserError(f"config.model.{name}={value!r}; expected an integer >= 1")
    return int(value)


def model_config(model: ml_collections.ConfigDict) -> ModelConfig:
    """Resolves ``config.model`` (size name plus explicit overrides) into a ``ModelConfig``."""
    if model.size not in SIZES and not (model.num_layers and model.hidden_size and model.num_heads):
        raise UserError(
            f"config.model.size={model.size!r} is not one of {', '.join(SIZES)}; a custom size "
            "needs num_layers, hidden_size and num_heads"
        )
    dims = dict(SIZES.get(model.size, {}))
    for key in ("num_layers", "hidden_size", "num_heads"):
        if model[key]:
            dims[key] = model[key]
    if dims["hidden_size"] % dims["num_heads"]:
        raise UserError(
            f"hidden size {dims['hidden_size']} is not divisible by {dims['num_heads']} heads"
        )
    share = _choice("share_layers", model.share_layers, SHARING)
    if share == "none" and (model.num_groups != 1 or model.inner_group_num != 1):
        raise UserError("num_groups / inner_group_num > 1 need share_layers='all' (ALBERT)")
    if not 1 <= model.num_groups <= dims["num_layers"] or model.inner_group_num < 1:
        raise UserError(
            f"num_groups={model.num_groups} must be in [1, num_layers={dims['num_layers']}] "
            f"and inner_group_num={model.inner_group_num} >= 1"
        )
    return ModelConfig(
        **dims,
        mlp_dim=model.mlp_dim or 4 * dims["hidden_size"],
        embed_dim=model.embed_dim,
        vocab_size=model.vocab_size,
        vocab_multiple=_positive("vocab_multiple", model.vocab_multiple),
        max_position_embeddings=model.max_position_embeddings,
        type_vocab_size=model.type_vocab_size,
        hidden_act=_choice("hidden_act", model.hidden_act, tuple(ACTIVATIONS)),
        layer_norm_eps=float(model.layer_norm_eps),
        dropout_rate=float(model.dropout_rate),
        attention_dropout_rate=float(model.attention_dropout_rate),
        initializer_range=float(model.initializer_range),
        share_layers=share,
        num_groups=model.num_groups,
        inner_group_num=model.inner_group_num,
        sentence_head=_choice("sentence_head", model.sentence_head, SENTENCE_HEADS),
        span_boundary_head=bool(model.span_boundary_head),
        sbo_position_dim=model.sbo_position_dim,
        sbo_max_span=model.sbo_max_span,
        dtype=DTYPES[_choice("dtype", model.dtype, tuple(DTYPES))],
        param_dtype=DTYPES[_choice("param_dtype", model.param_dtype, tuple(DTYPES))],
        remat=_choice("remat", model.remat, tuple(REMAT_POLICIES)),
        dropout_rng=_choice("dropout_rng", model.dropout_rng, DROPOUT_RNGS),
        attention_impl=_choice("attention_impl", model.attention_impl, ATTENTION_IMPLS),
    )


def build_model(config: ml_collections.ConfigDict) -> Model:
    """The model for a full zhlm config (``config.model`` is what it reads)."""
    return Model(model_config(config.model))


def dummy_inputs(seq_len: int = 8, batch: int = 1):
    """``(input_ids, token_type_ids, attention_mask)`` of zeros: what every ``init`` traces
    with (pretraining and task models take the same three, and shapes do not depend on them)."""
    ids = jnp.zeros((batch, seq_len), jnp.int32)
    return ids, ids, ids


def abstract_variables(model: nn.Module, seq_len: int = 8, batch: int = 1):
    """Shapes (and logical-axis boxes) of the model's variables without allocating them."""
    return jax.eval_shape(lambda: model.init(jax.random.key(0), *dummy_inputs(seq_len, batch)))


def count_params(model: Model) -> dict:
    """Parameter counts by top-level component (embeddings, encoder, pooler, mlm, sentence,
    sbo), from shapes only: a 235M-parameter model costs no memory to count. The vocabulary's
    padding rows are not counted: they are storage, not parameters of the model."""
    params = nn.unbox(abstract_variables(model))["params"]
    counts = {
        name: sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(tree))
        for name, tree in params.items()
    }
    cfg, flat = model.config, flax.traverse_util.flatten_dict(params, sep="/")
    for key in VOCAB_LEAVES:
        if key in flat:
            x = flat[key]
            counts[key.split("/")[0]] -= (x.shape[0] - cfg.vocab_size) * math.prod(x.shape[1:])
    return counts


def fit_vocab(params: dict, cfg: ModelConfig) -> dict:
    """``params`` with each vocabulary-axis leaf (:data:`VOCAB_LEAVES`) given
    ``cfg.padded_vocab_size`` rows: padding rows added as zeros or dropped. Parameters read
    from Hugging Face or saved with another ``vocab_multiple`` then fit this model; rows of
    real tokens are never dropped (a table shorter than ``vocab_size`` is left for the shape
    check to report). Works on nested or '/'-flattened dicts of host or device arrays."""
    nested = any(isinstance(v, dict) for v in params.values())
    flat = flax.traverse_util.flatten_dict(params, sep="/") if nested else dict(params)
    rows = cfg.padded_vocab_size
    for key in VOCAB_LEAVES:
        x = flat.get(key)
        if x is None or x.shape[0] == rows or x.shape[0] < cfg.vocab_size:
            continue
        if x.shape[0] > rows:
            flat[key] = x[:rows]
        else:
            pad = [(0, rows - x.shape[0])] + [(0, 0)] * (x.ndim - 1)
            flat[key] = (jnp.pad if isinstance(x, jax.Array) else np.pad)(x, pad)
    return flax.traverse_util.unflatten_dict(flat, sep="/") if nested else flat


def dropout_rngs(rng, cfg: ModelConfig) -> dict:
    """The ``rngs`` of a training ``apply``: dropout's key, in ``cfg.dropout_rng``'s PRNG.

    threefry (JAX's default) gives the same bits on any mesh, so a sharded step equals the
    unsharded one exactly. ``rbg`` derives an RngBitGenerator key from ``rng`` (so it is
    still fresh every step and reproducible on a fixed mesh): XLA generates its bits with its
    RngBitGenerator instead of threefry's hash rounds, and they may then depend on how the
    tensor is sharded. By XLA's cost model it saves 3% of BERT-base's step FLOPs on v5e but
    adds bytes (``tools/bench.py tpu --rbg``); not yet measured on a TPU, so not the default.
    Masking never uses it."""
    if cfg.dropout_rng == "rbg":
        rng = jax.random.wrap_key_data(jax.random.bits(rng, (4,), jnp.uint32), impl="rbg")
    return {"dropout": rng}


def init_variables(model: nn.Module, rng, seq_len: int = 8):
    """Concrete fresh variables, unboxed (unsharded; the train loop uses sharded init)."""
    return nn.unbox(jax.jit(model.init)(rng, *dummy_inputs(seq_len)))
