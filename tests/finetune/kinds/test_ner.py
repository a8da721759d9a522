"""Tests of NER reading, features, merging and the conlleval metric (against seqeval), with
hand-made files for every scheme and the real MSRA-NER files."""

import collections
import json
import os
import random

import numpy as np
import pytest
from helpers import ROOT
from seqeval.metrics import sequence_labeling as seqeval

from zhlm.data.tokenizer import WordPiece, default_vocab
from zhlm.finetune.kinds.ner import features as ner_features
from zhlm.finetune.kinds.ner import records as ner_records
from zhlm.finetune.kinds.ner.features import IGNORE, merge
from zhlm.finetune.metrics import conlleval
from zhlm.finetune.readers import ner

MSRA = os.path.join(ROOT, "..", "shared", "data", "msra_ner")
MSRA_LABELS = ("O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER")


@pytest.fixture(scope="module")
def tokenizer():
    return WordPiece(default_vocab())


def write(tmp_path, name, content, mode="w"):
    path = tmp_path / name
    if mode == "wb":
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return str(path)


def tagged(*sentences):
    """A tag file: each sentence a list of (char, tag), a blank line after each."""
    return "".join("".join(f"{c}\t{t}\n" for c, t in s) + "\n" for s in sentences)


def seqeval_spans(tags):
    return [(t, s, e + 1) for t, s, e in seqeval.get_entities(list(tags))]


# ---------------------------------------------------------------------- chunks and schemes


@pytest.mark.parametrize(
    "tags, spans",
    [
        ("B-PER I-PER O B-LOC", [("PER", 0, 2), ("LOC", 3, 4)]),
        ("O I-PER I-PER O", [("PER", 1, 3)]),  # I- without B- starts an entity
        ("I-PER", [("PER", 0, 1)]),
        ("B-PER I-LOC I-LOC", [("PER", 0, 1), ("LOC", 1, 3)]),  # a type change splits
        ("B-PER B-PER I-PER", [("PER", 0, 1), ("PER", 1, 3)]),
        ("I-PER B-PER", [("PER", 0, 1), ("PER", 1, 2)]),  # IOB1's B-
        ("B-PER E-PER S-LOC E-LOC", [("PER", 0, 2), ("LOC", 2, 3), ("LOC", 3, 4)]),
        ("E-PER E-PER O S-ORG I-ORG", [("PER", 0, 1), ("PER", 1, 2), ("ORG", 3, 4), ("ORG", 4, 5)]),
        ("B-PER I-PER O", [("PER", 0, 2)]),  # BIOES without E-: still one entity
        ("O O", []),
        ("", []),
    ],
)
def test_entities_hand_made_agree_with_seqeval(tags, spans):
    tags = tags.split()
    assert conlleval.entities(tags) == spans
    assert seqeval_spans(tags) == spans


def test_bmes_middle_reads_as_inside():
    assert conlleval.entities("B-PER M-PER E-PER S-LOC".split()) == [("PER", 0, 3), ("LOC", 3, 4)]


def test_entities_match_seqeval_on_random_sequences():
    rng = random.Random(0)
    tags = ["O"] + [f"{p}-{t}" for p in "BIES" for t in ("PER", "LOC")]
    for _ in range(3000):
        seq = [rng.choice(tags) for _ in range(rng.randrange(13))]
        assert conlleval.entities(seq) == seqeval_spans(seq), seq


def test_unknown_tag_shapes_are_errors():
    for tag in ("PER-B", "B-", "X-PER", "b-PER", "", "BB-PER"):
        with pytest.raises(ValueError, match="neither O nor"):
            conlleval.parse_tag(tag)


def random_spans(rng, length, types=("PER", "LOC")):
    """Sorted, non-overlapping spans, often touching (so IOB1 needs its B-)."""
    spans, i = [], rng.randrange(2)
    while i < length:
        n = rng.randint(1, 4)
        if i + n > length:
            break
        spans.append((rng.choice(types), i, i + n))
        i += n + rng.choice((0, 0, 1, 2))
    return spans


@pytest.mark.parametrize("scheme", conlleval.SCHEMES)
def test_every_scheme_round_trips_and_is_detected(scheme):
    rng = random.Random(scheme)
    seqs = []
    for _ in range(300):
        length = rng.randrange(1, 15)
        spans = random_spans(rng, length)
        tags = conlleval.encode(spans, length, scheme)
        assert conlleval.entities(tags) == spans
        assert conlleval.to_bio(tags) == conlleval.encode(spans, length, "bio")
        seqs.append(tags)
    assert conlleval.detect_scheme(seqs) == scheme


def test_scheme_encodings_by_hand():
    spans = [("PER", 0, 1), ("PER", 1, 4), ("LOC", 5, 7)]
    assert conlleval.encode(spans, 7, "bio") == "B-PER B-PER I-PER I-PER O B-LOC I-LOC".split()
    assert conlleval.encode(spans, 7, "iob1") == "I-PER B-PER I-PER I-PER O I-LOC I-LOC".split()
    assert conlleval.encode(spans, 7, "bioes") == "S-PER B-PER I-PER E-PER O B-LOC E-LOC".split()
    assert conlleval.encode(spans, 7, "bmes") == "S-PER B-PER M-PER E-PER O B-LOC E-LOC".split()
    with pytest.raises(ValueError, match="overlaps"):
        conlleval.encode([("PER", 0, 2), ("LOC", 1, 3)], 3)
    with pytest.raises(ValueError, match="unknown tagging scheme"):
        conlleval.encode([], 3, "bilou")


def test_ambiguous_schemes_are_errors():
    with pytest.raises(ValueError, match="neither BIO nor IOB1"):
        conlleval.detect_scheme([["B-PER", "O", "I-PER"]])
    with pytest.raises(ValueError, match="both I- and M-"):
        conlleval.detect_scheme([["B-PER", "M-PER", "E-PER", "O", "B-LOC", "I-LOC"]])
    # One stray I- start among many B- starts is an ill-formed BIO entity, not ambiguity.
    assert conlleval.detect_scheme([["B-PER", "O"]] * 30 + [["I-PER"]]) == "bio"
    assert conlleval.detect_scheme([["O", "O"]]) == "bio"
    # So is one stray E- in a BIO file: its other entities stay well-formed BIO ones.
    bio = [["B-PER", "I-PER", "O"]] * 30
    assert conlleval.detect_scheme(bio + [["B-LOC", "E-LOC"]]) == "bio"
    assert conlleval.detect_scheme(bio + [["B-LOC", "E-LOC"]] * 2) == "bioes"


# ---------------------------------------------------------------------------------- metric


def test_scores_by_hand():
    gold = ["B-PER I-PER O B-LOC".split(), "B-ORG I-ORG".split()]
    pred = ["B-PER I-PER O B-ORG".split(), "O I-ORG".split()]  # the second ORG is one char short
    result = conlleval.scores(gold, pred)
    micro = result["micro"]
    assert (micro["gold"], micro["predicted"], micro["correct"]) == (3, 3, 1)
    assert micro["precision"] == pytest.approx(100 / 3) and micro["f1"] == pytest.approx(100 / 3)
    assert result["by_type"]["PER"]["f1"] == 100
    assert result["by_type"]["LOC"] == dict(
        precision=0.0, recall=0.0, f1=0.0, gold=1, predicted=0, correct=0
    )
    assert result["by_type"]["ORG"]["precision"] == 0 and result["by_type"]["ORG"]["gold"] == 1
    with pytest.raises(ValueError, match="sequence 1: 2 gold tags, 1 predicted"):
        conlleval.scores(gold, [pred[0], ["O"]])


def test_scores_match_seqeval_on_random_tags():
    rng = random.Random(1)
    tags = ["O"] * 6 + [f"{p}-{t}" for p in "BI" for t in ("PER", "LOC", "ORG")]
    gold, pred = [], []
    for _ in range(400):
        n = rng.randrange(1, 20)
        gold.append([rng.choice(tags) for _ in range(n)])
        # Predictions: the gold tags with some changed, so that many entities match.
        pred.append([rng.choice(tags) if rng.random() < 0.2 else t for t in gold[-1]])
    result = conlleval.scores(gold, pred)
    p, r, f, _ = seqeval.precision_recall_fscore_support(gold, pred, average="micro")
    micro = result["micro"]
    assert (micro["precision"], micro["recall"], micro["f1"]) == pytest.approx(
        (100 * p, 100 * r, 100 * f)
    )
    assert 20 < micro["f1"] < 90  # neither trivial nor empty
    p, r, f, support = seqeval.precision_recall_fscore_support(gold, pred, average=None)
    for i, type_ in enumerate(sorted(result["by_type"])):
        got = result["by_type"][type_]
        assert (got["precision"], got["recall"], got["f1"]) == pytest.approx(
            (100 * p[i], 100 * r[i], 100 * f[i])
        )
        assert got["gold"] == support[i]


# --------------------------------------------------------------------------------- reading


TEXT = "张三丰在北京"  # PER 0-3 (three characters, so that bmes needs an M-), LOC 4-6


def sentence_in(scheme):
    spans = [("PER", 0, 3), ("LOC", 4, 6)]
    return list(zip(TEXT, conlleval.encode(spans, 6, scheme), strict=True))


@pytest.mark.parametrize("scheme", conlleval.SCHEMES)
def test_read_tagged_every_scheme_gives_the_same_bio(tmp_path, scheme):
    # A single-character entity too, so that S- tags appear in bioes/bmes.
    single = list(zip("我去京", conlleval.encode([("LOC", 2, 3)], 3, scheme), strict=True))
    path = write(tmp_path, f"{scheme}.txt", tagged(sentence_in(scheme), single))
    examples, report = ner.read_tagged(path)
    assert report.ok and report.scheme == scheme and report.records == 2
    assert examples[0] == ner.NerExample(
        f"{scheme}.txt:1", TEXT, ("B-PER", "I-PER", "I-PER", "O", "B-LOC", "I-LOC"), 1
    )
    assert examples[1].tags == ("O", "O", "B-LOC") and examples[1].line == 8
    explicit, _ = ner.read_tagged(path, scheme=scheme)
    assert explicit == examples


def test_ill_formed_entities_are_kept_the_conlleval_way(tmp_path):
    good = [("我", "O"), ("去", "O"), ("北", "B-LOC"), ("京", "I-LOC")]
    bad = [("在", "O"), ("张", "I-PER"), ("三", "I-PER"), ("家", "B-PER"), ("里", "I-LOC")]
    path = write(tmp_path, "bio.txt", tagged(*[good] * 60, bad))
    examples, report = ner.read_tagged(path)
    assert report.scheme == "bio" and report.records == 61 and report.dropped == 0
    assert examples[-1].tags == ("O", "B-PER", "I-PER", "B-PER", "B-LOC")
    issues = [(i.kind, i.line) for i in report.issues]
    # Line 301 is 在; 张 (I-PER after O) is 302, 里 (I-LOC after B-PER) is 305.
    assert issues == [(ner.ILL_FORMED_ENTITY, 302), (ner.ILL_FORMED_ENTITY, 305)]
    assert "tagged I-PER I-PER after O" in report.issues[0].message
    assert "(scheme bio)" in report.summary()


def test_iob1_b_without_a_preceding_entity_is_reported(tmp_path):
    path = write(tmp_path, "iob1.txt", tagged([("我", "O"), ("张", "B-PER"), ("三", "I-PER")]))
    examples, report = ner.read_tagged(path, scheme="iob1")
    assert examples[0].tags == ("O", "B-PER", "I-PER")
    assert [(i.kind, i.line, i.dropped) for i in report.issues] == [
        (ner.ILL_FORMED_ENTITY, 2, False)
    ]


def test_bad_lines_skip_their_sentence_with_file_and_line(tmp_path):
    good = "我\tO\n"
    content = (
        (
            good + "\n"  # 1: kept
            "中\tB-LOC\textra\n国\tX-LOC\n\n"  # 3, 4: two bad lines, one issue
            "中国\tB-LOC\n\n"  # 6
            "中\tLOC-B\n\n"  # 8
            "中\n\n"  # 10: no tag
            "北 B-LOC\n京\tI-LOC \n\u3000  O\n\n"  # 12: space-separated (an ideographic
            # space the character), and space after a tag, are fine
            "-DOCSTART-\tO\n\n" + good + "\n"  # 16: a document marker, not a record; 18 kept
        ).encode()
        + b"\xff\tO\n\n"
    )  # 20: not UTF-8
    path = write(tmp_path, "bad.txt", content, mode="wb")
    examples, report = ner.read_tagged(path)
    assert [e.text for e in examples] == ["我", "北京\u3000", "我"]
    assert [e.line for e in examples] == [1, 12, 18]
    found = [(i.kind, i.line) for i in report.issues]
    assert found == [
        ("malformed_line", 3),
        ("malformed_line", 6),
        (ner.UNKNOWN_TAG, 8),
        ("malformed_line", 10),
        ("malformed_line", 20),
    ]
    assert "1 more bad lines" in report.issues[0].message and report.dropped == 5
    assert str(report.issues[0]).startswith(f"{path}:3: malformed_line: 3 fields")


def test_tags_outside_a_given_scheme_skip_the_sentence(tmp_path):
    path = write(tmp_path, "s.txt", tagged(sentence_in("bio"), sentence_in("bioes")))
    examples, report = ner.read_tagged(path, scheme="bio")
    assert len(examples) == 1 and [(i.kind, i.line) for i in report.issues] == [
        (ner.UNKNOWN_TAG, 10)  # E-PER, the first tag that BIO does not have
    ]
    with pytest.raises(ValueError, match="unknown tagging scheme"):
        ner.read_tagged(path, scheme="bilou")


def test_crlf_and_bom_and_no_final_blank_line(tmp_path):
    path = write(tmp_path, "w.txt", "\ufeff张\tB-PER\r\n三\tI-PER\r\n\r\n在\tO", mode="w")
    examples, report = ner.read_tagged(path)
    assert report.ok and [(e.text, e.tags) for e in examples] == [
        ("张三", ("B-PER", "I-PER")),
        ("在", ("O",)),
    ]


def test_read_spans_jsonl(tmp_path):
    lines = [
        # CLUENER's first training record.
        {
            "text": "浙商银行企业信贷部叶老桂博士则从另一个角度对五道门槛进行了解读。",
            "label": {"name": {"叶老桂": [[9, 11]]}, "company": {"浙商银行": [[0, 3]]}},
        },
        {"id": 7, "text": "张三在北京"},  # a test record: no label
        {"text": "张三在北京", "label": {"name": {"张三": [[0, 1]], "张三在": [[0, 2]]}}},
        {"text": "张三", "label": {"name": {"张三": [[0, 5], [1, 0], "x"]}}},
        {"text": "张三", "label": {"name": {"李四": [[0, 1]]}}},
        {"text": "", "label": {}},
        {"label": {}},
        {"text": "张三", "label": ["name"]},
    ]
    content = "\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n{oops\n[1]\n"
    examples, report = ner.read_spans_jsonl(write(tmp_path, "c.json", content))
    first = examples[0]
    assert first.tags[:5] == ("B-company", "I-company", "I-company", "I-company", "O")
    assert first.tags[9:13] == ("B-name", "I-name", "I-name", "O")
    assert conlleval.entities(first.tags) == [("company", 0, 4), ("name", 9, 12)]
    assert (examples[1].guid, examples[1].tags) == ("7", ("O",) * 5)
    assert examples[2].tags == ("B-name", "I-name", "I-name", "O", "O")  # longer span first
    assert examples[3].tags == ("O", "O")
    assert examples[4].tags == ("B-name", "I-name")  # offsets win over the entity text
    assert [(i.kind, i.line, i.dropped) for i in report.issues] == [
        (ner.OVERLAPPING_SPAN, 3, False),
        (ner.BAD_SPAN, 4, False),
        (ner.BAD_SPAN, 4, False),
        (ner.BAD_SPAN, 4, False),
        (ner.SPAN_TEXT_MISMATCH, 5, False),
        ("empty_text", 6, True),
        ("missing_field", 7, True),
        ("malformed_line", 8, True),
        ("malformed_line", 9, True),
        ("malformed_line", 10, True),
    ]
    assert report.records == 5


def test_labels_order():
    examples = [
        ner.NerExample("a", "张北", ("B-PER", "B-LOC"), 1),
        ner.NerExample("b", "在", ("O",), 2),
    ]
    assert ner.labels(examples) == ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")
    assert ner.labels([]) == ("O",)


# -------------------------------------------------------------------------------- features


def example(text, spans):
    return ner.NerExample("x", text, tuple(conlleval.encode(spans, len(text))), 1)


LABELS = ("O", "B-ORG", "I-ORG", "B-PER", "I-PER")


def test_latin_word_is_labelled_on_its_first_piece(tokenizer):
    e = example("我在NBA2006打球", [("ORG", 2, 5)])
    f = ner_features.ner_features([e], tokenizer, LABELS, 16, 8)
    tokens = [tokenizer.id_to_token(i) for i in f.arrays["input_ids"][0]]
    n = tokens.index("[SEP]") + 1
    pairs = zip(tokens[:n], f.arrays["labels"][0][:n], strict=True)
    labelled = [(t, LABELS[y]) for t, y in pairs if y >= 0]
    pieces = tokenizer.tokenize("NBA2006")  # one word, several pieces
    assert len(pieces) > 1 and tokens[3 : 3 + len(pieces)] == pieces
    assert labelled == [("我", "O"), ("在", "O"), (pieces[0], "B-ORG"), ("打", "O"), ("球", "O")]
    assert all(a.dtype == np.int32 and a.shape == (1, 16) for a in f.arrays.values())
    assert f.arrays["attention_mask"][0].sum() == n and not f.arrays["token_type_ids"].any()
    assert (f.arrays["labels"][0][n:] == IGNORE).all() and f.arrays["labels"][0][0] == IGNORE
    # The word spreads its tag: the whole of NBA2006 becomes one ORG entity.
    ids = np.where(f.arrays["labels"] >= 0, f.arrays["labels"], 0)
    assert merge(f, ids)[0] == ["O", "O", "B-ORG"] + ["I-ORG"] * 6 + ["O", "O"]
    logits = np.eye(len(LABELS))[ids]
    assert merge(f, logits) == merge(f, ids)


@pytest.mark.parametrize(
    "text, spans",
    [
        ("Bill Gates说", [("PER", 0, 10)]),  # a space inside an entity stays in it
        ("张三 李四", [("PER", 0, 2), ("PER", 3, 5)]),  # between two entities it is O
        ("张\x00三 在", [("PER", 0, 3)]),  # a control character inside, a space after
        (" 张三 ", [("PER", 1, 3)]),
        ("  ", []),  # nothing to tokenize at all
    ],
)
def test_dropped_characters_get_tags_on_merge(tokenizer, text, spans):
    e = example(text, spans)
    f = ner_features.ner_features([e], tokenizer, LABELS, 16, 8)
    ids = np.where(f.arrays["labels"] >= 0, f.arrays["labels"], 0)
    assert merge(f, ids) == [list(e.tags)]


def test_an_entity_ending_inside_a_word_cannot_be_matched(tokenizer):
    # MSRA has two: the tag of a word's first character stands for the whole word.
    e = example("深长城A12", [("ORG", 0, 4)])
    f = ner_features.ner_features([e], tokenizer, LABELS, 16, 8)
    ids = np.where(f.arrays["labels"] >= 0, f.arrays["labels"], 0)
    assert merge(f, ids)[0] == ["B-ORG"] + ["I-ORG"] * 5


def test_windows_cover_every_character_and_merge_takes_the_max_context_one(tokenizer):
    text = "中华人民共和国国务院总理在北京人民大会堂会见了来访的代表团成员一行"
    windows = 10  # 33 characters, 8 per window, starts 3 apart: 0, 3, ..., 24, and 27 (to 33)
    types = [f"W{w}" for w in range(windows)]
    labels = ("O", *(f"{p}-{t}" for t in types for p in "BI"))
    e = ner.NerExample("x", text, ("O",) * len(text), 1)
    f = ner_features.ner_features([e, e], tokenizer, labels, 10, 3)
    assert len(f.example_index) == 2 * windows and (f.example_index[:windows] == 0).all()
    starts = f.window_start[:windows]
    assert list(starts) == list(range(0, 28, 3))
    covered = set()
    for row, start in enumerate(starts):
        chars = f.char_start[row][f.char_start[row] >= 0]
        assert list(chars) == list(range(start, min(start + 8, len(text))))
        covered |= set(chars)
    assert covered == set(range(len(text)))
    assert (f.max_context.sum(0) > 0).any() and f.max_context[:windows].sum() == len(text)
    # Each window predicts its own type everywhere: the merged type says which window won.
    pred = np.repeat(1 + 2 * (np.arange(len(f.example_index)) % windows), 10).reshape(-1, 10)
    merged = merge(f, pred)
    assert merged[0] == merged[1]
    for c, tag in enumerate(merged[0]):
        inside = [w for w, s in enumerate(starts) if s <= c < min(s + 8, len(text))]
        length = [min(8, len(text) - starts[w]) for w in inside]
        score = [
            min(c - starts[w], starts[w] + n - 1 - c) + 0.01 * n
            for w, n in zip(inside, length, strict=True)
        ]
        assert tag == f"B-W{inside[int(np.argmax(score))]}", c


def test_feature_errors(tokenizer):
    e = example("张三", [("PER", 0, 2)])
    with pytest.raises(ValueError, match="not in the labels"):
        ner_features.ner_features([e], tokenizer, ("O", "B-LOC", "I-LOC"), 8, 4)
    with pytest.raises(ValueError, match="unknown_tags"):
        ner_features.ner_features([e], tokenizer, LABELS, 8, 4, "skip")
    with pytest.raises(ValueError, match="stride"):
        ner_features.ner_features([e], tokenizer, LABELS, 8, 7)
    with pytest.raises(ValueError, match="BIO tags"):
        ner_features.ner_features([e], tokenizer, ("O", "S-PER"), 8, 4)
    f = ner_features.ner_features([e], tokenizer, LABELS, 8, 4)
    with pytest.raises(ValueError, match="predictions"):
        merge(f, np.zeros((1, 9), np.int32))


def test_evaluation_keeps_a_type_the_labels_lack_in_the_metric(tokenizer, caplog):
    """A dev entity of a type the training file lacks: out of the loss (warned), still in the
    metric as a gold entity the model cannot find; the known type's words keep their labels."""
    e = example("张三在北京", [("PER", 0, 2), ("LOC", 3, 5)])
    labels = ("O", "B-LOC", "I-LOC")
    f = ner_features.ner_features([e], tokenizer, labels, 16, 4, unknown_tags="ignore")
    assert "B-PER (1)" in caplog.text
    assert f.arrays["labels"][0, :7].tolist() == [-1, -1, -1, 0, 1, 2, -1]
    merged = merge(f, np.array([[0, 0, 0, 0, 1, 2] + [0] * 10]))
    assert merged[0] == ["O", "O", "O", "B-LOC", "I-LOC"]
    assert conlleval.scores([e.tags], merged)["micro"]["f1"] == pytest.approx(200 / 3)


def test_prediction_records_and_file(tmp_path):
    e = ner.NerExample("dev.txt:3", "张三在北京", ("O",) * 5, 3)
    tags = ["I-PER", "I-PER", "O", "B-LOC", "I-LOC"]  # ill-formed, read the conlleval way
    records = ner_records.prediction_records(e, tags)
    assert records == [
        dict(type="PER", start=0, end=2, text="张三"),
        dict(type="LOC", start=3, end=5, text="北京"),
    ]
    path = str(tmp_path / "p.jsonl")
    ner_records.write_predictions(path, [e, e], [tags, ["O"] * 5])
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    label = {"PER": {"张三": [[0, 1]]}, "LOC": {"北京": [[3, 4]]}}
    assert rows[0] == {"id": "dev.txt:3", "text": "张三在北京", "entities": records, "label": label}
    assert rows[1]["entities"] == [] and rows[1]["label"] == {}
    back, report = ner.read_spans_jsonl(path)  # the CLUENER form reads back
    assert report.ok and back[0].tags == ("B-PER", "I-PER", "O", "B-LOC", "I-LOC")
    with pytest.raises(ValueError, match="4 tags for 5 characters"):
        ner_records.prediction_records(e, tags[:4])


# ------------------------------------------------------------------------------- MSRA files


@pytest.fixture(scope="module")
def msra():
    return {split: ner.read_tagged(os.path.join(MSRA, f"{split}.txt")) for split in SPLITS}


SPLITS = ("train", "dev", "test")
# (sentences, characters, entities by type, ill-formed entities by type); the entity counts
# are SOURCE.md's B- counts plus the entities that start with I- at a sentence start.
MSRA_COUNTS = {
    "train": (45658, 1959288, {"PER": 16113, "LOC": 34868, "ORG": 19488}, {"PER": 3, "ORG": 3}),
    "dev": (5000, 210591, {"PER": 1505, "LOC": 1649, "ORG": 1086}, {}),
    "test": (4631, 172601, {"PER": 1984, "LOC": 2877, "ORG": 1331}, {"PER": 11}),
}


@pytest.mark.parametrize("split", SPLITS)
def test_msra_counts(msra, split):
    examples, report = msra[split]
    sentences, chars, by_type, ill_formed = MSRA_COUNTS[split]
    assert report.scheme == "bio" and report.dropped == 0 and len(examples) == sentences
    assert sum(len(e.text) for e in examples) == chars
    assert max(len(e.text) for e in examples) == 100
    found = collections.Counter(t for e in examples for t, _, _ in conlleval.entities(e.tags))
    assert found == by_type
    assert ner.labels(examples) == MSRA_LABELS
    assert {i.kind for i in report.issues} <= {ner.ILL_FORMED_ENTITY}
    assert all("at the sentence start" in i.message for i in report.issues)
    assert collections.Counter(i.message.split()[0] for i in report.issues) == ill_formed
    # Each reported line is the first character of its sentence, and that is now B-.
    by_line = {e.line: e for e in examples}
    assert all(by_line[i.line].tags[0].startswith("B-") for i in report.issues)


def test_msra_ill_formed_lines(msra):
    lines = [i.line for i in msra["train"][1].issues]
    assert lines == [739284, 739384, 739484, 972299, 1002226, 1942301]
    assert [i.line for i in msra["test"][1].issues][:2] == [29083, 29183]


def test_msra_gold_predictions_merge_back(msra, tokenizer):
    """Gold labels through features and merge score as the tokenization allows: dev loses two
    entities that end or start inside a Latin/digit word; small windows change nothing."""
    examples = msra["dev"][0]
    f = ner_features.ner_features(examples, tokenizer, MSRA_LABELS, 128, 64)
    assert len(f.example_index) == len(examples)  # no sentence needs a second window
    merged = merge(f, np.maximum(f.arrays["labels"], 0))
    micro = conlleval.scores([e.tags for e in examples], merged)["micro"]
    assert (micro["gold"], micro["predicted"], micro["correct"]) == (4240, 4240, 4238)
    wrong = [e.text for e, tags in zip(examples, merged, strict=True) if list(e.tags) != tags]
    assert len(wrong) == 2 and "深长城A12" in wrong[0] and "XR津百" in wrong[1]
    part = msra["dev"][0][:300]
    small = ner_features.ner_features(part, tokenizer, MSRA_LABELS, 24, 7)
    assert len(small.example_index) > 2 * len(part)
    merged = merge(small, np.maximum(small.arrays["labels"], 0))
    assert merged == [list(e.tags) for e in part]


# -------------------------------------------------------------------- run diagnostics


def test_a_collapsed_init_is_named_and_the_label_prior_printed(tokenizer, capsys):
    """Fine-tuned from ERNIE tiny after 600 pretraining steps (MLM still at the
    unigram stage), MSRA NER stayed at all O (F1 0) while a random encoder learned. That
    encoder gave every token one vector up to scale; the run now says so, and prints the
    label prior's loss, the plateau such a run sits at."""
    import functools

    import jax

    from zhlm import defaults
    from zhlm.finetune import batching, diagnose, kinds, saved, train
    from zhlm.models import dummy_inputs

    config = defaults.get_finetune_config("tiny")
    config.task.update(kind="ner", labels=MSRA_LABELS, max_seq_length=32)
    config.train.batch_size = 4
    sentences = [
        ("张三在北京工作", [("PER", 0, 2), ("LOC", 3, 5)]),
        ("我们去上海", [("LOC", 3, 5)]),
    ]
    features = ner_features.ner_features(
        [example(text, spans) for text, spans in sentences * 2], tokenizer, MSRA_LABELS, 32, 30
    )
    kind = kinds.get("ner")
    trainer = train.task_trainer(config, kind, 10)
    fresh = saved.init_params(trainer.model, jax.random.key(1), dummy_inputs(32))
    batch = next(batching.batches(features.arrays, 4, np.arange(4)))
    x = np.asarray(train.encoder(trainer)(fresh, batch), np.float64)
    assert diagnose.top_direction_share(x, batch) < 0.5
    collapsed = jax.tree_util.tree_map(np.asarray, fresh)
    emb = collapsed["embeddings"]
    table = emb["word_embeddings"]["embedding"]
    scale = np.random.RandomState(0).uniform(0.5, 2.0, (len(table), 1))
    emb["word_embeddings"]["embedding"] = (scale * table[:1]).astype(table.dtype)
    for name in ("position_embeddings", "token_type_embeddings"):
        emb[name]["embedding"] = np.zeros_like(emb[name]["embedding"])

    encode = functools.partial(train.encoder(trainer), collapsed)
    diagnosis = diagnose.diagnose(kind.chance(features.arrays)["loss"], batch, encode)

    assert diagnosis["init_top_direction_share"] > diagnose.COLLAPSED_SHARE
    assert "token representations have collapsed" in capsys.readouterr().out
    labels = features.arrays["labels"]
    p = np.bincount(labels[labels >= 0]) / (labels >= 0).sum()
    p = p[p > 0]
    assert diagnosis["label_prior_loss"] == pytest.approx(-(p * np.log(p)).sum())


def test_a_training_file_without_entities_is_refused(tmp_path):
    """Every tag O: a tagger would learn to say O everywhere (F1 0), so it is refused, as a
    training set of one class is; one entity in it is enough to train."""
    from helpers import read_task

    from zhlm import defaults

    sentence = [(c, "O") for c in "今天天气很好"]
    path = write(tmp_path, "all_o.txt", tagged(*[sentence] * 6))
    task = defaults.get_finetune_config("tiny").task
    task.update(kind="ner", format="tagged", labels=(), train_file=path, dev_file=path)
    with pytest.raises(ValueError, match=r"all_o.txt: every tag of its 6 training sentences is O"):
        read_task(task)
    path = write(tmp_path, "one.txt", tagged(*[sentence] * 5, [("北", "B-LOC"), ("京", "I-LOC")]))
    task.update(labels=(), train_file=path, dev_file=path)
    assert len(read_task(task)[0]) == 6
