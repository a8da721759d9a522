"""The Hugging Face <-> zhlm name tables: which HF tensor is which zhlm parameter, and how.

One table per family from HF (PyTorch) tensor names to zhlm parameter paths, each entry with
the reshape that turns a torch ``[out, in]`` weight into our ``[in, (heads, head_dim) | out]``
kernel. Layer tensors are stacked into the encoder's parameter sets (see models/layers.py).
The reader and the writer both use these tables, so a name can never be mapped one way only.
"""

import dataclasses

import numpy as np

from zhlm.errors import UserError


class ConversionError(UserError):
    """A folder that cannot be converted; the message says why in full."""


@dataclasses.dataclass
class Report:
    """What a conversion did besides copying tensors: nothing is dropped without a line here."""

    fresh: list = dataclasses.field(default_factory=list)  # zhlm params initialised fresh
    unused: list = dataclasses.field(default_factory=list)  # source tensors not carried over
    # Fine-tuning heads of a BertFor<Task> folder ({"classifier": {"kernel", "bias"}}): not part
    # of the pretraining model, kept for a task model of the same shape (zhlm.train.checkpoint).
    task_heads: dict = dataclasses.field(default_factory=dict)
    format: str = ""  # what was read: safetensors, pytorch, flax, tf2-h5, tf1 (convert.formats)
    ignored: list = dataclasses.field(default_factory=list)  # dropped on purpose: optimizer state
    notes: list = dataclasses.field(default_factory=list)  # how the source was interpreted

    def lines(self):
        out = list(self.notes)
        if self.ignored:  # hundreds of slots in a real checkpoint: one line, not one each
            kinds = sorted({p.rpartition("/")[2] for p in self.ignored})
            out.append(f"ignored {len(self.ignored)} optimizer variables ({', '.join(kinds)})")
        out += [f"initialised fresh (not in the source): {p}" for p in self.fresh]
        out += [f"task head kept for fine-tuning: {name}" for name in self.task_heads]
        return out + [f"not carried over: {p}" for p in self.unused]


# ----------------------------------------------------------------------------- name tables
# Each entry: (HF name, zhlm path, kind). Kinds say how the torch tensor is laid out:
#   copy: same layout; dense: torch Linear [out, in] -> kernel [in, out];
#   qkv: Linear [A*D, H] -> [H, A, D];  qkv_bias: [A*D] -> [A, D];  attn_out: [H, A*D] -> [A, D, H].
# {p} is the model prefix (bert, ernie, albert); layer entries are per parameter set.


def _embeddings(p):
    return [
        (f"{p}.embeddings.word_embeddings.weight", "embeddings/word_embeddings/embedding", "copy"),
        (
            f"{p}.embeddings.position_embeddings.weight",
            "embeddings/position_embeddings/embedding",
            "copy",
        ),
        (
            f"{p}.embeddings.token_type_embeddings.weight",
            "embeddings/token_type_embeddings/embedding",
            "copy",
        ),
        (f"{p}.embeddings.LayerNorm.weight", "embeddings/layer_norm/scale", "copy"),
        (f"{p}.embeddings.LayerNorm.bias", "embeddings/layer_norm/bias", "copy"),
    ]


def _dense(hf, path, kind="dense"):
    return [(f"{hf}.weight", f"{path}/kernel", kind), (f"{hf}.bias", f"{path}/bias", "copy")]


def _layer_norm(hf, path):
    return [(f"{hf}.weight", f"{path}/scale", "copy"), (f"{hf}.bias", f"{path}/bias", "copy")]


def _attention(q, k, v, out, ln):
    rows = []
    for hf, name in ((q, "query"), (k, "key"), (v, "value")):
        rows += [
            (f"{hf}.weight", f"{name}/kernel", "qkv"),
            (f"{hf}.bias", f"{name}/bias", "qkv_bias"),
        ]
    return (
        rows + _dense(out, "attention_output", "attn_out") + _layer_norm(ln, "attention_layer_norm")
    )


def _bert_layer(p, i):
    """HF tensor names of BERT/ERNIE layer i -> zhlm names inside encoder/layers (one set)."""
    b = f"{p}.encoder.layer.{i}"
    attn = _attention(
        *(f"{b}.attention.self.{n}" for n in ("query", "key", "value")),
        f"{b}.attention.output.dense",
        f"{b}.attention.output.LayerNorm",
    )
    return (
        attn
        + _dense(f"{b}.intermediate.dense", "intermediate")
        + _dense(f"{b}.output.dense", "output")
        + _layer_norm(f"{b}.output.LayerNorm", "output_layer_norm")
    )


def _albert_layer(g, k):
    b = f"albert.encoder.albert_layer_groups.{g}.albert_layers.{k}"
    attn = _attention(
        *(f"{b}.attention.{n}" for n in ("query", "key", "value", "dense", "LayerNorm"))
    )
    return (
        attn
        + _dense(f"{b}.ffn", "intermediate")
        + _dense(f"{b}.ffn_output", "output")
        + (_layer_norm(f"{b}.full_layer_layer_norm", "output_layer_norm"))
    )


@dataclasses.dataclass(frozen=True)
class Family:
    """One HF model family: its prefix, config fields and how its tensors are named."""

    prefix: str
    model_type: str
    architecture: str

    def top(self, sentence_head: str):
        """Non-layer tensors: embeddings, pooler and heads, with the head each belongs to."""
        p = self.prefix
        if self.model_type == "albert":
            rows = [(r, "body") for r in _embeddings(p)]
            rows += [
                (r, "body")
                for r in _dense(f"{p}.encoder.embedding_hidden_mapping_in", "embeddings/projection")
            ]
            rows += [(r, "pooler") for r in _dense(f"{p}.pooler", "pooler/dense")]
            rows += [(r, "mlm") for r in _dense("predictions.dense", "mlm/transform")]
            rows += [(r, "mlm") for r in _layer_norm("predictions.LayerNorm", "mlm/layer_norm")]
            rows += [(("predictions.bias", "mlm/decoder/bias", "copy"), "mlm")]
            rows += [(r, "sentence") for r in _dense("sop_classifier.classifier", "sentence")]
        else:
            rows = [(r, "body") for r in _embeddings(p)]
            rows += [(r, "pooler") for r in _dense(f"{p}.pooler.dense", "pooler/dense")]
            rows += [(r, "mlm") for r in _dense("cls.predictions.transform.dense", "mlm/transform")]
            rows += [
                (r, "mlm")
                for r in _layer_norm("cls.predictions.transform.LayerNorm", "mlm/layer_norm")
            ]
            rows += [(("cls.predictions.bias", "mlm/decoder/bias", "copy"), "mlm")]
            rows += [(r, "sentence") for r in _dense("cls.seq_relationship", "sentence")]
        if sentence_head == "none":
            rows = [r for r in rows if r[1] != "sentence"]
        return rows

    def layer_sets(self, cfg):
        """For each parameter set of the encoder, the HF tensor names of that set."""
        if self.model_type == "albert":
            return [
                _albert_layer(g, k)
                for g in range(cfg.num_groups)
                for k in range(cfg.inner_group_num)
            ]
        return [_bert_layer(self.prefix, i) for i in range(cfg.num_layers)]

    def decoder_weight(self):
        return (
            "predictions.decoder.weight"
            if self.model_type == "albert"
            else "cls.predictions.decoder.weight"
        )


# Task heads of BertFor{SequenceClassification,TokenClassification,QuestionAnswering} and the
# ALBERT/ERNIE equivalents: a Dense of the same name in zhlm's task models (each fine-tuning
# kind names its own head, zhlm.finetune.kinds; the reader loads whichever a folder has).
CLASSIFIER = "classifier"
QA_OUTPUTS = "qa_outputs"
TASK_HEADS = (CLASSIFIER, QA_OUTPUTS)


def task_head_rows(name: str):
    """(HF name, zhlm path inside the task model, kind) of one task head's Dense."""
    return _dense(name, name)


FAMILIES = {
    "bert": Family("bert", "bert", "BertForPreTraining"),
    "ernie": Family("ernie", "ernie", "ErnieForPreTraining"),
    "albert": Family("albert", "albert", "AlbertForPreTraining"),
}


def hf_shape(kind, shape):
    """The torch shape of a tensor whose zhlm shape is ``shape``."""
    if kind == "copy":
        return tuple(shape)
    if kind == "dense":
        return tuple(shape[::-1])
    if kind == "qkv":  # [H, A, D]
        return (shape[1] * shape[2], shape[0])
    if kind == "qkv_bias":  # [A, D]
        return (shape[0] * shape[1],)
    if kind == "attn_out":  # [A, D, H]
        return (shape[2], shape[0] * shape[1])
    raise AssertionError(kind)


def to_zhlm(kind, x, shape):
    return x.T.reshape(shape) if kind in ("dense", "qkv", "attn_out") else x.reshape(shape)


def to_hf_layout(kind, y):
    y = np.asarray(y, np.float32)
    return np.ascontiguousarray(
        y.reshape(-1, y.shape[-1]).T
        if kind == "attn_out"
        else y.reshape(y.shape[0], -1).T
        if kind == "qkv"
        else y.T
        if kind == "dense"
        else y.reshape(hf_shape(kind, y.shape))
    )
