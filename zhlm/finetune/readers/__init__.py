"""Readers of the file formats fine-tuning takes, one module a format, and no JAX.

:mod:`~zhlm.finetune.readers.base` is the reading part of a task kind (``Reader``);
:mod:`~zhlm.finetune.readers.report` the one report of skipped and repaired records every
reader fills, with its vocabulary of issue names; :mod:`~zhlm.finetune.readers.tables` users'
tables (TSV, CSV, JSON lines, JSON, parquet, ``datasets`` folders, plain text: the formats in
:mod:`~zhlm.finetune.readers.rows`, what a file that reads as none looks like in
:mod:`~zhlm.finetune.readers.sniff`); :mod:`~zhlm.finetune.readers.squad` SQuAD v1 JSON (CMRC
2018, DRCD); :mod:`~zhlm.finetune.readers.ner` tag files and CLUENER spans;
:mod:`~zhlm.finetune.readers.choices` multiple-choice JSON lines and
:mod:`~zhlm.finetune.readers.c3` C3's JSON.
"""
