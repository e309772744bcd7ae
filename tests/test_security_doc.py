"""docs/security.md's table of bounds, walked: every row has a check here that exercises its
bound, and every check has a row (a bound added to the code without a row, or a row without a
check, fails)."""

from __future__ import annotations

import functools
import io
import pickle
import re
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Callable, Dict

import pytest

import tokenwire
import tokenwire.unpickle
from tokenwire._core import MAX_SPIN_US, _ShmWords
from tokenwire.unpickle import check_pickle
from support.wait import WAIT_S

DOC = Path(__file__).resolve().parent.parent / "docs" / "security.md"
_RESTORE = b"\x8c\x0ftokenwire._core\x94\x8c\x15_restore_token_vector\x94\x93\x94"
_REQUEST = functools.partial(tokenwire.unpickle.find_class,
                             allow={("tokenwire.request", "GenerationRequest")})


def _rows() -> Dict[str, str]:
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\| `([a-z-]+)` \| (.+?) \| (per [a-z ]+?) \| (.+) \|$", line)
        if m:
            rows[m.group(1)] = m.group(3)
    return rows


def _pickle_declared() -> None:
    with pytest.raises(pickle.UnpicklingError, match="declares 1099511627776 bytes"):
        check_pickle(b"\x80\x05\x8e" + (1 << 40).to_bytes(8, "little") + b"x.")


def _pickle_global() -> None:
    with pytest.raises(pickle.UnpicklingError, match="changes a global"):
        check_pickle(b"\x80\x05" + _RESTORE + b"}(\x8c\x01k\x8c\x01vub.")


def _shared_state(requests: int) -> bytes:
    out = bytearray(b"\x80\x05\x8c\x11tokenwire.request\x94\x8c\x11GenerationRequest\x94"
                    b"\x93\x94}\x94(")
    for k in range(500):
        out += b"\x8c" + bytes([len(f"a{k}")]) + f"a{k}".encode() + b"K\x01"
    return bytes(out + b"u0" + b"h\x02)\x81h\x03b" * requests + b".")


def _load_state() -> None:
    from tokenwire.transport import loads_oob

    assert loads_oob([_shared_state(1)], find_class=_REQUEST).a1 == 1
    with pytest.raises(pickle.UnpicklingError, match="applies one state"):
        loads_oob([_shared_state(2)], find_class=_REQUEST)


def _load_memory() -> None:
    from tokenwire.transport import loads_oob

    data = _shared_state(2000)
    tracemalloc.start()
    try:
        with pytest.raises(pickle.UnpicklingError):
            loads_oob([data], find_class=_REQUEST)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 256 * len(data) + (256 << 10)


def _load_repeats() -> None:
    def named(times: int) -> bytes:
        out = b"\x80\x05" + _RESTORE + b"\x96" + (64).to_bytes(8, "little") + b"\1" * 64
        return out + b"\x94" + b"h\x02h\x03\x85R0" * times + b"N."

    loader = functools.partial(tokenwire.unpickle.find_class)
    with tokenwire.unpickle.load_scope():
        assert _Restricted(loader, named(65)).load() is None          # 64 repeats
    with pytest.raises(pickle.UnpicklingError, match="more than 64 times"):
        with tokenwire.unpickle.load_scope():
            _Restricted(loader, named(66)).load()


class _Restricted(pickle.Unpickler):
    def __init__(self, find: Callable[..., object], data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self._find = find

    def find_class(self, module: str, name: str) -> object:
        return self._find(module, name)


def _aux_reads() -> None:
    msgspec = pytest.importorskip("msgspec")
    import tokenwire.msgspec as tm

    frame = tokenwire.encode(tokenwire.as_tokens(range(1000)), codec="pfor")
    ext = msgspec.msgpack.encode(msgspec.msgpack.Ext(tm.Hooks.BUFFER_EXT_CODE,
                                                     tm._REF_FRAMED.pack(1, 1000, 1)))
    main = b"\xde" + (200).to_bytes(2, "big") + (b"\xa1k" + ext + b"\xa1k\x00") * 100
    hooks = tm.Hooks()
    with pytest.raises(tokenwire.WireFormatError, match="read more than 64 times"):
        msgspec.msgpack.decode(main, ext_hook=lambda c, d: hooks.aux_ext_hook(c, d,
                                                                               [main, frame]))


def _shm_spin() -> None:
    words = _ShmWords(bytearray(64), 8)
    with pytest.raises(ValueError, match="timeout_us must be in"):
        words.wait(0, 1, MAX_SPIN_US * 2)


def _shm_close() -> None:
    words = _ShmWords(bytearray(64), 8)
    barrier, ended = threading.Barrier(2), []

    def spin() -> None:
        barrier.wait()
        try:
            words.wait(0, 1, MAX_SPIN_US)
        except ValueError as e:
            ended.append(str(e))

    thread = threading.Thread(target=spin)
    thread.start()
    barrier.wait()
    deadline = time.monotonic() + WAIT_S
    while words.users == 0:
        assert time.monotonic() < deadline, "the wait never started"
        time.sleep(0.001)
    words.release()
    assert words.users == 0                        # release returned once the wait left
    thread.join(WAIT_S)
    assert ended == ["_ShmWords: released while waiting"]
    with pytest.raises(ValueError, match="released"):
        words.load(0)


CHECKS: Dict[str, Callable[[], None]] = {
    "pickle-declared": _pickle_declared,
    "pickle-global": _pickle_global,
    "load-state": _load_state,
    "load-memory": _load_memory,
    "load-repeats": _load_repeats,
    "aux-reads": _aux_reads,
    "shm-spin": _shm_spin,
    "shm-close": _shm_close,
}


def test_every_bound_in_the_table_has_a_check_and_every_check_a_row() -> None:
    assert set(_rows()) == set(CHECKS)


@pytest.mark.parametrize("bound", sorted(CHECKS))
def test_each_bound_holds(bound: str) -> None:
    assert _rows()[bound].startswith("per ")
    CHECKS[bound]()
