"""The one place every configuration key is declared, with its default and meaning.

Recipe files in ``configs/`` start from :func:`get_base_config` (pretraining) or
:func:`get_finetune_config` (``configs/finetune``) and change values only; a key
that is not declared here cannot be set anywhere (configs are locked), so a typo on the command
line fails instead of being ignored.
"""

import ml_collections


def _model():
    return ml_collections.ConfigDict(
        dict(
            size="base",  # key of zhlm.models.SIZES; the four dims below override it when > 0
            num_layers=0,  # transformer layers L (0: from size)
            hidden_size=0,  # hidden width H (0: from size)
            num_heads=0,  # attention heads A (0: from size)
            mlp_dim=0,  # feed-forward width (0: 4H)
            embed_dim=0,  # ALBERT factorised embedding E with an E->H projection (0: none, width H)
            vocab_size=21128,  # tokens of the vocabulary (the Google Chinese vocab has 21,128)
            vocab_multiple=128,  # embedding rows padded to a multiple of this (TPU MXU tiles)
            max_position_embeddings=512,  # rows of the absolute position table
            type_vocab_size=2,  # segment (token type) ids
            hidden_act="gelu",  # gelu (exact erf), gelu_new (tanh approximation) or relu
            layer_norm_eps=1e-12,  # BERT/ALBERT/SpanBERT 1e-12, ERNIE 1.0 1e-5
            dropout_rate=0.1,  # hidden dropout (ALBERT: 0)
            attention_dropout_rate=0.1,  # dropout on attention probabilities (ALBERT: 0)
            initializer_range=0.02,  # std of the truncated-normal initialiser
            share_layers="none",  # cross-layer sharing: none, all, attention, ffn (ALBERT Table 4)
            num_groups=1,  # ALBERT layer groups: layer i uses group i * num_groups // L
            inner_group_num=1,  # ALBERT: distinct layers inside each group, applied in turn
            sentence_head="nsp",  # nsp, sop (a 2-way head on the pooler either way) or none
            span_boundary_head=False,  # SpanBERT span boundary objective (SBO) head
            sbo_position_dim=200,  # SBO relative-position embedding width (SpanBERT: 200)
            sbo_max_span=32,  # SBO relative-position rows: longest span in tokens
            dtype="float32",  # compute dtype: float32 or bfloat16 (params stay param_dtype)
            param_dtype="float32",  # master weights
            remat="none",  # rematerialise each layer: none, full, or dots (save matmul outputs)
            dropout_rng="threefry",  # dropout bits: threefry (same on any mesh) or rbg
            attention_impl="xla",  # attention core: xla, or flash (Pallas TPU kernels, S <= 512)
            # Hugging Face family of an export: bert, ernie or albert (empty: albert for a
            # factorised embedding, else bert). Imports set it from the folder's model_type.
            export_family="",
        )
    )


def _masking():
    return ml_collections.ConfigDict(
        dict(
            scheme="token",  # token, whole_word, ngram, knowledge, span or correction
            replacement="partial_mask",  # mac, random, partial_mask (80/10/10) or all_mask
            replacement_unit="token",  # replacement decision per token or per selection unit
            mask_prob=0.15,  # share of real tokens selected (BERT's fixed count, not Bernoulli)
            max_predictions_per_seq=20,  # P: static number of predicted positions per sequence
            ngram_probs=(0.4, 0.3, 0.2, 0.1),  # P(n whole words), n = 1..len (MacBERT)
            span_p=0.2,  # SpanBERT geometric span length parameter (in words)
            span_max=10,  # SpanBERT longest span in words (geometric truncated, renormalised)
            knowledge_probs=(1 / 3, 1 / 3, 1 / 3),  # ERNIE: P(basic, phrase, entity) per sequence
            knowledge_priority=True,  # ERNIE: mask the level's phrases/entities before plain words
            overflow="truncate",  # unit crossing the budget: truncate it (exact count) or skip it
            mask_token_id=103,  # id of [MASK] (Google Chinese vocab: 103)
            random_token_min=106,  # random tokens come from [this, vocab_size): no specials/unused
        )
    )


def _data():
    return ml_collections.ConfigDict(
        dict(
            format="segment_pair",  # segment_pair (+NSP), sop, full_sentences or doc_sentences
            short_seq_prob=0.1,  # chance of a shorter target length (BERT)
            pack=True,  # several short instances per row, kept apart (zhlm.data.packing)
            tokenizer="wordpiece",  # wordpiece (vocab.txt) or sentencepiece (vocab = a .model)
            **_text(),
            layout="sentences",  # .txt: sentences (one a line, blank line ends a doc) or lines
            jsonl_field="text",  # .jsonl: the field holding a document's text
            traditional_to_simplified=False,  # convert traditional Chinese with OpenCC t2s
            max_sentence_chars=256,  # longer sentences are cut (at a clause mark if possible)
            fields=(),  # extra fields: phrase_ids, entity_ids (ERNIE), similar_ids (MacBERT)
            lexicon_dir="",  # THUOCL lexicons for entity/phrase units (empty: bundled in zhlm)
            cilin="",  # Cilin synonyms file for similar_ids (empty: bundled in zhlm)
            mixture="",  # loader weights "name:w,..." of --input name=GLOB sources (empty: by size)
            dialogue_sources=(),  # --input names holding dialogue JSON lines: ERNIE DLM records
            seed=0,  # seed of the prepare-time draws (NSP/SOP, short sequences, similar words)
            shard_mb=4.0,  # plain text files are cut into shards of this many MB for parallelism
            # Where zhlm-pretrain finds the prepared dataset (zhlm-prepare's --data_dir). Empty:
            # a cache (ZHLM_CACHE or ~/.cache/zhlm) keyed by the data config and the inputs.
            data_dir="",
            # Inputs (globs, name=GLOB for named sources) prepared on the fly when data_dir
            # holds no dataset yet. Empty: the People's Daily sample bundled in zhlm.
            input=(),
        )
    )


def _text():
    """The text keys pretraining's ``data`` and fine-tuning's ``task`` share, declared once."""
    return dict(
        max_seq_length=128,  # tokens per sequence including [CLS]/[SEP]
        # WordPiece vocab.txt (pretraining with data.tokenizer=sentencepiece: a .model). Empty:
        # the init's own vocabulary (its folder's vocab.txt), else the Google Chinese vocab
        # bundled in zhlm.
        vocab="",
        lower_case=True,  # lower-case and strip accents, as bert-base-chinese does
    )


def _steps(batch_size: int):
    """The keys pretraining's and fine-tuning's ``train`` sections share, declared once."""
    return dict(
        seed=0,  # seed of init, dropout, data order and masking (fine-tuning: run i uses seed + i)
        # sequences per step over all devices (fine-tuning: rows, i.e. MRC and NER windows)
        batch_size=batch_size,
        micro_batches=1,  # gradient accumulation: the step scans over this many slices
        # steps between training lines: loss and learning rate to metrics.jsonl, TensorBoard and
        # the console (0: none but pretraining's last step)
        log_every=50,
        **_sharding(),
    )


def _train():
    return ml_collections.ConfigDict(
        dict(
            num_steps=1000,  # optimizer updates
            eval_every=500,  # steps between evaluations on the held-out sequences (0: never)
            eval_examples=256,  # sequences held out of training from every data source
            checkpoint_every=500,  # steps between (asynchronous) checkpoints
            keep_checkpoints=3,  # checkpoints kept in the workdir
            # Parameters to start from when the workdir has no checkpoint: a zhlm checkpoint
            # (zhlm-convert's output), a pretraining workdir or a Hugging Face folder.
            init_from="",
            # When the workdir's checkpoints cannot be continued (a changed config makes them
            # incompatible, or none restores): keep that run in previous-<n>/ and start anew,
            # instead of stopping. A workdir whose checkpoint restores is always continued.
            restart=False,
            peak_flops=0.0,  # per-device peak FLOP/s for MFU (0: known TPUs, GPUs by device kind)
            # Multi-host: call jax.distributed.initialize(); the three values below are
            # detected on Cloud TPU and needed elsewhere (one process each, e.g. CPU tests).
            distributed=False,
            coordinator_address="",  # host:port of process 0
            num_processes=0,  # processes in the run (0: detected)
            process_id=-1,  # this process's index (-1: detected)
            **_steps(batch_size=256),
        )
    )


def _sharding():
    """The mesh keys of both train sections (``zhlm.train.sharding`` reads them)."""
    return dict(
        mesh=(("data", -1), ("fsdp", 1), ("tensor", 1)),  # device mesh axes (-1: the rest)
        # Logical parameter/activation axis -> mesh axes (zhlm/models/layers.py names).
        logical_rules=(
            ("batch", ("data", "fsdp")),
            ("vocab", "tensor"),
            ("embed", "fsdp"),
            ("mlp", "tensor"),
            ("heads", "tensor"),
            ("kv", None),
            ("layers", None),
            ("length", None),
            ("factor", None),
            ("norm", None),
        ),
    )


def _optim():
    return ml_collections.ConfigDict(
        dict(
            name="adamw",  # adamw or lamb (variants: the table in zhlm/train/optim.py)
            peak_lr=1e-4,  # learning rate at the end of warmup
            warmup_steps=100,  # linear warmup from 0 (fine-tuning: -1 warms up by warmup_ratio)
            schedule="bert",  # bert (1 - t/T from step 0), linear (to 0 after warmup), polynomial
            power=1.0,  # exponent of the polynomial schedule
            b1=0.9,  # first-moment decay
            b2=0.999,  # second-moment decay
            eps=1e-6,  # added to sqrt(v) (BERT: 1e-6)
            bias_correction=False,  # Adam bias correction (BERT and ALBERT ran without)
            weight_decay=0.01,  # decoupled weight decay
            decay_exclude=("bias", "layer_norm"),  # parameters without weight decay
            trust_ratio_exclude=(),  # LAMB: parameters without the trust ratio (ALBERT: as above)
            clip_norm=1.0,  # global gradient-norm clipping (0: off)
        )
    )


def get_base_config() -> ml_collections.ConfigDict:
    """Every key with its default; recipe files override values, never add keys."""
    config = ml_collections.ConfigDict()
    config.recipe = "bert"  # the recipe's name, for logs and tables
    config.model = _model()
    config.masking = _masking()
    config.data = _data()
    config.train = _train()
    config.optim = _optim()
    return config


def _task():
    return ml_collections.ConfigDict(
        dict(
            name="",  # the task's name, for logs and results.json
            # a registered task kind (zhlm.finetune.kinds): classification (one text), pair
            # (two texts), mrc (answer spans), ner (entities), multiple_choice (options) or
            # regression (a score per pair)
            kind="classification",
            # one the kind reads: classification/pair tsv, csv, jsonl, json, parquet or datasets
            # (a save_to_disk folder); mrc squad; ner tagged (char<TAB>tag lines) or
            # spans_jsonl (CLUENER-style offset spans); multiple_choice c3 or jsonl
            format="tsv",
            # classification/pair: the text column(s), names or 0-based positions (one, two
            # for pair); empty: the usual header names, else the columns before the label
            text_fields=(),
            label_field="",  # its label column, name or position (empty: header "label"/last)
            train_file="",  # training data: a file (a folder for format datasets), or several a,b
            dev_file="",  # evaluation data, as train_file (empty when holdout > 0)
            # > 0: this share of train_file evaluates, drawn (seeded) within each label; mrc
            # and multiple_choice hold out whole passages
            holdout=0.0,
            # Label strings in the order of the classifier outputs (not mrc); ner: BIO tags.
            # Empty: from the training file (sorted, numbers numerically; ner: O, then B-/I-
            # per type), printed with counts; evaluation labels outside it are reported.
            labels=(),
            label_names="",  # a file naming the label ids: class.txt (line i: id i) or labels.json
            scheme="auto",  # ner tag files: auto (detected), bio, iob1, bioes or bmes
            **_text(),
            # Lengths batches are cut to, max_seq_length always last (zhlm.finetune.batching):
            # (): powers of two from 32; (max_seq_length,): every batch at the full length.
            length_buckets=(),
            # Several examples per row of max_seq_length, each with its own positions and
            # attention (zhlm.finetune.packing): training, evaluation and prediction of the
            # kinds with a packed read-out (classification, pair, regression, ner); the others,
            # and False, use length_buckets.
            pack=True,
            doc_stride=128,  # mrc, ner: tokens between the starts of consecutive windows
            max_query_length=64,  # mrc: question tokens kept
            num_choices=0,  # multiple_choice: options per question (0: a training question's most)
            n_best_size=20,  # mrc: start and end candidates searched per window
            max_answer_length=30,  # mrc: longest answer in tokens
        )
    )


def _finetune_train():
    return ml_collections.ConfigDict(
        dict(
            seeds=1,  # repeated runs; results.json reports the max and mean dev metric
            epochs=3,  # passes over the training set
            eval_every_epoch=True,  # evaluate after every epoch and keep the best (else last)
            max_train_examples=0,  # > 0: only the first N training examples (quick runs)
            max_eval_examples=0,  # > 0: only the first N evaluation examples (MRC: questions)
            save_best=True,  # write the best run's best parameters to workdir/best
            **_steps(batch_size=32),  # data-parallel over every local device by default
        )
    )


def get_finetune_config(size: str = "base") -> ml_collections.ConfigDict:
    """Every fine-tuning key with its default; ``configs/finetune`` files change values.

    ``model`` and ``optim`` are the pretraining sections (their keys documented above) with the
    papers' fine-tuning optimizer (AdamW, linear decay, 2e-5) plus ``warmup_ratio``; ``size``
    is the random encoder's, used only without ``--init`` (an init brings its own model).
    """
    from zhlm.models import sizes  # here: data workers import this module without JAX

    base = get_base_config()
    config = ml_collections.ConfigDict()
    config.task = _task()
    config.model = base.model
    config.model.size = sizes.check_size(size or "base")
    config.optim = base.optim
    config.optim.update(name="adamw", schedule="linear", peak_lr=2e-5, warmup_steps=-1)
    config.optim.warmup_ratio = 0.1  # warmup over this share of all steps (warmup_steps -1 only)
    config.train = _finetune_train()
    return config


# Sizes meant for a laptop CPU get a laptop-sized run (the loss falls within minutes on the
# bundled corpus): smaller batches, fewer steps, frequent logs, and the larger learning rate a
# model this small needs (LAMB's steps are relative to each layer's norm, so it needs more).
LOCAL_TRAIN = dict(batch_size=32, num_steps=600, log_every=20, eval_every=100, checkpoint_every=200)
LOCAL_LR = {"adamw": 1e-3, "lamb": 1e-2}


def local_warmup(num_steps: int) -> int:
    """Warmup steps of a laptop-sized run of ``num_steps``: the first 10%, but at least 200 steps
    (a third of a run shorter than 600). A tiny model that reaches LOCAL_LR sooner collapses
    and stays at the unigram stage: ERNIE tiny on the bundled sample plus CLUE documents, 600
    steps of 32: held-out MLM accuracy 4.7% at step 600 with 60 warmup steps, every token one
    vector (the top direction holds 87% of the encoder's output); 11.8% with 200 (6.5% there)."""
    return max(num_steps // 10, min(200, num_steps // 3))


def local_scale(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Recipe files end with this: for ``tiny`` and ``mini`` models, :data:`LOCAL_TRAIN`,
    :func:`local_warmup` and :data:`LOCAL_LR`; other sizes keep the recipe's values."""
    if config.model.size in ("tiny", "mini"):
        config.train.update(LOCAL_TRAIN)
        config.optim.warmup_steps = local_warmup(LOCAL_TRAIN["num_steps"])
        config.optim.peak_lr = LOCAL_LR[config.optim.name]
    return config


def config_from_dict(values: dict) -> ml_collections.ConfigDict:
    """A config saved with ``config.to_dict()`` or ``to_json()``, checked against its base
    (:func:`get_finetune_config` when it has a ``task`` section, else :func:`get_base_config`).

    Keys the base does not declare are an error (a checkpoint from another zhlm version says so
    instead of silently losing a setting); JSON lists become tuples where the base has a tuple.
    """
    config = get_finetune_config() if "task" in values else get_base_config()
    if "vocab_size" in values.get("model", {}) and "vocab_multiple" not in values["model"]:
        config.model.vocab_multiple = 1  # saved before padding existed: its tables have V rows

    def merge(node, new, prefix):
        for key, value in new.items():
            if key not in node:
                raise KeyError(f"unknown config key {prefix}{key}")
            if isinstance(value, dict):
                merge(node[key], value, f"{prefix}{key}.")
            else:
                node[key] = tuple(value) if isinstance(node[key], tuple) else value

    merge(config, values, "")
    return config
