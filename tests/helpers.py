"""What several test modules share, so that no test module imports another: the repo root and
the shared data, the library's config loader and synthetic batch under the names the tests
import, the environment of a training child, the fine-tuning task configs on the shared data,
one builder of tiny random Hugging Face models, and the small models, batches, checks and
samples that tests of several modules use.

Test modules import it as ``from helpers import ...`` (pyproject's pytest ``pythonpath`` puts
tests/ on the path; a child process that needs it puts ``HELPERS_PATH`` there).
"""

import json
import os
import random
import shutil

import numpy as np

from zhlm.config_files import RECIPES  # noqa: F401 (re-exported for the tests)
from zhlm.config_files import load as load_config
from zhlm.data.synthetic import synthetic_batch  # noqa: F401 (re-exported for the tests)

HELPERS_PATH = os.path.dirname(os.path.abspath(__file__))  # tests/
ROOT = os.path.dirname(HELPERS_PATH)
DATA = os.path.join(ROOT, "..", "shared", "data")  # the shared corpora and task files


def without_opt_level_zero() -> dict:
    """The environment minus conftest's XLA opt-level-0 flag, for a child process that trains:
    a few hundred steps are bound by execution, which that flag makes 2-3x slower, not by
    compilation."""
    flags = os.environ.get("XLA_FLAGS", "").replace("--xla_backend_optimization_level=0", "")
    return dict(os.environ, XLA_FLAGS=flags.strip(), PYTHONPATH=ROOT)


# ------------------------------------------------------------------------- fine-tuning tasks

# The task configs name no data path (users pass theirs); these are the files in ../shared/data.
SHARED_FILES = {
    "chnsenticorp": ("chnsenticorp/train.tsv", "chnsenticorp/dev.tsv"),
    "lcqmc": ("lcqmc/dev.txt", ""),  # split by the config's holdout
    "ocnli": ("ocnli/train.10k.json", "ocnli/dev.json"),
    "cmrc2018": ("cmrc2018/cmrc2018_dev.json", ""),  # split by the config's holdout
    "msra_ner": ("msra_ner/train.txt", "msra_ner/dev.txt"),
    "c3": ("c3/c3-d-train.json,c3/c3-m-train.json", "c3/c3-d-dev.json,c3/c3-m-dev.json"),
}


def load_task(name, arg="tiny", shared=True):
    """The file ``configs/finetune/<name>.py`` of this checkout loaded by the library's loader
    (``get_config(arg)``), locked as the command line locks it, with ``task.train_file`` /
    ``dev_file`` set to the shared data (``shared=False``: as the file leaves them, empty)."""
    config = load_config(os.path.join(ROOT, "configs", "finetune", f"{name}.py"), arg)
    if shared:
        train, dev = (
            ",".join(os.path.join(DATA, part) for part in f.split(",")) if f else ""
            for f in SHARED_FILES[name]
        )
        config.task.update(train_file=train, dev_file=dev)
    config.lock()
    return config


def read_task(task):
    """``(train, evaluation, reports)`` as zhlm-finetune reads them: the task's kind resolved,
    its files read and the training examples those the kind learns from."""
    from zhlm.finetune import kinds, task_files

    kind = kinds.get(task.kind)
    train, evaluation, reports = task_files.read_task(kind, task)
    return kind.training_examples(task, train), evaluation, reports


def binary_lines(count, seed=0):
    """``count`` lines of random bytes above ASCII: what a binary file is read as."""
    rng = random.Random(seed)
    return [bytes(rng.randrange(128, 256) for _ in range(110)) for _ in range(count)]


def binary_file(path, readable=("很好\t0", "太差\t1")):
    """A 5 kB file of 41 lines of random bytes above ASCII and the ``readable`` lines among
    them (what a binary file gives: a few lines that happen to decode), at lines 4, 21 ..."""
    lines = binary_lines(41)
    for i, line in enumerate(readable):
        lines.insert(3 + 17 * i, line.encode("utf-8"))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def cut_orbax(folder):
    """Cuts every data file of an orbax folder to a third, as a kill or a copy stopped midway
    would leave it."""
    for root, _, files in os.walk(folder):
        if os.sep + "d" in root:
            for name in files:
                with open(os.path.join(root, name), "r+b") as f:
                    f.truncate(max(os.path.getsize(f.name) // 3, 1))


def reviews_config(tmp_path, rows=24, **train):
    """A chnsenticorp config on ``rows`` made-up two-class reviews (``tmp_path/reviews.tsv``),
    a quarter held out, 16 tokens, batches of 8; ``train`` sets ``config.train`` keys."""
    made = [(str(i % 2), ("好评" if i % 2 else "差评") + f"第{i}条") for i in range(rows)]
    path = tmp_path / "reviews.tsv"
    path.write_text("label\ttext_a\n" + "".join(f"{a}\t{b}\n" for a, b in made), "utf-8")
    config = load_task("chnsenticorp", shared=False)
    config.unlock()
    config.task.update(train_file=str(path), dev_file="", holdout=0.25, max_seq_length=16)
    config.train.update(dict(seeds=1, batch_size=8, log_every=0), **train)
    return config


def _lines(name, first, n):
    def write(tmp_path):
        with open(os.path.join(DATA, name), encoding="utf-8") as f:
            lines = f.read().splitlines()[first : first + n]
        path = tmp_path / os.path.basename(name)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    return write


def _cmrc(tmp_path):
    with open(os.path.join(DATA, "cmrc2018", "cmrc2018_dev.json"), encoding="utf-8") as f:
        data = json.load(f)
    path = tmp_path / "cmrc.json"
    path.write_text(json.dumps(dict(data, data=data["data"][:4]), ensure_ascii=False))
    return path


def _msra(tmp_path):
    with open(os.path.join(DATA, "msra_ner", "dev.txt"), encoding="utf-8") as f:
        sentences = f.read().split("\n\n")[:24]
    path = tmp_path / "ner.txt"
    path.write_text("\n\n".join(sentences) + "\n", encoding="utf-8")
    return path


def _c3(tmp_path):
    with open(os.path.join(DATA, "c3", "c3-m-dev.json"), encoding="utf-8") as f:
        data = json.load(f)[:12]  # passages with 2, 3 and 4 options
    path = tmp_path / "c3.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def _scored_pairs(tmp_path):
    """LCQMC pairs with a made-up score from 0 to 5 (no STS-B copy is available offline)."""
    with open(os.path.join(DATA, "lcqmc", "dev.txt"), encoding="utf-8") as f:
        pairs = [line.split("\t")[:2] for line in f.read().splitlines()[:24]]
    path = tmp_path / "sts.tsv"
    lines = [f"{a}\t{b}\t{(len(a) + len(b)) % 11 / 2}" for a, b in pairs]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# kind -> (format, writer(tmp_path) -> path, task overrides): one sample per registered kind
# (tests/finetune/kinds/test_contract.py runs every kind on its sample).
SAMPLES = {
    "classification": ("tsv", _lines("chnsenticorp/dev.tsv", 0, 25), {}),  # header + 24
    "pair": ("tsv", _lines("lcqmc/dev.txt", 0, 24), {}),
    "mrc": ("squad", _cmrc, dict(max_seq_length=64, doc_stride=32, max_query_length=16)),
    "ner": ("tagged", _msra, dict(max_seq_length=32, doc_stride=16)),
    "multiple_choice": ("c3", _c3, dict(max_seq_length=48)),
    "regression": ("tsv", _scored_pairs, {}),
}


# Reviews longer than a few tokens, one token a character: predicting them cut to a length
# is predicting them already cut (tests/finetune/test_predict.py and test_predictor.py).
LONG_REVIEWS = [
    "这家酒店的房间非常干净，服务员的态度也很好，下次还会再来住。",
    "房间太小了，隔音也差，晚上一直能听到走廊里的声音，不推荐。",
    "位置不错，离地铁站很近，早餐的品种有点少。",
]


def cut_to_tokens(texts, tokens):
    """``texts`` cut to their first ``tokens`` tokens (Google's vocabulary; checked: a
    character a token, as in :data:`LONG_REVIEWS`)."""
    from zhlm.data.tokenizer import WordPiece, default_vocab

    wordpiece = WordPiece(default_vocab())
    for text in texts:
        assert len(wordpiece.encode_batch([text])[0].ids) == len(text), text
    return [text[:tokens] for text in texts]


# ------------------------------------------------------------------ tiny random HF models

# transformers' config keys of the tiny models, unless a test gives its own (Google's vocabulary).
TINY_HF = dict(
    vocab_size=21128, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=128,
)  # fmt: skip


def tiny_hf(architecture, family="", seed=0, **config):
    """A random transformers ``architecture`` (``BertForPreTraining``, ``AlbertModel`` ...; the
    family, Bert, Albert or Ernie, is the name's start unless given) of ``config``'s keys over
    ``TINY_HF`` (ALBERT's embedding 32), seeded, in eval mode."""
    import torch
    import transformers

    family = family or next(f for f in ("Albert", "Ernie", "Bert") if architecture.startswith(f))
    if family == "Albert":
        config.setdefault("embedding_size", 32)
    torch.manual_seed(seed)
    hf_config = getattr(transformers, f"{family}Config")(**{**TINY_HF, **config})
    return getattr(transformers, architecture)(hf_config).eval()


def hf_folder(tmp_path, architecture, family="", **config):
    """``(model, path)``: :func:`tiny_hf` with random task heads whose biases show (not the
    zero init), saved by ``save_pretrained`` to ``tmp_path/architecture``."""
    import torch

    model = tiny_hf(architecture, family, **config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith(("classifier", "qa_outputs")):
                p.normal_(0, 0.5)
    path = str(tmp_path / architecture)
    model.save_pretrained(path)
    return model, path


# Checkpoint formats (tests/convert/test_formats.py and formats_tf1.py): two families of tiny
# pretraining models, ALBERT with two groups of two inner layers, so that group and layer
# indices both reach the names.
FORMAT_VOCAB = 100
FORMAT_FAMILIES = {
    "bert": dict(
        architecture="BertForPreTraining", vocab_size=FORMAT_VOCAB, hidden_size=32,
        num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        max_position_embeddings=40,
    ),
    "albert": dict(
        architecture="AlbertForPreTraining", vocab_size=FORMAT_VOCAB, embedding_size=16,
        hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=37,
        num_hidden_groups=2, inner_group_num=2, max_position_embeddings=40,
    ),
}  # fmt: skip


def format_inputs():
    import jax.numpy as jnp

    rs = np.random.RandomState(0)
    ids = rs.randint(1, FORMAT_VOCAB, (2, 11))
    types = np.zeros_like(ids)
    types[:, 6:] = 1
    mask = np.ones_like(ids)
    mask[1, 8:] = 0
    return tuple(jnp.asarray(x) for x in (ids, types, mask))


def write_vocab(folder, size=FORMAT_VOCAB):
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens = specials + [f"字{i}" for i in range(size - len(specials))]
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")


def save_format_family(name, folder, **config):
    """A seeded random HF model of ``FORMAT_FAMILIES[name]`` saved as safetensors, with a
    vocab.txt."""
    model = tiny_hf(**FORMAT_FAMILIES[name], **config)
    model.save_pretrained(folder)
    write_vocab(folder)
    return model


def assert_same_import(got, want):
    """Parameters equal to the last bit, and so the outputs; both are checked."""
    import flax.traverse_util as traverse

    (model, variables, config, _), (ref_model, ref_variables, ref_config, _) = got, want
    assert model.config == ref_model.config and config.model == ref_config.model
    flat, ref = (traverse.flatten_dict(v["params"], sep="/") for v in (variables, ref_variables))
    assert sorted(flat) == sorted(ref)
    for key in ref:
        np.testing.assert_array_equal(flat[key], ref[key], err_msg=key)
    inputs = format_inputs()
    out, ref_out = model.apply(variables, *inputs), ref_model.apply(ref_variables, *inputs)
    for key in ref_out:
        np.testing.assert_array_equal(out[key], ref_out[key], err_msg=key)


def module_kinds(model):
    """Which torch module each parameter belongs to: HF's other frameworks rename by it."""
    import torch

    kinds = {}
    for name, module in model.named_modules():
        for cls, kind in ((torch.nn.Linear, "dense"), (torch.nn.Embedding, "embedding")):
            if isinstance(module, cls):
                kinds[name] = kind
        if isinstance(module, torch.nn.LayerNorm):
            kinds[name] = "norm"
    return kinds


def weights(model):
    """``(module, leaf, kind, array)`` per stored tensor; the tied decoder is not stored."""
    kinds = module_kinds(model)
    for key, value in model.state_dict().items():
        module, _, leaf = key.rpartition(".")
        if ".decoder" not in key:
            yield module, leaf, kinds.get(module), value.detach().numpy()


def copy_config(src, dst):
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "vocab.txt"):
        shutil.copy(src / name, dst / name)
    return dst


# ---------------------------------------------------------------- models, batches, records


def tiny(recipe="bert", **model):
    """The tiny model config of ``recipe`` with a 97-token vocabulary and 32 positions, and the
    ``model`` keys given."""
    config = load_config(recipe, "tiny")
    config.model.vocab_size = 97
    config.model.max_position_embeddings = 32
    for k, v in model.items():
        config.model[k] = v
    return config


def batch(b=2, s=12, vocab=97, seed=0):
    """``(input_ids, token_type_ids, attention_mask)`` of ``b`` random sequences of ``s``
    tokens: two segments, the first row's last three positions padding."""
    import jax.numpy as jnp

    rs = np.random.RandomState(seed)
    ids = rs.randint(5, vocab, (b, s))
    mask = np.ones((b, s), np.int32)
    mask[0, s - 3 :] = 0
    types = np.zeros((b, s), np.int32)
    types[:, s // 2 :] = 1
    return jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask)


CLS, SEP, PAD = 101, 102, 0


def check_units(ids, real):
    """-1 off ``real``; each unit's tokens contiguous; ids 0..n-1 in order of appearance."""
    for row, mask in zip(ids, real, strict=True):
        assert (row[~mask] == -1).all()
        units = row[row >= 0]
        if not len(units):
            continue
        starts = units[np.r_[True, units[1:] != units[:-1]]]
        assert len(set(starts.tolist())) == len(starts), "a unit is split"
        assert starts.tolist() == sorted(starts.tolist())
        assert starts[0] == 0 and starts[-1] == len(starts) - 1


def check_common(config, batch):
    """The conventions every recipe's records keep (DESIGN.md's batch fields); returns the mask
    of real tokens other than [CLS] and [SEP]."""
    s = config.data.max_seq_length
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert ids.dtype == np.int32 and ids.shape[1] == s and len(ids) > 20
    for name in ("token_type_ids", "attention_mask", "word_ids"):
        assert batch[name].shape == ids.shape and batch[name].dtype == np.int32
    n_real = mask.sum(1)
    assert (mask == (np.arange(s) < n_real[:, None])).all()  # real tokens then padding
    assert (ids[:, 0] == CLS).all()
    assert (ids[np.arange(len(ids)), n_real - 1] == SEP).all()
    assert (ids[mask == 0] == PAD).all()
    real = (mask == 1) & (ids != CLS) & (ids != SEP)
    check_units(batch["word_ids"], real)
    return real


DIALOGUES = os.path.join(DATA, "dialogue", "dialogues.jsonl")


def dlm_config(**data):
    """ERNIE's dialogue-language-model config with the ``data`` keys given."""
    config = load_config("ernie", "dlm")
    for key, value in data.items():
        setattr(config.data, key, value)
    return config


def tables_module():
    """tools/reproduce_tables.py as a module (tools/ is a script folder)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "reproduce_tables", f"{ROOT}/tools/reproduce_tables.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------- cloud storage


def fake_gcs_class():
    """An in-memory filesystem for fsspec's ``gs``, with GCS's one trait that matters to a
    workdir: no append (``gcs`` in conftest.py registers it)."""
    from fsspec.implementations.memory import MemoryFileSystem

    class FakeGCS(MemoryFileSystem):
        protocol = ("gs", "gcs")
        store = {}
        pseudo_dirs = [""]

        def __init__(self, *args, finalize_on_close=False, **kwargs):
            super().__init__(*args, **kwargs)

        @classmethod
        def _strip_protocol(cls, path):  # as gcsfs: "gs://bucket/key" -> "bucket/key"
            path = path[len("gs://") :] if path.startswith("gs://") else path
            return path.rstrip("/")

        def open(self, path, mode="rb", **kwargs):
            if "a" in mode:
                raise NotImplementedError("GCS objects cannot be appended to")
            return super().open(path, mode, **kwargs)

    return FakeGCS


class FakeEvents:
    """tensorboardX's GCS writer needs google-cloud-storage; its part is not under test. The
    log folders it was opened on are kept in ``logdirs``."""

    logdirs = []

    def __init__(self, logdir):
        self.logdirs.append(logdir)

    def add_scalar(self, *args):
        pass

    def flush(self):
        pass

    def close(self):
        pass


def run_seed_twice(config, kind, data, trainer, tmp_path) -> list[dict]:
    """Seed 0 of a fine-tuning run (``zhlm.finetune.train._run``) twice from nothing, each with
    its own progress folder and one metrics writer: the two results, to compare."""
    from zhlm import workdir_lock
    from zhlm.finetune import train as train_lib
    from zhlm.finetune.progress import Progress
    from zhlm.train import metrics as metrics_lib

    writer = metrics_lib.Writer(str(tmp_path))
    try:
        return [
            train_lib._run(
                0,
                config,
                kind,
                data,
                trainer,
                None,
                (writer, Progress(str(tmp_path / w), config, None), workdir_lock.Held(w, None)),
            )
            for w in ("first", "second")
        ]
    finally:
        writer.close()
