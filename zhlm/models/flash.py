"""BERT's attention as Pallas TPU kernels (``model.attention_impl="flash"``): the [S, S] scores,
probabilities and their gradients stay in the chip's VMEM instead of going through HBM.

Why: compiled for TPU by libtpu, the XLA attention core of a BERT-base micro-batch (8 x 512,
12 heads, bf16) reads and writes 0.77 GB per layer, forward and backward, about ten times
its inputs and outputs: the [B, H, S, S] scores, probabilities, dropout and their gradients
are each materialised in HBM, and the step is HBM-bound (``zhlm-compile``'s roofline). These
kernels read q, k, v, the key mask and a one-byte dropout mask, and write the output (and in
the backward pass the three gradients); nothing [S, S] in float32 leaves the chip.

How: every BERT recipe has S <= 512, so one (sequence, head) pair's whole [S, S] block fits in
VMEM (a few MB in float32) and the softmax is exact, without flash attention's online
rescaling: the grid is (batch, heads), both parallel. The backward pass recomputes the
probabilities from q and k over the full row and takes ``sum_j P dP`` there, so it needs
neither the output nor the forward's statistics (an [S, 1] array would be padded to 128
lanes in HBM) nor a second pass.

Dropout on the probabilities (BERT's 0.1), which the fused kernels shipped with JAX do not
offer: the keep mask is drawn outside by ``jax.random.bernoulli`` from the layer's dropout key
and enters as int8, so it is threefry's (or rbg's) bits and the same on any mesh, as the XLA
path's are; the kernels apply it to the normalised probabilities exactly as ``nn.Dropout``
does there (kept / (1 - rate), dropped 0), and the backward pass reuses it. Masks cost one byte
per score, read twice, instead of the XLA path's float32 traffic.

Packed rows (``zhlm.data.packing``) need a mask per query, block-diagonal: it enters as a
float32 [S, S] bias per sequence (shared by its heads, 1 MB at 512) instead of the [1, S] key
bias; the kernels add it to the scores the same way, so nothing else changes.

The kernels run per shard: under a mesh, :func:`flash_attention` is wrapped in ``shard_map``
over the batch's and heads' mesh axes (the model's logical rules), since XLA cannot partition a
kernel it does not see into. On a backend other than TPU the same kernels run in Pallas'
interpret mode (slow; what the tests on CPU check against the XLA path).
"""

from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

from zhlm.errors import UserError

MAX_LENGTH = 512  # one (sequence, head) block in VMEM; every recipe's sequences are this or less
_NEG = float(jnp.finfo(jnp.float32).min)  # as the XLA path's masked logits


def flash_attention(q, k, v, mask, keep=None, rate: float = 0.0):
    """Softmax attention of ``q, k, v`` [B, S, H, D] over the keys that ``mask`` [B, 1, 1, S]
    keeps (True: attend), or per query with [B, 1, S, S] (packed rows' block-diagonal); with
    ``rate`` > 0, the probabilities where ``keep`` [B, H, S, S] is False are dropped and the
    rest scaled by 1 / (1 - rate). Returns [B, S, H, D] in ``q``'s dtype; differentiable in
    q, k and v."""
    b, s, h, d = q.shape
    if s > MAX_LENGTH:
        raise UserError(
            f"attention_impl='flash' handles sequences up to {MAX_LENGTH} tokens, got {s}: "
            "use attention_impl='xla'"
        )
    if rate and keep is None:
        raise ValueError("flash_attention: dropout rate given without a keep mask")
    rows = mask.shape[2]  # 1: one key mask for every query; S: a mask per query
    bias = jnp.where(mask.reshape(b, rows, s), 0.0, _NEG).astype(jnp.float32)
    heads_first = [x.transpose(0, 2, 1, 3) for x in (q, k, v)]
    keep8 = keep.astype(jnp.int8) if rate else None
    out = _attention(*heads_first, bias, keep8, float(rate))
    return out.transpose(0, 2, 1, 3)


def sharded(q, k, v, mask, keep=None, rate: float = 0.0):
    """:func:`flash_attention` per shard under the current mesh (``jax.set_mesh``): batch and
    heads split as the model's logical rules split ``batch`` and ``heads``, every sequence and
    head whole on its device. Without a mesh, the plain call."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return flash_attention(q, k, v, mask, keep, rate)
    batch, heads = nn.logical_to_mesh_axes(("batch", "heads"))
    # An axis the mesh does not divide (init's one dummy sequence) stays whole on every device.
    batch, heads = (
        _divides(mesh, axes, n) for axes, n in ((batch, q.shape[0]), (heads, q.shape[2]))
    )
    rows, keys = P(batch, None, heads, None), P(batch, None, None, None)
    scores = P(batch, heads, None, None) if keep is not None else None
    return jax.shard_map(
        functools.partial(flash_attention, rate=rate),
        mesh=mesh,
        in_specs=(rows, rows, rows, keys, scores),
        out_specs=rows,
        check_vma=False,
    )(q, k, v, mask, keep)


def _divides(mesh, axes, n):
    """``axes`` (a PartitionSpec entry) if their devices divide ``n``, else None."""
    names = (axes,) if isinstance(axes, str) else tuple(axes or ())
    return axes if n % math.prod(mesh.shape[name] for name in names) == 0 else None


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _attention(q, k, v, bias, keep, rate):
    return _forward(q, k, v, bias, keep, rate)


def _attention_fwd(q, k, v, bias, keep, rate):
    return _forward(q, k, v, bias, keep, rate), (q, k, v, bias, keep)


def _attention_bwd(rate, residuals, d_out):
    q, k, v, bias, keep = residuals
    dq, dk, dv = _backward(q, k, v, bias, keep, d_out, rate)
    return dq, dk, dv, None, None


_attention.defvjp(_attention_fwd, _attention_bwd)


def _scores(q, k, bias):
    """Scaled q k^T plus the key bias, float32, [S, S]."""
    s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    return s * (q.shape[-1] ** -0.5) + bias


def _keep_scale(keep_ref, rate):
    """1 / (1 - rate) where kept, 0 where dropped, float32 (Mosaic relayouts an int8
    comparison's booleans badly; a conversion and a product it lowers)."""
    return keep_ref[...].astype(jnp.float32) * (1.0 / (1.0 - rate))


def _fwd_kernel(q_ref, k_ref, v_ref, bias_ref, *refs, rate):
    keep_ref, o_ref = refs if rate else (None, *refs)
    v = v_ref[...]
    s = _scores(q_ref[...], k_ref[...], bias_ref[...])
    p = jnp.exp(s - jnp.max(s, axis=1, keepdims=True))
    total = jnp.sum(p, axis=1, keepdims=True)
    if rate:
        p = p * _keep_scale(keep_ref, rate)
    o = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32) / total
    o_ref[...] = o.astype(o_ref.dtype)


def _bwd_kernel(q_ref, k_ref, v_ref, bias_ref, *refs, rate):
    keep_ref, do_ref, dq_ref, dk_ref, dv_ref = refs if rate else (None, *refs)
    q, k, v, do, bias = q_ref[...], k_ref[...], v_ref[...], do_ref[...], bias_ref[...]
    p = jax.nn.softmax(_scores(q, k, bias), axis=1)  # the forward's, recomputed
    # Gradient with respect to the probabilities after dropout, then before it.
    dp = jax.lax.dot_general(do, v, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    if rate:
        scale = _keep_scale(keep_ref, rate)
        p_dropped, dp = p * scale, dp * scale
    else:
        p_dropped = p
    dv = jax.lax.dot_general(
        p_dropped.astype(do.dtype), do, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32
    )
    # Softmax's backward: dS = P (dP - sum_j P dP), over the whole row held here. A masked
    # key's score is the constant the XLA path puts there, so no gradient: that matters only
    # in a row whose keys are all masked, where P is uniform rather than 0 at them.
    ds = p * (dp - jnp.sum(p * dp, axis=1, keepdims=True)) * (q.shape[-1] ** -0.5)
    ds = (ds * (bias == 0.0).astype(jnp.float32)).astype(q.dtype)
    dq = jnp.dot(ds, k, preferred_element_type=jnp.float32)
    dk = jax.lax.dot_general(ds, q, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    dq_ref[...], dk_ref[...], dv_ref[...] = (
        dq.astype(dq_ref.dtype),
        dk.astype(dk_ref.dtype),
        dv.astype(dv_ref.dtype),
    )


def _pair(*block):
    """A block of one (sequence, head) pair of a [B, H, ...] array: each grid step's own."""
    return pl.BlockSpec((None, None, *block), lambda b, h: (b, h, 0, 0))


def _specs(s, d, rows, rate, extra=()):
    """Block specs of (q, k, v, bias[, keep], *extra); ``bias`` has ``rows`` 1 or S."""
    bias = pl.BlockSpec((None, rows, s), lambda b, h: (b, 0, 0))
    keep = [_pair(s, s)] if rate else []
    return [_pair(s, d)] * 3 + [bias, *keep, *extra]


def _call(kernel, grid, in_specs, out_specs, out_shape, cost, args):
    """``pallas_call`` for TPU (Mosaic), and in interpret mode on any other backend."""
    params = pltpu.CompilerParams(dimension_semantics=("parallel", "parallel"))

    def run(interpret):
        return pl.pallas_call(
            kernel,
            grid=grid,
            in_specs=in_specs,
            out_specs=out_specs,
            out_shape=out_shape,
            compiler_params=params,
            cost_estimate=cost,
            interpret=interpret,
        )(*args)

    return jax.lax.platform_dependent(tpu=lambda: run(False), default=lambda: run(True))


def _cost(b, h, s, d, itemsize, rate, matmuls, tensors, rows):
    """What each kernel computes and moves, for XLA's cost model (it cannot see inside):
    ``tensors`` [S, D] blocks read or written per pair, the [rows, S] bias, the int8 keep
    mask."""
    per_pair = tensors * s * d * itemsize + rows * s * 4 + (s * s if rate else 0)
    return pl.CostEstimate(
        flops=b * h * matmuls * 2 * s * s * d,
        transcendentals=b * h * s * s,
        bytes_accessed=b * h * per_pair,
    )


def _forward(q, k, v, bias, keep, rate):
    b, h, s, d = q.shape
    args = (q, k, v, bias, *([keep] if rate else []))
    out_shape = jax.ShapeDtypeStruct(q.shape, q.dtype)
    rows = bias.shape[1]
    cost = _cost(b, h, s, d, q.dtype.itemsize, rate, 2, 4, rows)
    kernel = functools.partial(_fwd_kernel, rate=rate)
    return _call(kernel, (b, h), _specs(s, d, rows, rate), _pair(s, d), out_shape, cost, args)


def _backward(q, k, v, bias, keep, d_out, rate):
    b, h, s, d = q.shape
    args = (q, k, v, bias, *([keep] if rate else []), d_out)
    out_shape = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v))
    rows = bias.shape[1]
    cost = _cost(b, h, s, d, q.dtype.itemsize, rate, 5, 7, rows)
    kernel = functools.partial(_bwd_kernel, rate=rate)
    in_specs = _specs(s, d, rows, rate, (_pair(s, d),))
    return _call(kernel, (b, h), in_specs, (_pair(s, d),) * 3, out_shape, cost, args)
