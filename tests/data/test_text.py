"""Reading, cleaning and sentence splitting, on the shared corpora and on every kind of bad input.

Why: nothing may be lost silently. Each kind of bad input has a test that checks the
item is repaired, skipped or rejected with a counted reason, and that the good documents next to
it survive.
"""

import gzip
import os

import pytest
from helpers import DATA

from zhlm import defaults
from zhlm.data import pipeline, text

CLUE = os.path.join(DATA, "corpus", "clue_small_docs.txt")
GOOD = "今天天气很好。我们去公园散步吧！\n他说：“明天见。”\n"


def _docs(path, layout="sentences", **kw):
    report = text.Report()
    shard = text.Shard("train", str(path), **kw)
    return list(text.read_documents(shard, layout, "text", report)), report


def _process(path, **overrides):
    cfg = defaults.get_base_config().data
    cfg.format = "doc_sentences"
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return pipeline.process_shard(text.Shard("train", str(path)), cfg)


def test_clean_width_controls_spaces():
    r = text.Report()
    out = text.clean("ＡＢＣ１２３，你好！\u200b\x00　世界\u3000ｘ", r)
    assert out == "ABC123，你好！ 世界 x"  # Chinese punctuation stays full-width
    assert r.reasons["control_chars_removed"] == 2


def test_split_keeps_closing_quotes_and_brackets():
    r = text.Report()
    got = text.split_sentences("他说：“你好！”然后走了。（完）好吧……真的？！", 256, r)
    assert got == ["他说：“你好！”", "然后走了。", "（完）好吧……", "真的？！"]


def test_long_sentence_is_cut_not_dropped():
    r = text.Report()
    s = "很长的句子，" * 100
    got = text.split_sentences(s, 64, r)
    assert "".join(got) == s and max(map(len, got)) <= 64
    assert all(p.endswith("，") for p in got[:-1])  # cut at clause marks
    assert r.reasons["long_sentence_cut"] == len(got) - 1


def test_clue_layout_and_byte_shards_see_every_document_once():
    whole, _ = _docs(CLUE)
    assert len(whole) == 2500  # the README's count
    size = os.path.getsize(CLUE)
    step = 150_000
    pieces = []
    for start in range(0, size, step):
        pieces += _docs(CLUE, start=start, end=start + step)[0]
    assert pieces == whole


def test_doc_per_line_layout_and_jsonl(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("第一篇。还是第一篇。\n第二篇。\n", encoding="utf-8")
    assert len(_docs(p, layout="lines")[0]) == 2
    j = tmp_path / "b.jsonl.gz"
    with gzip.open(j, "wt", encoding="utf-8") as f:
        f.write('{"text": "一篇。\\n两行。"}\n{"title": "x"}\nnot json\n{"text": "再一篇。"}\n')
    docs, r = _docs(j)
    assert docs == [["一篇。", "两行。"], ["再一篇。"]]
    assert r.reasons["bad_json_line"] == 2


def test_traditional_to_simplified():
    import opencc

    r = text.Report()
    out = text.clean("這是繁體中文，这是简体中文。", r, opencc.OpenCC("t2s"))
    assert out == "这是繁体中文，这是简体中文。"
    assert r.reasons["traditional_converted_lines"] == 1


# --- bad input: one test per case -------------------------------------------------------------


def test_bad_non_utf8_bytes_repaired(tmp_path):
    p = tmp_path / "x.txt"
    p.write_bytes(GOOD.encode() + b"\xff\xfe\xc3" + "字节后面。\n".encode())
    _, report = _process(p)
    assert report.reasons["non_utf8_bytes"] >= 2
    assert report.counts["documents"] == 1 and report.counts["instances"] >= 1


def test_bad_nul_bytes_removed(tmp_path):
    p = tmp_path / "x.txt"
    p.write_bytes(b"\x00\x00" + GOOD.encode() + b"\x00")
    batch, report = _process(p)
    assert report.reasons["control_chars_removed"] == 3
    assert report.counts["documents"] == 1


def test_bad_empty_file(tmp_path):
    p = tmp_path / "x.txt"
    p.write_bytes(b"")
    batch, report = _process(p)
    assert report.reasons["empty_file"] == 1 and len(batch["input_ids"]) == 0


def test_bad_only_whitespace_or_punctuation(tmp_path):
    p = tmp_path / "x.txt"
    p.write_text(" \t \n\n。。！？——……\n\n" + GOOD, encoding="utf-8")
    _, report = _process(p)
    assert report.reasons["document_without_text"] == 1
    assert report.counts["documents"] == 1


@pytest.mark.slow
def test_bad_one_megabyte_line_without_punctuation(tmp_path):
    p = tmp_path / "x.txt"
    n = 350_000  # 1.05 MB of UTF-8
    p.write_text("中" * n + "\n\n" + GOOD, encoding="utf-8")
    _, report = _process(p, max_sentence_chars=256)
    assert report.reasons["long_sentence_cut"] == n // 256
    assert report.counts["tokens"] > n  # nothing dropped
    assert report.counts["documents"] == 2


def test_bad_truncated_gzip(tmp_path):
    full = gzip.compress(("".join(f"第{i}篇文章。\n\n" for i in range(2000))).encode())
    p = tmp_path / "x.txt.gz"
    p.write_bytes(full[: len(full) // 2])
    _, report = _process(p)
    assert report.reasons["truncated_gzip"] == 1
    assert 0 < report.counts["documents"] < 2000  # the part before the damage is kept


def test_bad_mixed_traditional_and_simplified(tmp_path):
    p = tmp_path / "x.txt"
    p.write_text("這是繁體字。\n这是简体字。\n", encoding="utf-8")
    batch, report = _process(p, traditional_to_simplified=True)
    assert report.reasons["traditional_converted_lines"] == 1
    assert report.counts["sentences"] == 2


def test_bad_emoji_and_latin_only(tmp_path):
    p = tmp_path / "x.txt"
    p.write_text(
        "😀😀😀\n\nHello world. This is English only.\n\n今天很开心😀！\n", encoding="utf-8"
    )
    batch, report = _process(p)
    assert report.reasons["document_without_text"] == 1  # emoji only: nothing to learn
    assert report.reasons["document_without_chinese_kept"] == 1  # Latin only: kept, counted
    assert report.reasons["emoji_chars_kept_as_unk"] == 1
    assert report.counts["documents"] == 2


def test_bad_missing_or_empty_glob(tmp_path):
    report = text.Report()
    (tmp_path / "a.txt").write_text(GOOD, encoding="utf-8")
    shards = text.expand_inputs(
        [str(tmp_path / "*.txt"), str(tmp_path / "no/*.txt")], report, 2**20
    )
    assert len(shards) == 1 and report.reasons["empty_glob"] == 1
    with pytest.raises(ValueError, match="matched nothing"):
        text.expand_inputs([str(tmp_path / "none*")], text.Report(), 1)


def test_a_corpus_moved_to_another_folder_gives_the_same_instances(tmp_path):
    """A shard's draws are seeded by its path below the glob's fixed folder, not the whole
    path: a copy elsewhere gives the same records, while two files of one name in different
    sub-folders of one glob still draw apart."""
    corpus = open(CLUE, encoding="utf-8").read()[:12_000]
    cfg = defaults.get_base_config().data
    cfg.format = "doc_sentences"
    records = {}
    for top in ("here", "moved/elsewhere"):
        for sub in ("a", "b"):
            (tmp_path / top / sub).mkdir(parents=True)
            (tmp_path / top / sub / "part-0.txt").write_text(corpus, encoding="utf-8")
        shards = text.expand_inputs([str(tmp_path / top / "*/part-*.txt")], text.Report(), 2**20)
        assert [s.name for s in shards] == ["a/part-0.txt", "b/part-0.txt"]
        records[top] = [pipeline.process_shard(s, cfg)[0]["input_ids"] for s in shards]
    (here_a, here_b), (moved_a, moved_b) = records["here"], records["moved/elsewhere"]
    assert (here_a == moved_a).all() and (here_b == moved_b).all()
    assert here_a.shape != here_b.shape or (here_a != here_b).any()


def test_report_names_where_each_reason_first_happened(tmp_path):
    """Every repaired or skipped reason lists the first files and lines (byte offsets in a
    byte-range shard) it came from, merged across shards in file order."""
    p = tmp_path / "x.txt"
    docs = [GOOD, "控制\x00字符。\n", GOOD, "。。。\n"]  # lines 1-2, 4, 6-7, 9
    p.write_text("\n".join(docs), encoding="utf-8")
    _, report = _process(p)
    assert report.locations["control_chars_removed"] == [f"{p}:4"]
    assert report.locations["document_without_text"] == [f"{p}:9"]
    assert f"control_chars_removed: 1 (first at {p}:4)" in report.format()
    # The same file in two byte ranges: the places are the documents' byte offsets, and the
    # merged report does not depend on the order the shards' reports are added in.
    size, offset = p.stat().st_size, len(GOOD.encode()) + 1
    halves = [
        text.Shard("train", str(p), 0, offset + 1),
        text.Shard("train", str(p), offset + 1, size),
    ]
    first, second = (pipeline.process_shard(h, _doc_sentences())[1] for h in halves)
    assert first.locations["control_chars_removed"] == [f"{p}:4"]  # the first range: lines
    last = size - len(docs[-1].encode())  # the punctuation-only document's first byte
    assert second.locations["document_without_text"] == [f"{p}@{last}"]
    merged, reverse = text.Report(), text.Report()
    merged += first
    merged += second
    reverse += second
    reverse += first
    assert merged.locations == reverse.locations and merged.reasons == report.reasons
    assert text.Report.from_dict(merged.to_dict()).locations == merged.locations


def _doc_sentences():
    cfg = defaults.get_base_config().data
    cfg.format = "doc_sentences"
    return cfg
