"""The one rule for tokenwire's boolean environment variables (TOKENWIRE_LIST_ON_WIRE at run time,
the TOKENWIRE_* build switches of setup.py).

A standalone module -- it imports nothing from tokenwire -- so that setup.py can load it by path
at build time, before the package (and its compiled extension) exists.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

#: Words that switch a flag on / off (compared after strip() and lower(); unset is off).
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"", "0", "false", "no", "off"})


def env_flag(name: str, environ: Optional[Mapping[str, str]] = None) -> bool:
    """A boolean environment variable: 1/true/yes/on or 0/false/no/off (any case, surrounding
    whitespace ignored; unset or empty is off). Anything else raises ValueError naming the
    variable and its value."""
    raw = (os.environ if environ is None else environ).get(name, "")
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"{name}={raw!r} is not a boolean: use 1/true/yes/on or 0/false/no/off")
