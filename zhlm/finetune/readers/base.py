"""The reading part of a task kind: :class:`Reader`, and how examples carry their inputs.

A reader turns files of its formats, and in-memory records (``zhlm.Predictor``), into examples;
it imports no JAX, so tools that only read or score files stay light.

An example is a frozen dataclass whose first field is its id and whose fields without a default
are its inputs (a text, a pair, a question and its context); the gold fields (label, answers,
tags) and ``line`` have defaults. So one rule builds examples from in-memory records
(:meth:`Reader.examples_from`) and puts each example's inputs into its prediction record
(:func:`input_fields`), whatever the kind.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterator

from zhlm.errors import UserError
from zhlm.finetune.readers.report import ReadReport


class Reader(abc.ABC):
    """Files of ``formats`` (``config.task.format``) and in-memory records as examples of
    ``example_type``."""

    formats: tuple[str, ...]
    example_type: type
    takes_label_names = False  # whether config.task.label_names names its labels

    @abc.abstractmethod
    def read(self, path, task, require_label: bool = True) -> tuple[Iterator, ReadReport]:
        """``(examples as they are read, report complete once they are)`` of one file in
        ``task.format``, one record at a time where the format allows (tables and tagged
        text, whatever their size; a JSON document such as SQuAD's or C3's is parsed whole).
        ``require_label`` False (inputs to predict) keeps records without a label."""

    def describe(self, path, task) -> str:
        """For a file of which no record could be read: what it looks like, or the formats
        this reader takes and how to pick one."""
        formats = " or ".join(self.formats)
        return f"format {formats}: pass the one that fits, --config.task.format=NAME"

    def examples_from(self, records, task) -> list:
        """Examples of in-memory inputs: each record a dict holding the example class's inputs
        (:func:`required_fields`) and optionally an ``id`` (default: its position in
        ``records``, from 0); other keys (a label) are not read, the gold fields take their
        defaults. Readers whose examples need more than their inputs (NER's tags) override it
        and call this."""
        cls = self.example_type
        id_field, *inputs = required_fields(cls)
        examples, ids = [], set()
        for index, record in enumerate(records):
            where = f"input {index}"
            if not isinstance(record, dict) or any(name not in record for name in inputs):
                got = (
                    f"has fields {sorted(record)}"
                    if isinstance(record, dict)
                    else f"is a {type(record).__name__}"
                )
                raise UserError(f"{where} {got}; this model reads {spell(inputs)}")
            for name in inputs:
                value = record[name]
                if _declared_str(cls, name) and not (isinstance(value, str) and value.strip()):
                    raise UserError(f"{where}: {name} is {value!r}; give a non-empty string")
            key = str(record.get("id", index))
            if key in ids:
                raise UserError(f"{where}: id {key!r} given twice; give each input its own")
            ids.add(key)
            values = {name: record[name] for name in inputs}
            examples.append(cls(**{id_field: key}, **values, **_line(cls, index + 1)))
        return examples


def required_fields(cls) -> tuple[str, ...]:
    """The fields of example class ``cls`` without a default: its id, then its inputs."""
    return tuple(
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )


def input_fields(example) -> dict:
    """``{name: value}`` of an example's inputs (see the module docstring), which every
    prediction record repeats so that it can be read without its input."""
    return {name: getattr(example, name) for name in required_fields(type(example))[1:]}


def spell(names) -> str:
    """``{"text": ...}``: how a record of ``names`` is written."""
    return "{" + ", ".join(f'"{name}": ...' for name in names) + "}"


def _declared_str(cls, name: str) -> bool:
    (field,) = [f for f in dataclasses.fields(cls) if f.name == name]
    return field.type in (str, "str")


def _line(cls, line: int) -> dict:
    return {"line": line} if "line" in {f.name for f in dataclasses.fields(cls)} else {}
