"""Raw Chinese text to the training batches every recipe reads, one concern a module.

text (read, clean, split; the Report of every repair) → tokenizer (WordPiece / sentencepiece
with offsets) → words (jieba word ids) · units (ERNIE entities and phrases) · synonyms (MacBERT
similar words) → annotate (per-document arrays) → instances (the four input formats) · dialogue
(ERNIE's dialogue language model records from multi-turn dialogues) → pipeline (one shard,
many processes) → builder (TFDS ArrayRecord, Beam) → loader (mixture sampler, sharded by
process, resumable). Submodules are imported on use: jieba, TFDS and the
tokenizers load only where needed.
"""
