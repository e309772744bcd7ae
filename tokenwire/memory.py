"""How tokenwire reads and holds memory: sources it may view without copying
(``ImmutableBuffer``, ``is_immutable_source``), the size above which it releases the GIL
(``gil_release_threshold``), whether it settles glibc's malloc before a large vector
(``malloc_settling``), and the table of int objects behind ``tolist`` (``INT_CACHE_SIZE``).
docs/guide.md describes them ("Zero-copy views and immutability", "When the GIL is released")."""

from tokenwire._core import (
    INT_CACHE_SIZE,
    ImmutableBuffer,
    gil_release_threshold,
    is_immutable_source,
    malloc_settling,
)

__all__ = ["INT_CACHE_SIZE", "ImmutableBuffer", "gil_release_threshold", "is_immutable_source",
           "malloc_settling"]
