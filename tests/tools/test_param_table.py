"""ALBERT Table 1 from our modules: every row within 2.5% of a published figure."""

import re

from helpers import load_config, tables_module

from zhlm.models import build_model, count_params


def test_bert_base_count_by_hand():
    """BERT-base with a 30k vocab, counted from the architecture's formula."""
    config = load_config("bert", "base")
    config.model.vocab_size = 30000
    c = count_params(build_model(config))
    h, f, v = 768, 3072, 30000
    layer = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
    assert c["encoder"] == 12 * layer
    assert c["embeddings"] == (v + 512 + 2) * h + 2 * h
    assert c["pooler"] == h * h + h
    assert c["mlm"] == h * h + h + 2 * h + v
    assert c["sentence"] == 2 * h + 2


def test_table_rows_within_published_figures():
    module = tables_module()
    table = module.params_table("micro")
    rows = [
        line
        for line in table.splitlines()
        if line.startswith("| BERT") or line.startswith("| ALBERT")
    ]
    assert len(rows) == 12  # six models, two vocabularies
    paper_rows = rows[:6]
    for line in paper_rows:
        diff = float(re.search(r"([+-]\d+\.\d)%", line).group(1))
        assert abs(diff) <= 2.5, line
