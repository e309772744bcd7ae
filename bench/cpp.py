"""The C++ hand-off and its targets: token ids into std::vector<int32_t> through the
nanobind engine stand-in (bench.engine), and frames decoded in C++.

Every row is one Python call into the same extension, so call overhead is alike for all:
  * memcpy: the extension takes the buffer and copies its bytes into a std::vector (the floor);
  * tokenwire::to_vector: tokenwire/nanobind.hpp, what the tokenwire::Tokens caster runs;
  * nanobind stock caster: std::vector<int32_t> through nanobind/stl/vector.h (engines today);
  * a list whose last item is a numpy scalar: the typed loop stops there and as_tokens' own
    conversion takes the rest (one item), so it costs the all-ints list plus that item (timed
    as a one-item list: the call's cost counted twice, a margin);
  * tokenwire::decode: tokenwire/wire.hpp on a packed frame (bytes in, std::vector out).
Every group has a baseline (*); ratio = baseline time / method time, so > 1 is faster.
"""

from __future__ import annotations

from collections.abc import Callable

import tokenwire
from bench import engine
from bench.data import token_stream
from bench.harness import Figures, Method, Target, grouped_suite_main, ratio_target

BUFFER = "int32 buffer -> std::vector"
LIST_STOCK = "list[int] -> std::vector (vs stock caster)"
LIST_AS_TOKENS = "list[int] -> std::vector (vs as_tokens)"
LIST_ODD_LAST = "list[int], last item a numpy scalar -> std::vector"
ONE_ITEM = "tokenwire::to_vector([numpy scalar]) (one item's cost)"
DECODE = "packed frame -> std::vector"


def methods_for(n: int) -> list[Method]:
    eng = engine.load()
    ids = token_stream(n)
    lst = ids.tolist()
    odd_last = lst[:-1] + [ids[-1]]         # the same ids, the last one an np.int32 scalar
    tv = tokenwire.as_tokens(ids)
    packed = tokenwire.encode(tv, codec="packed")

    def m(group: str, name: str, fn: Callable[[], object], baseline: bool = False) -> Method:
        return Method(name, {"time": fn}, group, baseline)

    return [
        m(BUFFER, "memcpy(TokenVector bytes)", lambda: eng.memcpy_len(tv), True),
        m(BUFFER, "tokenwire::to_vector(TokenVector)", lambda: eng.to_vector_len(tv)),
        m(BUFFER, "tokenwire::to_vector(ndarray int32)", lambda: eng.to_vector_len(ids)),
        m(LIST_STOCK, "nanobind stock caster(list)", lambda: eng.stock_len(lst), True),
        m(LIST_STOCK, "tokenwire::to_vector(list)", lambda: eng.to_vector_len(lst)),
        m(LIST_AS_TOKENS, "tokenwire.as_tokens(list)", lambda: tokenwire.as_tokens(lst), True),
        m(LIST_AS_TOKENS, "tokenwire::to_vector(list) ", lambda: eng.to_vector_len(lst)),
        m(LIST_ODD_LAST, "tokenwire::to_vector(list of ints)", lambda: eng.to_vector_len(lst),
          True),
        m(LIST_ODD_LAST, "tokenwire::to_vector(list, numpy scalar last)",
          lambda: eng.to_vector_len(odd_last)),
        m(LIST_ODD_LAST, ONE_ITEM, lambda: eng.to_vector_len(odd_last[-1:])),
        m(DECODE, "memcpy(decoded bytes)", lambda: eng.memcpy_len(tv), True),
        m(DECODE, "tokenwire::decode(packed) [C++]", lambda: eng.decode_len(packed)),
        m(DECODE, "tokenwire.decode(packed) [Python]", lambda: tokenwire.decode(packed)),
    ]


def _odd_last_excess(f: Figures) -> float:
    """(odd-last list - (all-ints list + one-item list)) / all-ints list, at the target ISL."""
    all_ints = f.row("tokenwire::to_vector(list of ints)", group=LIST_ODD_LAST).total_us()
    odd = f.row("tokenwire::to_vector(list, numpy scalar last)", group=LIST_ODD_LAST).total_us()
    one = f.row(ONE_ITEM, group=LIST_ODD_LAST).total_us()
    return (odd - all_ints - one) / all_ints


TARGETS: list[Target] = [
    ratio_target("to_vector(TokenVector) <= 1.5x a plain memcpy", BUFFER,
     "tokenwire::to_vector(TokenVector)", lambda ratio: 1 / ratio <= 1.5),
    ratio_target("to_vector(list) >= 5x faster than nanobind's stock caster", LIST_STOCK,
     "tokenwire::to_vector(list)", lambda ratio: ratio >= 5.0),
    ratio_target("to_vector(list) within 1.2x of as_tokens(list)", LIST_AS_TOKENS,
     "tokenwire::to_vector(list) ", lambda ratio: 1 / ratio <= 1.2),
    Target("an odd last item costs that item: within the all-ints list + a one-item list, "
           "+ 1 % (the rows' spread)", _odd_last_excess, lambda excess: excess <= 0.01,
           lambda f, excess: f"{excess:+.1%} of the all-ints list's time"),
    ratio_target("C++ decode of a packed frame <= 3x memcpy", DECODE,
     "tokenwire::decode(packed) [C++]", lambda ratio: 1 / ratio <= 3.0),
]


def main(argv: list[str] | None = None) -> int:
    return grouped_suite_main(argv, suite="cpp", doc=__doc__ or "", default_isl="1000,40000,128000",
                              methods_for=methods_for, targets=TARGETS,
                              note="; one Python call into the nanobind engine per row")
