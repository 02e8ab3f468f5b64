"""Model and part names a corpus writes — "PCF-160L", "Olympus CF 20L", "SN60WF" — which
learning declares as words of their own, so that their digits are no value.

Lexed as they come, such a name is a number and a unit: the colonoscope "PCF-160L" is 160
litres, and one note that names it twice holds every learned bound on litres above 160 (a
bound may reject no more than a few clean values). A name is capitals, then two to four
digits with capitals glued on after them.

Public surface: `MODEL_NAME_CLASS`, `model_names`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# the class that declares them (kind `other`: a gap passes over it, no rule binds it)
MODEL_NAME_CLASS = "model_name"

# capitals; a hyphen (with up to three more capitals) or a space, or nothing; the digits;
# the capitals glued on
_MODEL_NAME = re.compile(r"\b([A-Z]{1,5})(-[A-Z]{0,3}| )?[0-9]{2,4}[A-Z]{1,3}\b")


def model_names(texts: Iterable[str], known: Iterable[str] = ()) -> list[str]:
    """The model names `texts` write, sorted. Not one whose capitals before the number are a
    literal in `known` (in any case; the literals of the lexicon learning starts from: "HR"
    in "HR 80BPM" is hours, "USD" in "USD 500M" a currency) or are one letter before a space
    ("P 68BPM": a pulse), and not one that is itself in `known`. Found before keyword
    discovery, which would take a name's capitals ("PCF") for a quantity's name."""
    known = {k.lower() for k in known}
    found = set()
    for text in texts:
        for m in _MODEL_NAME.finditer(text):
            prefix, joint = m.group(1), m.group(2)
            if prefix.lower() in known or (joint == " " and len(prefix) == 1):
                continue
            if m.group(0).lower() not in known:
                found.add(m.group(0))
    return sorted(found)
