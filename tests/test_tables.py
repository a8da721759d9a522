"""``tools/reproduce_tables.py`` at micro scale: the tables run end to end on real data, and the
figures they print agree with what each recipe specifies."""

import re

import pytest
from test_param_table import tables_module

# (P[MASK], P[similar], P[random], P[keep]) each recipe's config asks for.
REPLACEMENT = {
    "bert": (80, 0, 10, 10),
    "roberta_wwm": (80, 0, 10, 10),
    "ernie": (80, 0, 10, 10),
    "spanbert": (80, 0, 10, 10),
    "albert": (80, 0, 10, 10),
    "macbert": (0, 80, 10, 10),
}


@pytest.mark.slow
def test_masking_table_on_real_text():
    text = tables_module().masking_table("micro")
    rows = {line.split("|")[1].strip(): line.split("|") for line in text.splitlines()[4:10]}
    assert sorted(rows) == sorted(REPLACEMENT), text
    for recipe, cells in rows.items():
        assert 14.5 <= float(cells[4].strip(" %")) <= 15.5, cells
        shares = [int(x) for x in re.findall(r"(\d+)%", cells[5])]
        for got, want in zip(shares, REPLACEMENT[recipe], strict=True):
            assert abs(got - want) <= 3, (recipe, shares)
    whole = [int(x) for x in re.findall(r"(\d+)%", rows["roberta_wwm"][6])]
    assert whole == [100, 0, 0, 0]
    assert float(rows["macbert"][7]) > 1.6  # n-grams of 1-4 words, mean 2 as drawn
