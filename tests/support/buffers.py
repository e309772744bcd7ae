"""Whether a TokenVector holds storage of its own or views someone else's memory."""

from __future__ import annotations

import sys

from tokenwire import TokenVector


def owns_memory(tv: TokenVector) -> bool:
    """Has `tv` storage of its own (a copy), rather than viewing someone's memory? (Asked
    without exporting its buffer: an export aligns an unaligned view, which makes a copy.)"""
    return sys.getsizeof(tv) >= sys.getsizeof(TokenVector()) + 4 * len(tv)
