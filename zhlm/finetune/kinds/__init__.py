"""The registry of fine-tuning task kinds, as :data:`zhlm.masking.SCHEMES` is of masking schemes.

``config.task.kind`` names one entry, resolved once per run (:func:`get`); the kind
(:class:`~zhlm.finetune.kinds.base.TaskKind`, five parts: read, features, head and loss,
decode and score, export) is then passed as an object. The fine-tuning loop, the predictor,
the diagnostics and the converter never compare kind names.

To add a kind: a module (or a sub-package, as ``ner``) here with a ``TaskKind`` subclass, a
reader in ``zhlm.finetune.readers`` and a metric in ``zhlm.finetune.metrics`` if it brings a
new format or metric, one line in :data:`KINDS`, and a sample in ``SAMPLES`` of
``tests/helpers.py``, which the contract test (``tests/finetune/kinds/test_contract.py``) runs
for every registered kind.
"""

from __future__ import annotations

from zhlm.errors import UserError
from zhlm.finetune.kinds.base import TASK_KEY, TaskKind
from zhlm.finetune.kinds.classification import Classification
from zhlm.finetune.kinds.mrc import Mrc
from zhlm.finetune.kinds.multiple_choice import MultipleChoice
from zhlm.finetune.kinds.ner import Ner
from zhlm.finetune.kinds.regression import Regression
from zhlm.finetune.readers.tables import TableReader
from zhlm.models import model_config

KINDS: dict[str, TaskKind] = {
    k.name: k
    for k in (
        Classification("classification"),
        Classification("pair", reader=TableReader(texts=2)),  # the same kind reading two texts
        Mrc(),
        Ner(),
        MultipleChoice(),
        Regression("regression"),  # a score per pair (STS-B)
    )
}


def get(name: str) -> TaskKind:
    if name not in KINDS:
        raise UserError(f"config.task.kind={name!r}; expected one of {', '.join(KINDS)}")
    return KINDS[name]


def task_model(config):
    """The task model of a fine-tuning config (``task.kind``, ``task.labels``, ``model``)."""
    return get(config.task.kind).model(model_config(config.model), config.task)


def for_hf(hf_config: dict, name: str = "") -> TaskKind:
    """The kind of a Hugging Face task folder, from its ``config.json``: the kind a zhlm export
    names (``zhlm_task``), else the first registered kind whose class ends the architecture
    and that takes the config; ``name`` picks one of the others of that class (``pair`` for a
    sentence-pair classifier)."""
    (architecture,) = hf_config.get("architectures") or [""]
    fits = [k for k in KINDS.values() if architecture.endswith(k.export.hf_class)]
    exported = (hf_config.get(TASK_KEY) or {}).get("kind", "")
    name = name or (exported if exported in KINDS else "")
    if name:
        if get(name) not in fits:
            raise UserError(
                f"kind {name!r} cannot read a {architecture or 'model'} folder: leave the kind "
                "out to take the folder's own"
            )
        return get(name)
    fits = [k for k in fits if k.export.takes(hf_config)]
    if not fits:
        classes = sorted({k.export.hf_class for k in KINDS.values()})
        raise UserError(
            f"a {architecture or 'model without architectures'} folder is no task model zhlm "
            f"predicts with (its classes: *{', *'.join(classes)}); fine-tune it with "
            "zhlm-finetune --init=FOLDER first"
        )
    return fits[0]
