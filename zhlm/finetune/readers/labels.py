"""What a class label read from a file is: equal numbers are one label, and ids may be named.

Why equal numbers are one label: a label column that pandas wrote with a gap holds ``1.0``
where another tool wrote ``1``; read as text they would be two classes of one thing, each with
part of its rows, and nothing would say so. So a label that is a number is spelled one way
(:func:`number_spelling`: ``1.0``, ``01`` and ``+1`` are ``1``; ``0.50`` is ``0.5``), or as
``config.task.labels`` spells that number, which then wins (:class:`Spelling`). The reader
reports each respelling once (``label_respelled``, kept), so the merge is never silent.

Why a names file: datasets ship label ids with a file that names them (THUCNews' ``class.txt``,
a name a line for ids 0, 1, ...; TNEWS' and IFLYTEK's ``labels.json``, JSON lines of
``{"label": "100", "label_desc": "news_story"}``). With ``config.task.label_names`` the ids are
read as their names (:class:`LabelNames`), so the classes in ``results.json``, the predictions
and an export's ``id2label`` say ``sports``, not ``7``. A label the file does not name, or a
file that names one id twice, is refused: the names would not be the data's.
"""

from __future__ import annotations

import dataclasses
import decimal
import json
import os
import re
from collections.abc import Sequence

from zhlm.errors import UserError

_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_MAX_DIGITS = 30  # a longer number is kept as text: an id, not a quantity to compare
NAME_KEYS = ("label_desc", "label_des")  # TNEWS spells it label_desc, IFLYTEK label_des


def number_spelling(label: str) -> str | None:
    """The one spelling of a label that is a decimal number (an integer without a point or
    leading zeros, else the shortest decimal), or None for a label that is not one."""
    if not _NUMBER.fullmatch(label):
        return None
    value = decimal.Decimal(label)
    if value and abs(value.adjusted()) > _MAX_DIGITS:
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


class Spelling:
    """``spelling(label)``: a number label as ``given`` (``config.task.labels``) spells that
    number, else as :func:`number_spelling`; any other label as it is."""

    def __init__(self, given: Sequence[str] = ()):
        self.given: dict[str, str] = {}
        for label in given:
            key = number_spelling(label)
            if key is None:
                continue
            if key in self.given:
                raise UserError(
                    f"config.task.labels names one number twice ({self.given[key]!r} and "
                    f"{label!r}): keep one spelling"
                )
            self.given[key] = label

    def __call__(self, label: str) -> str:
        key = number_spelling(label)
        return label if key is None else self.given.get(key, key)


@dataclasses.dataclass(frozen=True)
class LabelNames:
    """A label-names file: ``names`` maps each label id (as :func:`number_spelling` spells a
    number) to its name, in the file's order."""

    path: str
    names: dict[str, str]

    @classmethod
    def read(cls, path: str) -> LabelNames:
        """``class.txt`` (a name a line: line 1 names id 0) or JSON lines of ``{"label": id,
        "label_desc": name}`` (``label_des`` too); anything else is refused in one line."""
        if not os.path.isfile(path):
            raise UserError(f"config.task.label_names={path}: no such file")
        try:
            with open(path, encoding="utf-8-sig") as f:
                rows = f.read().splitlines()
        except UnicodeDecodeError:
            raise UserError(f"{path}: not UTF-8 text; iconv -f GBK -t UTF-8 converts it") from None
        while rows and not rows[-1].strip():
            rows.pop()
        if not rows:
            raise UserError(f"{path} names no labels: give a name a line, or JSON lines")
        pairs = _json_pairs(path, rows) if rows[0].lstrip().startswith("{") else _lines(path, rows)
        return cls(path, _checked(path, pairs))

    def name(self, label: str) -> str | None:
        """The name of label id ``label``, or None when the file does not name it."""
        return self.names.get(number_spelling(label) or label)

    def given(self, labels: Sequence[str]) -> tuple[str, ...]:
        """``config.task.labels`` as names: each an id the file names, or one of its names."""
        names = set(self.names.values())
        out = []
        for label in labels:
            name = label if label in names else self.name(label)
            if name is None:
                raise UserError(
                    f"config.task.labels: {label!r} is neither an id nor a name in {self.path} "
                    f"(it names {self.describe()}): list the labels as the file does, or ()"
                )
            out.append(name)
        return tuple(out)

    def describe(self) -> str:
        ids = list(self.names)
        shown = ", ".join(ids[:5]) + (f", ... {ids[-1]}" if len(ids) > 5 else "")
        return f"{len(ids)} ids: {shown}"


def _lines(path, rows) -> list[tuple[int, str, str]]:
    """``(line, id, name)`` of a name-a-line file: line ``i + 1`` names id ``i``."""
    for number, row in enumerate(rows, start=1):
        if not row.strip():
            raise UserError(
                f"{path}:{number} is blank: a names file gives the name of id i on line i + 1, "
                "so every line up to the last names one"
            )
    return [(i + 1, str(i), row.strip()) for i, row in enumerate(rows)]


def _json_pairs(path, rows) -> list[tuple[int, str, str]]:
    """``(line, id, name)`` of JSON lines of ``{"label": id, "label_desc": name}``."""
    pairs = []
    for number, row in enumerate(rows, start=1):
        if not row.strip():
            continue
        try:
            item = json.loads(row)
        except json.JSONDecodeError:
            item = None
        item = item if isinstance(item, dict) else {}
        label = item.get("label")
        name = next((item[k] for k in NAME_KEYS if k in item), None)
        good_label = isinstance(label, (str, int)) and not isinstance(label, bool)
        if not good_label or not isinstance(name, str):
            raise UserError(
                f'{path}:{number} is not {{"label": ID, "label_desc": NAME}} (a JSON object a '
                "line, as TNEWS' labels.json), nor is the file a name a line"
            )
        pairs.append((number, str(label).strip(), name.strip()))
    return pairs


def _checked(path, pairs) -> dict[str, str]:
    """``{id: name}`` of ``(line, id, name)``, refusing what would make two labels one or a
    label two: an id or a name twice, an empty name, a name that is another label's id."""
    names: dict[str, str] = {}
    lines: dict[str, int] = {}
    for line, label, name in pairs:
        key = number_spelling(label) or label
        if not name:
            raise UserError(f"{path}:{line}: id {label!r} has an empty name")
        if key in names:
            raise UserError(f"{path}:{line}: id {label!r} named again (line {lines[key]})")
        names[key], lines[key] = name, line
    seen: dict[str, str] = {}
    for key, name in names.items():
        if name in seen:
            raise UserError(
                f"{path}:{lines[key]}: name {name!r} given to ids {seen[name]!r} and {key!r}: "
                "two ids would be one label"
            )
        seen[name] = key
        other = names.get(number_spelling(name) or name)
        if other is not None and (number_spelling(name) or name) != key:
            raise UserError(
                f"{path}:{lines[key]}: name {name!r} of id {key!r} is also an id: names must "
                "differ from the other labels' ids"
            )
    return names
