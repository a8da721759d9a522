"""The registry of fine-tuning task kinds, as :data:`zhlm.masking.SCHEMES` is of masking schemes.

``config.task.kind`` names one entry; the kind (:class:`~zhlm.finetune.kinds.base.TaskKind`)
reads its formats, featurizes, supplies the head, the loss and what leaves the device, decodes,
scores, writes records and names its Hugging Face export. The fine-tuning loop, the predictor,
the diagnostics and the converter ask this registry and never compare kind names.

To add a kind: a module here with a ``TaskKind`` subclass, one line in :data:`KINDS`, and a
sample in ``tests/finetune/test_kinds.py`` (the contract test runs every registered kind).
"""

from __future__ import annotations

from zhlm.convert.writer import TaskExport
from zhlm.finetune.kinds.base import TaskKind
from zhlm.finetune.kinds.classification import Classification
from zhlm.finetune.kinds.mrc import Mrc
from zhlm.finetune.kinds.multiple_choice import MultipleChoice
from zhlm.finetune.kinds.ner import Ner
from zhlm.finetune.kinds.regression import Regression
from zhlm.models import model_config

KINDS: dict[str, TaskKind] = {
    k.name: k
    for k in (
        Classification("classification", texts=1),
        Classification("pair", texts=2),  # the same kind reading two texts
        Mrc(),
        Ner(),
        MultipleChoice(),
        Regression("regression", texts=2),  # a score per pair (STS-B)
    )
}


def get(name: str) -> TaskKind:
    if name not in KINDS:
        raise ValueError(f"config.task.kind={name!r}; expected one of {', '.join(KINDS)}")
    return KINDS[name]


def task_model(config):
    """The task model of a fine-tuning config (``task.kind``, ``task.labels``, ``model``)."""
    return get(config.task.kind).model(model_config(config.model), config.task)


def hf_export(config) -> TaskExport:
    """What ``zhlm.convert.to_hf`` needs to export a fine-tuned model of ``config``."""
    kind = get(config.task.kind)
    return TaskExport(kind.hf_class, kind.head, kind.hf_config(config.task))


def for_hf(hf_config: dict, name: str = "") -> TaskKind:
    """The kind of a Hugging Face task folder, from its ``config.json``: the first registered
    kind whose ``hf_class`` ends the architecture and that ``takes_hf`` the config; ``name``
    picks one of the others of that class (``pair`` for a sentence-pair classifier)."""
    (architecture,) = hf_config.get("architectures") or [""]
    fits = [k for k in KINDS.values() if architecture.endswith(k.hf_class)]
    if name:
        if get(name) not in fits:
            raise ValueError(f"kind {name!r} cannot read a {architecture or 'model'} folder")
        return get(name)
    fits = [k for k in fits if k.takes_hf(hf_config)]
    if not fits:
        classes = sorted({k.hf_class for k in KINDS.values()})
        raise ValueError(
            f"a {architecture or 'model without architectures'} folder is no task model zhlm "
            f"predicts with (its classes: *{', *'.join(classes)}); fine-tune it with "
            "zhlm-finetune --init=FOLDER first"
        )
    return fits[0]
