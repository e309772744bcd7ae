"""Wrong uses the type checkers must still report (tests/test_typing.py expects an error on each
line marked `# error`): typing TokenIds() loosely must not hide the field's own type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

from tokenwire import TokenIds


@dataclass
class Req:
    rid: str
    input_ids: List[int] = TokenIds()


text: str = Req("r", [1]).input_ids               # error: a list of ints is not a str
Req("r", ["a"])                                    # error: the field takes ints
Req("r", [1]).input_ids = "abc"                    # error: nor a str on assignment
TokenIds(codec=3)                                  # error: a codec is named by a str
TokenIds(vocab_size="32000")                       # error: vocab_size is an int
