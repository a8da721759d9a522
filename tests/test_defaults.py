"""``zhlm.defaults``: the keys pretraining and fine-tuning share are declared once, in one helper
each, and mean the same in both (the same help line)."""

import ast
import inspect

from zhlm import defaults
from zhlm.cli import usage

SHARED = {"_text": ("data", "task"), "_steps": ("train", "train")}


def _declared(function: str) -> set[str]:
    """The keys ``function`` of defaults.py declares itself (keywords of its ``dict(...)``)."""
    tree = ast.parse(inspect.getsource(getattr(defaults, function)))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "")]
    return {k.arg for call in calls if call.func.id == "dict" for k in call.keywords if k.arg}


def test_shared_keys_are_declared_once_and_read_alike():
    base, finetune = defaults.get_base_config(), defaults.get_finetune_config()
    sections = {"data": "_data", "task": "_task", "train": "_train"}
    for helper, (pretraining, fine_tuning) in SHARED.items():
        keys = _declared(helper)
        assert keys, helper
        own = sections[pretraining], "_finetune_train" if helper == "_steps" else "_task"
        for function in own:
            assert not keys & _declared(function), (function, keys & _declared(function))
        for key in keys:
            assert key in base[pretraining] and key in finetune[fine_tuning], key
            line = usage._comment(pretraining, key, finetune=False)
            assert line and line == usage._comment(fine_tuning, key, finetune=True), key
