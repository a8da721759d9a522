"""The dev metrics of fine-tuning, one module a metric, as their official definitions give them:
:mod:`~zhlm.finetune.metrics.classes` (accuracy, per-class and macro F1),
:mod:`~zhlm.finetune.metrics.correlation` (Pearson, Spearman),
:mod:`~zhlm.finetune.metrics.conlleval` (entity F1, tag schemes) and
:mod:`~zhlm.finetune.metrics.cmrc2018` (CMRC 2018 / DRCD F1 and EM). They import no JAX:
``zhlm-cmrc-eval`` scores a predictions file with nothing more than the standard library.
"""
