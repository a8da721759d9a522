"""Pretraining losses and metrics: MLM at the gathered positions, NSP/SOP, SpanBERT's SBO.

Why one function (``pretraining_loss``) reading which heads the model produced: the train step
stays a single branch-free function for all six recipes; a recipe without NSP simply has no
``sentence_logits`` (a static pytree difference, resolved at trace time).

Losses are means over real targets (MLM and SBO: sum of weighted NLL / sum of weights, so padded
prediction slots count for nothing and every real target weighs the same however many a sequence
has). Metrics are sums and counts (``zhlm.train.sums``), so the loop adds them over steps and
devices and divides only when it logs. Softmax is computed in float32 whatever the compute
dtype, because bf16 log-probabilities over 21k classes lose the small ones.
"""

import jax
import jax.numpy as jnp

from zhlm.train import sums


def _nll_and_correct(logits, labels):
    """NLL as ``logsumexp - label logit``, the label's logit picked by a one-hot product and
    "correct" meaning the label's logit is the maximum: reductions over V that XLA fuses with
    the logits, where a gather at the labels, its scatter-add gradient, a stored [.., V]
    log-softmax and a separate argmax pass were each a trip over the largest tensor."""
    logits = logits.astype(jnp.float32)
    label_logit = jnp.sum(logits * jax.nn.one_hot(labels, logits.shape[-1], dtype=jnp.float32), -1)
    nll = jax.nn.logsumexp(logits, axis=-1) - label_logit
    correct = label_logit >= jnp.max(logits, axis=-1)
    return nll, correct.astype(jnp.float32)


def token_loss(logits, labels, weights, name):
    """Weighted token classification ([..., V] logits at [...] labels): (mean loss, metrics)."""
    nll, correct = _nll_and_correct(logits, labels)
    weights = weights.astype(jnp.float32)
    count = jnp.sum(weights)
    loss_sum = jnp.sum(nll * weights)
    metrics = sums.objective(name, loss_sum, count, correct=jnp.sum(correct * weights))
    return loss_sum / jnp.maximum(count, 1.0), metrics


def mlm_loss(outputs, batch):
    """Masked LM over ``masked_positions``: logits [B,P,V] vs ``masked_ids`` [B,P]."""
    return token_loss(outputs["mlm_logits"], batch["masked_ids"], batch["masked_weights"], "mlm")


def sbo_loss(outputs, batch):
    """SpanBERT span boundary objective: same targets and weights as MLM, from the SBO head."""
    return token_loss(outputs["sbo_logits"], batch["masked_ids"], batch["masked_weights"], "sbo")


def sentence_loss(outputs, batch):
    """NSP or SOP: 2-way logits [B,2] vs ``sentence_label`` [B], or per packed instance
    [B,K,2] vs [B,K], where a label -1 marks an empty slot, weighed 0."""
    labels = batch["sentence_label"]
    weights = labels >= 0
    return token_loss(outputs["sentence_logits"], jnp.maximum(labels, 0), weights, "sentence")


def pretraining_loss(outputs, batch):
    """Total loss (unweighted sum of the objectives the model has heads for) and metrics.

    ``outputs`` is the model's dict (``mlm_logits`` always; ``sentence_logits``, ``sbo_logits``
    when the recipe has them); ``batch`` is ``zhlm.masking.mask_batch``'s output, plus
    ``sentence_label`` when there is a sentence head. SpanBERT adds MLM and SBO unweighted, BERT
    adds MLM and NSP, as in the papers.
    """
    objectives = [mlm_loss]
    if "sentence_logits" in outputs:
        objectives.append(sentence_loss)
    if "sbo_logits" in outputs:
        objectives.append(sbo_loss)
    total, metrics = 0.0, {}
    for objective in objectives:
        loss, m = objective(outputs, batch)
        total += loss
        metrics.update(m)
    return total, dict(metrics, **sums.step_loss(total))
