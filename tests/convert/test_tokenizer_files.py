"""``zhlm.convert.tokenizer_files`` and the paths through it: a Hugging Face folder with only a
``tokenizer.json`` of a vocabulary other than Google's imports and fine-tunes with that
vocabulary (never the bundled one), and its export, through ``zhlm-convert`` of the
fine-tuning workdir, round-trips through ``AutoTokenizer`` and ``pipeline``, which truncates an
over-long review; tokenizers zhlm cannot read and vocabularies of another size are errors."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import ROOT, tiny_hf

from zhlm.convert import ConversionError, formats, tokenizer_files
from zhlm.finetune import task_files
from zhlm.finetune.train import finetune
from zhlm.train import checkpoint

DATA = os.path.join(os.path.dirname(ROOT), "shared", "data", "chnsenticorp")


def reviews(n=96):
    with open(os.path.join(DATA, "dev.tsv"), encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t", 1) for line in list(f)[1 : n + 1]]


@pytest.fixture(scope="module")
def own_vocab_folder(tmp_path_factory):
    """A tiny random BertForSequenceClassification whose vocabulary is the characters of the
    reviews in reverse order of first use (ids unlike Google's), saved by transformers with
    its fast tokenizer, then stripped of vocab.txt: only tokenizer.json says what the ids are."""
    import transformers

    root = tmp_path_factory.mktemp("own_vocab")
    chars = dict.fromkeys(c for _, text in reviews() for c in text.lower() if not c.isspace())
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *reversed(list(chars))]
    (root / "vocab_source.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    tokenizer = transformers.BertTokenizerFast(str(root / "vocab_source.txt"))
    folder = root / "model"
    tiny_hf(
        "BertForSequenceClassification", vocab_size=len(tokens), hidden_size=32,
        num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64, num_labels=2,
    ).save_pretrained(folder)  # fmt: skip
    tokenizer.save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if (folder / name).exists():
            (folder / name).unlink()
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors", "tokenizer.json"]
    return str(folder), tokenizer


@pytest.mark.slow
def test_a_tokenizer_json_folder_imports_fine_tunes_and_exports_with_its_vocabulary(
    own_vocab_folder, tmp_path
):
    folder, hf_tokenizer = own_vocab_folder
    loaded = checkpoint.load(folder)
    assert loaded.vocab and tokenizer_files.vocab_size(loaded.vocab) == hf_tokenizer.vocab_size
    text = reviews()[0][1]
    from zhlm import config_files

    config = config_files.load(os.path.join(ROOT, "configs", "finetune", "chnsenticorp.py"), "tiny")
    (ours,) = task_files.load_tokenizer(config.task, loaded).encode_batch([text])
    assert list(ours.ids) == hf_tokenizer(text, add_special_tokens=False)["input_ids"]

    rows = reviews()
    data = tmp_path / "reviews.tsv"
    data.write_text("label\ttext_a\n" + "".join(f"{a}\t{b}\n" for a, b in rows), encoding="utf-8")
    config.task.update(train_file=str(data), dev_file=str(data), max_seq_length=64)
    config.train.update(epochs=1, seeds=1, batch_size=16, log_every=0)
    results = finetune(config, folder, str(tmp_path / "ft"))
    assert results["init_from"].startswith("Hugging Face folder")

    out = tmp_path / "hf"
    run = subprocess.run(
        [sys.executable, "-m", "zhlm.cli.convert", f"--input={tmp_path / 'ft'}", f"--output={out}"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (out / name).is_file(), name
    assert json.loads((out / "tokenizer_config.json").read_text())["model_max_length"] == 64

    import transformers

    reloaded = transformers.AutoTokenizer.from_pretrained(out)
    assert reloaded(text)["input_ids"] == hf_tokenizer(text)["input_ids"]
    classify = transformers.pipeline("text-classification", model=str(out), tokenizer=str(out))
    long_review = "".join(b for _, b in rows)[:300]  # past the 64 positions the model has
    (answer,) = classify(long_review, truncation=True)
    assert answer["label"] in ("0", "1") and 0 < answer["score"] <= 1


def test_a_folder_whose_tokenizer_zhlm_cannot_read_is_an_error(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {}}}))
    with pytest.raises(ConversionError, match="a BPE tokenizer; zhlm reads WordPiece"):
        tokenizer_files.find_vocab(str(tmp_path))
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "spiece.model").write_bytes(b"\x00")
    with pytest.raises(ConversionError, match="spiece.model .sentencepiece."):
        tokenizer_files.find_vocab(str(tmp_path))
    (tmp_path / "spiece.model").unlink()
    assert tokenizer_files.find_vocab(str(tmp_path)) is None  # no tokenizer at all


def test_a_vocabulary_of_another_size_than_the_embedding_is_an_error(tmp_path):
    (tmp_path / "vocab.txt").write_text("".join(f"t{i}\n" for i in range(10)))
    tensors = {"bert.embeddings.word_embeddings.weight": np.zeros((12, 4), np.float32)}
    with pytest.raises(ConversionError, match="10 tokens, but .* has 12 rows"):
        formats._vocab(str(tmp_path), tensors)
