"""Hugging Face transformers <-> zhlm parameters, without torch.

``read_hf`` / ``from_hf`` (``reader``) and ``to_hf`` (``writer``) share one set of name tables
(``layout``). ``zhlm.convert`` is the public face: import from here.
"""

from zhlm.convert.layout import FAMILIES, ConversionError, Family, Report
from zhlm.convert.reader import from_hf, read_hf
from zhlm.convert.writer import to_hf

__all__ = ["FAMILIES", "ConversionError", "Family", "Report", "from_hf", "read_hf", "to_hf"]
