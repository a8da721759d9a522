"""A model folder's tokenizer files: the WordPiece vocabulary read from whichever file holds it,
and the files an export writes so that ``AutoTokenizer`` and ``pipeline`` work as they do for a
Hugging Face model.

Reading: ``vocab.txt`` (``vocab_chinese.txt`` in Google's Chinese ALBERT release), else a
``tokenizer.json`` whose model is WordPiece (what transformers 5 saves, often without a
``vocab.txt``): its vocabulary, by id, is written once to a ``vocab.txt`` in zhlm's cache,
named by its content. A folder with a tokenizer zhlm cannot read (a ``tokenizer.json`` of
another model, a sentencepiece ``.model``) is an error, never a silent fall-back to the bundled
Google vocabulary: token ids of another vocabulary would be wrong without a word.

Writing: ``vocab.txt``, ``tokenizer.json`` (BERT's normaliser, pre-tokeniser and
``[CLS] a [SEP] b [SEP]`` template), ``tokenizer_config.json`` (``BertTokenizer``, lower-casing,
``model_max_length`` from the position table, so inputs are truncated to what the model takes)
and ``special_tokens_map.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

from zhlm.convert.layout import ConversionError

VOCAB_FILES = ("vocab.txt", "vocab_chinese.txt")  # the second: Google's Chinese ALBERT release
TOKENIZER_JSON = "tokenizer.json"
OTHER_TOKENIZERS = ("spiece.model", "sentencepiece.bpe.model", "tokenizer.model")
SPECIAL = dict(
    unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]"
)


def find_vocab(folder: str) -> str | None:
    """The path of ``folder``'s WordPiece vocabulary as a ``vocab.txt`` (see the module
    docstring), or None when the folder has no tokenizer at all."""
    for name in VOCAB_FILES:
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    path = os.path.join(folder, TOKENIZER_JSON)
    if os.path.isfile(path):
        return _vocab_of_tokenizer_json(path)
    for name in OTHER_TOKENIZERS:
        if os.path.isfile(os.path.join(folder, name)):
            raise ConversionError(
                f"{folder}: its tokenizer is {name} (sentencepiece), which zhlm does not read "
                "for this model; add the model's WordPiece vocab.txt to the folder"
            )
    return None


def _vocab_of_tokenizer_json(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            model = json.load(f)["model"]
    except (OSError, ValueError, KeyError) as e:
        raise ConversionError(f"{path}: unreadable ({e}); add the model's vocab.txt") from None
    if model.get("type") != "WordPiece":
        raise ConversionError(
            f"{path}: a {model.get('type')} tokenizer; zhlm reads WordPiece vocabularies (add the "
            "model's vocab.txt)"
        )
    by_id = sorted((i, token) for token, i in model["vocab"].items())
    if [i for i, _ in by_id] != list(range(len(by_id))):
        raise ConversionError(f"{path}: the WordPiece ids are not 0..{len(by_id) - 1}")
    text = "".join(token + "\n" for _, token in by_id)
    from zhlm.data.cache import cache_root

    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    out = os.path.join(cache_root(), "vocab", f"{digest}.txt")
    if not os.path.isfile(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        tmp = f"{out}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, out)
    return out


def vocab_size(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)  # one token per line, id = line number


def write(folder: str, vocab: str, lower_case: bool, max_length: int) -> None:
    """Writes the four tokenizer files of the module docstring into ``folder``."""
    from tokenizers.implementations import BertWordPieceTokenizer

    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, VOCAB_FILES[0])
    if os.path.abspath(vocab) != os.path.abspath(target):
        shutil.copyfile(vocab, target)
    tokenizer = BertWordPieceTokenizer(
        target, lowercase=lower_case, strip_accents=None, handle_chinese_chars=True
    )
    tokenizer.save(os.path.join(folder, TOKENIZER_JSON))
    config = dict(
        tokenizer_class="BertTokenizer",
        do_lower_case=lower_case,
        tokenize_chinese_chars=True,
        strip_accents=None,
        model_max_length=max_length,
        **SPECIAL,
    )
    for name, values in (("tokenizer_config.json", config), ("special_tokens_map.json", SPECIAL)):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            json.dump(values, f, indent=2, ensure_ascii=False)
