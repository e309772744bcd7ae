"""tokenwire.wires: msgpack, JSON and protobuf id arrays read into a TokenVector and written from
one, checked against the stacks' own encoders and decoders (msgspec, orjson, json, protobuf):
the same bytes out, the same ids in, and every malformed input refused with its exact message.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
import tokenwire._core as _core
import tokenwire.wires as wires
from tokenwire import TokenVector, WireFormatError

from support.leaks import traced_peak
from support.strategies import BOUNDARY_IDS, int32s, token_lists
from support.wait import WAIT_S

msgspec = pytest.importorskip("msgspec")
orjson = pytest.importorskip("orjson")
pb_descriptor = pytest.importorskip("google.protobuf.descriptor_pb2")

from google.protobuf import descriptor_pool, message_factory  # noqa: E402

nonneg_lists = st.lists(st.one_of(st.integers(0, 2**31 - 1), st.sampled_from(
    [b for b in BOUNDARY_IDS if b >= 0])), max_size=300)
# Sizes either side of msgpack's array header forms (fixarray < 16 <= array16 < 65536).
sized_lists = st.integers(0, 70_000).flatmap(
    lambda n: st.lists(int32s, min_size=n, max_size=n) if n < 40 else st.just(
        [(i * 7919) % 151_936 - (i % 3) * 40_000 for i in range(n)]))


# --------------------------------------------------------------------------------------------
# A gRPC request shaped like the serving stacks' protos: ids are `repeated uint32` (packed)

def _request_class() -> type:
    F = pb_descriptor.FieldDescriptorProto
    fdp = pb_descriptor.FileDescriptorProto(name="tokenwire_wires_test.proto",
                                            package="tokenwire_test", syntax="proto3")
    msg = fdp.message_type.add(name="GenerateRequest")
    msg.field.add(name="request_id", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    msg.field.add(name="input_ids", number=2, type=F.TYPE_UINT32, label=F.LABEL_REPEATED)
    msg.field.add(name="signed_ids", number=3, type=F.TYPE_INT32, label=F.LABEL_REPEATED)
    msg.field.add(name="max_tokens", number=4, type=F.TYPE_UINT32, label=F.LABEL_OPTIONAL)
    msg.field.add(name="temperature", number=5, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
    msg.field.add(name="seed", number=6, type=F.TYPE_FIXED64, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tokenwire_test.GenerateRequest"))


GenerateRequest = _request_class()


@contextmanager
def wires_simd(enabled: bool) -> Iterator[None]:
    """The msgpack reader and writer and the protobuf writer with their SSSE3 steps (where the
    CPU has them) or their scalar loops alone."""
    before = _core._set_wires_simd(enabled)
    try:
        yield
    finally:
        _core._set_wires_simd(before)


# --------------------------------------------------------------------------------------------
# Writers: byte-identical to the stacks' encoders

@pytest.mark.parametrize("simd", [True, False], ids=["simd", "scalar"])
@given(ids=token_lists)
def test_msgpack_writer_is_msgspecs_bytes(simd: bool, ids: list[int]) -> None:
    with wires_simd(simd):
        assert wires.write(ids, "msgpack") == msgspec.msgpack.encode(ids)
        assert wires.write(TokenVector(ids), "msgpack") == msgspec.msgpack.encode(ids)


@pytest.mark.parametrize("simd", [True, False], ids=["simd", "scalar"])
@pytest.mark.parametrize("other", [0, 127, 128, 255, 256, 65535, 65536, 2**31 - 1, -1, -33,
                                   -(2**31)])
def test_msgpack_writer_one_other_id_at_every_position(simd: bool, other: int) -> None:
    # uint16 and uint32 ids (written three at a time with SSSE3) around one id at each edge of
    # msgpack's forms, at every position of arrays of every length up to 20.
    for n in range(1, 21):
        base = [256 + (k * 7919) % 151_000 for k in range(n)]
        for at in range(n):
            ids = base[:at] + [other] + base[at + 1:]
            with wires_simd(simd):
                assert wires.write(ids, "msgpack") == msgspec.msgpack.encode(ids)


@given(sized_lists)
def test_msgpack_writer_array_headers(ids: list[int]) -> None:
    data = wires.write(ids, "msgpack")
    assert data == msgspec.msgpack.encode(ids)
    assert wires.read(data, "msgpack") == ids


@given(token_lists)
def test_json_writer_is_compact_json(ids: list[int]) -> None:
    out = wires.write(ids, "json")
    assert out == orjson.dumps(ids) == msgspec.json.encode(ids)
    assert out == json.dumps(ids, separators=(",", ":")).encode()


# From 64 ids the JSON writer reads each id's text from a table of [0, 2**18); below, and for
# the ids outside it, it computes the digits. Both, side by side in one array, at every width.
JSON_WIDTHS = [0, 9, 10, 99, 100, 999, 1000, 9999, 10_000, 99_999, 100_000, 2**18 - 1, 2**18,
               999_999, 10**6, 10**7 - 1, 10**8 - 1, 10**8, 10**9 - 1, 10**9, 2**31 - 1, -1, -9,
               -10, -(2**18), -(2**31)]


@pytest.mark.parametrize("n", [63, 64, 5000])
def test_json_writer_every_width_with_and_without_the_table(n: int) -> None:
    ids = (JSON_WIDTHS * (n // len(JSON_WIDTHS) + 1))[:n]
    assert wires.write(ids, "json") == orjson.dumps(ids) == msgspec.json.encode(ids)


@pytest.mark.parametrize("other", JSON_WIDTHS)
def test_json_writer_one_other_id_at_every_position(other: int) -> None:
    # Table ids (written four at a time) around one id at each width, at every position of
    # arrays long enough for the table: every position within a step and after the last step.
    for n in range(64, 64 + 16):
        base = [(k * 7919) % 151_000 >> (k % 17) for k in range(n)]
        for at in range(n):
            ids = base[:at] + [other] + base[at + 1:]
            assert wires.write(ids, "json") == orjson.dumps(ids)


@given(sized_lists)
def test_json_writer_sizes(ids: list[int]) -> None:
    assert wires.write(ids, "json") == orjson.dumps(ids)


def test_json_table_filled_by_threads_at_once(tmp_path: Path) -> None:
    # A fresh process, so the table is not there yet: threads released together all fill it
    # (the GIL released while they do) and publish it once; each writes the same bytes. It runs
    # in an empty directory: `-c` puts the working directory first on sys.path, and a clone's
    # root would shadow the installed tokenwire with its unbuilt sources.
    code = textwrap.dedent("""
        import threading, orjson, tokenwire.wires as wires
        ids = [(i * 7919) % 262_144 for i in range(5000)] + [-5, 2**31 - 1]
        barrier, out = threading.Barrier(4), []
        def work():
            barrier.wait()
            out.append(wires.write(ids, "json"))
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads: t.start()
        for t in threads: t.join()
        assert out == [orjson.dumps(ids)] * 4, len(out)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=WAIT_S, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("simd", [True, False], ids=["simd", "scalar"])
@given(ids=nonneg_lists)
def test_protobuf_writer_is_the_packed_field(simd: bool, ids: list[int]) -> None:
    with wires_simd(simd):
        assert wires.write(ids, "protobuf", field=2) == \
            GenerateRequest(input_ids=ids).SerializeToString()
        payload = wires.write(ids, "protobuf")
        assert wires.write(ids, "protobuf", field=2).endswith(payload)


@pytest.mark.parametrize("simd", [True, False], ids=["simd", "scalar"])
@given(ids=token_lists)
def test_protobuf_writer_int32_field(simd: bool, ids: list[int]) -> None:
    with wires_simd(simd):
        assert wires.write(ids, "protobuf", field=3) == \
            GenerateRequest(signed_ids=ids).SerializeToString()


@pytest.mark.parametrize("simd", [True, False], ids=["simd", "scalar"])
@pytest.mark.parametrize("other", [0, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1,
                                   2**28, 2**31 - 1, -1, -(2**31)])
def test_protobuf_writer_one_other_id_at_every_position(simd: bool, other: int) -> None:
    # Ids of 1 to 3 varint bytes (written four at a time with SSSE3) around one id at each
    # varint size's edge, at every position of arrays of every length up to 24.
    for n in range(1, 25):
        base = [(k * 7919) % 151_000 >> (k % 3 * 6) for k in range(n)]
        for at in range(n):
            ids = base[:at] + [other] + base[at + 1:]
            with wires_simd(simd):
                assert wires.write(ids, "protobuf", field=3) == \
                    GenerateRequest(signed_ids=ids).SerializeToString()


def test_writers_of_nothing() -> None:
    assert wires.write([], "msgpack") == b"\x90"
    assert wires.write([], "json") == b"[]"
    assert wires.write([], "protobuf", field=2) == b""
    assert wires.write([], "protobuf") == b""


# --------------------------------------------------------------------------------------------
# Readers: the same ids as the stacks' decoders

@given(token_lists)
def test_msgpack_round_trip(ids: list[int]) -> None:
    data = msgspec.msgpack.encode(ids)
    tv = wires.read(data, "msgpack")
    assert type(tv) is TokenVector and tv == ids
    assert msgspec.msgpack.decode(wires.write(tv, "msgpack")) == ids


#: Every msgpack integer form, at its edges: (encoding, value).
INT_FORMS = [
    (b"\x00", 0), (b"\x7f", 127), (b"\xff", -1), (b"\xe0", -32),
    (b"\xcc\x00", 0), (b"\xcc\xff", 255),
    (b"\xcd\x00\x00", 0), (b"\xcd\xff\xff", 65535),
    (b"\xce\x00\x00\x00\x00", 0), (b"\xce\x7f\xff\xff\xff", 2**31 - 1),
    (b"\xcf" + (2**31 - 1).to_bytes(8, "big"), 2**31 - 1), (b"\xcf" + bytes(8), 0),
    (b"\xd0\x80", -128), (b"\xd0\x7f", 127),
    (b"\xd1\x80\x00", -32768), (b"\xd1\x7f\xff", 32767),
    (b"\xd2\x80\x00\x00\x00", -(2**31)), (b"\xd2\x7f\xff\xff\xff", 2**31 - 1),
    (b"\xd3" + (-(2**31)).to_bytes(8, "big", signed=True), -(2**31)),
    (b"\xd3" + (2**31 - 1).to_bytes(8, "big", signed=True), 2**31 - 1),
]


@pytest.mark.parametrize("item,value", INT_FORMS, ids=lambda x: x.hex() if isinstance(x, bytes)
                         else str(x))
def test_msgpack_every_integer_form(item: bytes, value: int) -> None:
    for header in (b"\x93", b"\xdc\x00\x03", b"\xdd\x00\x00\x00\x03"):
        data = header + item * 3
        assert msgspec.msgpack.decode(data) == [value] * 3
        assert wires.read(data, "msgpack") == [value] * 3


#: (type byte, payload size, signed) of each msgpack integer form beyond fixint.
_FORMS = [(0xcc, 1, False), (0xcd, 2, False), (0xce, 4, False), (0xcf, 8, False),
          (0xd0, 1, True), (0xd1, 2, True), (0xd2, 4, True), (0xd3, 8, True)]


@st.composite
def msgpack_items(draw: st.DrawFn) -> bytes:
    """One msgpack integer in any form that holds it (not only the smallest), or now and then an
    integer outside int32, or another type."""
    kind = draw(st.integers(0, 20))
    if kind == 0:
        return draw(st.sampled_from([b"\xc0", b"\xc3", b"\xa1a", b"\x91\x01", b"\xcb" + bytes(8)]))
    if kind <= 3:
        return bytes([draw(st.one_of(st.integers(0, 0x7f), st.integers(0xe0, 0xff)))])
    tb, size, signed = draw(st.sampled_from(_FORMS))
    lo, hi = (-(2 ** (8 * size - 1)), 2 ** (8 * size - 1) - 1) if signed else (0, 2 ** (8 * size) - 1)
    value = draw(st.integers(max(lo, -(2**31) - 2), min(hi, 2**31 + 1)) if kind < 20
                 else st.integers(lo, hi))
    return bytes([tb]) + value.to_bytes(size, "big", signed=signed)


def _read_msgpack(data: bytes, simd: bool) -> list[int] | str:
    """The ids the msgpack reader gives, or its error's message."""
    with wires_simd(simd):
        try:
            return wires.read(data, "msgpack").tolist()
        except WireFormatError as e:
            return str(e)


@pytest.mark.parametrize("simd", [True, False], ids=["simd", "scalar"])
@pytest.mark.parametrize("at", range(40))
@pytest.mark.parametrize("bad", [2**31, 2**32 - 1])
def test_msgpack_uint32_beyond_int32_at_every_position(simd: bool, at: int, bad: int) -> None:
    # uint16 and uint32 items, the forms the reader takes several at a time, one of them too
    # large; 40 items (150 bytes) hold windows of 12.
    values = [300 + k if k % 3 == 1 else 70_000 + k for k in range(40)]
    values[at] = bad
    data = msgspec.msgpack.encode(values)
    offset = 3 + sum(3 if v < 65536 else 5 for v in values[:at])     # after an array16 header
    assert _read_msgpack(data, simd) == (f"msgpack: item {at} at byte offset {offset} is {bad}, "
                                         f"outside int32")
    values[at] = 2**31 - 1
    assert _read_msgpack(msgspec.msgpack.encode(values), simd) == values


#: Items among uint16 and uint32 ones, and what the reader says of each: its value, or the end of
#: its message (item and offset before it).
OTHER_ITEMS = [
    (b"\x05", 5), (b"\xcc\x80", 128), (b"\xcf" + (70_000).to_bytes(8, "big"), 70_000),
    (b"\xd1\x01\x00", 256), (b"\xff", -1), (b"\xd2\x80\x00\x00\x00", -(2**31)),
    (b"\xcd\xce\xce", 0xcece), (b"\xce\x00\xcd\xce\xcd", 0xcdcecd),
    (b"\xce\x7f\xff\xff\xff", 2**31 - 1),
    (b"\xc0", "is nil (type byte 0xc0), not an integer"),
    (b"\xcb" + bytes(8), "is a float (type byte 0xcb), not an integer"),
    (b"\xce\x80\x00\x00\x00", "is 2147483648, outside int32"),
    (b"\xcf" + (2**31).to_bytes(8, "big"), "is 2147483648, outside int32"),
]


@pytest.mark.parametrize("simd", [True, False], ids=["simd", "scalar"])
@pytest.mark.parametrize("item,outcome", OTHER_ITEMS, ids=lambda x: x.hex()[:12]
                         if isinstance(x, bytes) else "")
def test_msgpack_one_other_item_at_every_position(simd: bool, item: bytes,
                                                  outcome: int | str) -> None:
    # 60 uint16/uint32 items (a window of 12 holds any mix of them) with one item in another
    # form, value or type at every position: read as msgspec reads it, or refused by name.
    values = [256 + (k * 7919) % 151_000 for k in range(60)]
    items = [msgspec.msgpack.encode(v) for v in values]
    for at in range(len(items)):
        data = b"\xdc\x00\x3c" + b"".join(items[:at]) + item + b"".join(items[at + 1:])
        offset = 3 + sum(len(x) for x in items[:at])
        if isinstance(outcome, int):
            expected: list[int] | str = values[:at] + [outcome] + values[at + 1:]
            assert msgspec.msgpack.decode(data) == expected
        else:
            expected = f"msgpack: item {at} at byte offset {offset} {outcome}"
        assert _read_msgpack(data, simd) == expected


@pytest.mark.parametrize("simd", [True, False], ids=["simd", "scalar"])
def test_runs_of_small_and_large_ids(simd: bool) -> None:
    # Stretches where the SSSE3 steps rarely take ids (they back off, up to 1024 ids) between
    # stretches where they take every id: the same bytes and ids as msgspec's and protobuf's.
    values: list[int] = []
    for k, (length, every) in enumerate([(3000, 3), (2000, 0), (5000, 10), (50, 0), (4000, 1),
                                         (700, 0), (3000, 40), (13, 0), (2, 1)]):
        values += [(j * 7919 + k) % 100 if every and j % every == 0
                   else 256 + (j * 104_729 + k) % 151_000 for j in range(length)]
    data = msgspec.msgpack.encode(values)
    with wires_simd(simd):
        assert wires.read(data, "msgpack") == values
        assert wires.write(values, "msgpack") == data
        assert wires.write(values, "protobuf", field=2) == \
            GenerateRequest(input_ids=values).SerializeToString()


@st.composite
def uint_heavy_msgpack(draw: st.DrawFn) -> bytes:
    """An array of mostly uint16 and uint32 items (the forms read several at a time), now and
    then another, with one byte replaced, inserted or deleted, or the end cut, or not."""
    items = draw(st.lists(st.one_of(
        st.integers(256, 2**31 - 1).map(msgspec.msgpack.encode),
        st.integers(256, 65535).map(msgspec.msgpack.encode),
        msgpack_items()), min_size=0, max_size=120))
    data = bytearray(b"\xdd" + len(items).to_bytes(4, "big") + b"".join(items))
    edit = draw(st.sampled_from(["none", "replace", "insert", "delete", "cut"]))
    if edit != "none" and len(data) > 5:
        at = draw(st.integers(5, len(data) - 1))
        byte = draw(st.sampled_from([0x00, 0x7f, 0x80, 0xcc, 0xcd, 0xce, 0xcf, 0xc0, 0xff]))
        if edit == "replace":
            data[at] = byte
        elif edit == "insert":
            data.insert(at, byte)
        elif edit == "delete":
            del data[at]
        else:
            del data[at:]
    return bytes(data)


@given(uint_heavy_msgpack())
def test_msgpack_simd_and_scalar_agree_with_msgspec(data: bytes) -> None:
    # The SSSE3 steps and the scalar loops give the same ids or the same message for any input;
    # what either reads, msgspec reads the same.
    got = _read_msgpack(data, True)
    assert got == _read_msgpack(data, False)
    if isinstance(got, list):
        assert msgspec.msgpack.decode(data, type=list[int]) == got
    else:
        assert got.startswith("msgpack: ")
        assert _msgspec_refuses(data)


@given(st.lists(st.one_of(st.integers(0, 10**7), st.sampled_from([0, 9, 10, 10**8, -1])),
                min_size=1, max_size=40),
       st.data())
def test_json_edited_arrays_agree_with_json(ids: list[int], data: st.DataObject) -> None:
    # One byte replaced or inserted anywhere in a compact array: the reader's 16- and 8-byte
    # steps hand every item they do not take (whitespace, a sign, a leading zero, a fraction,
    # a long number, the end) to the exact path, which agrees with `json`.
    text = bytearray(orjson.dumps(ids))
    at = data.draw(st.integers(0, len(text) - 1))
    byte = data.draw(st.sampled_from(b" \n-0.eE],x15"))
    if data.draw(st.booleans()):
        text[at] = byte
    else:
        text.insert(at, byte)
    try:
        expected = json.loads(text)
    except ValueError:
        expected = None
    if isinstance(expected, list) and all(type(v) is int and -(2**31) <= v < 2**31
                                          for v in expected):
        assert wires.read(bytes(text), "json") == expected
    else:
        with pytest.raises(WireFormatError, match=r"^JSON: "):
            wires.read(bytes(text), "json")


@given(st.lists(msgpack_items(), max_size=60))
def test_msgpack_any_form_agrees_with_msgspec(items: list[bytes]) -> None:
    # Arrays long enough for the reader's 8-byte steps and their tail, in every form.
    data = bytes([0xdc]) + len(items).to_bytes(2, "big") + b"".join(items)
    try:
        expected = msgspec.msgpack.decode(data, type=list[int])
    except msgspec.DecodeError:
        expected = None
    if expected is not None and all(-(2**31) <= v < 2**31 for v in expected):
        assert wires.read(data, "msgpack") == expected
    else:
        with pytest.raises(WireFormatError, match=r"^msgpack: item \d+ at byte offset \d+ is "):
            wires.read(data, "msgpack")


@given(token_lists, st.sampled_from(["ws", "indent", "str", "bytearray", "memoryview"]))
def test_json_round_trip(ids: list[int], form: str) -> None:
    text = json.dumps(ids, indent=2 if form == "indent" else None)
    data: object = text
    if form == "ws":
        data = (" \n\t\r" + text.replace(",", " ,\r\n") + "\n ").encode()
    elif form == "bytearray":
        data = bytearray(text.encode())
    elif form == "memoryview":
        data = memoryview(text.encode())
    assert wires.read(data, "json") == ids
    assert orjson.loads(wires.write(wires.read(data, "json"), "json")) == ids


@given(nonneg_lists, st.text(max_size=20), st.integers(0, 2**32 - 1))
def test_protobuf_reads_the_field_of_a_message(ids: list[int], rid: str, mt: int) -> None:
    msg = GenerateRequest(request_id=rid, input_ids=ids, max_tokens=mt, temperature=0.5,
                          seed=2**63, signed_ids=[-1, 5])
    data = msg.SerializeToString()
    assert wires.read(data, "protobuf", field=2) == ids
    assert wires.read(data, "protobuf", field=3) == [-1, 5]
    assert wires.read(data, "protobuf", field=9) == []
    assert wires.read(wires.write(ids, "protobuf"), "protobuf") == ids


@given(token_lists)
def test_protobuf_int32_round_trip(ids: list[int]) -> None:
    data = GenerateRequest(signed_ids=ids).SerializeToString()
    assert wires.read(data, "protobuf", field=3) == ids
    parsed = GenerateRequest.FromString(wires.write(ids, "protobuf", field=3))
    assert list(parsed.signed_ids) == ids


def test_protobuf_unpacked_and_split_chunks_concatenate() -> None:
    # Parsers accept an unpacked element (tag, varint) and several packed chunks for one field.
    chunk1 = wires.write([1, 300], "protobuf", field=2)
    unpacked = b"\x10" + b"\x05"                        # field 2, wire type 0, value 5
    chunk2 = wires.write([70_000], "protobuf", field=2)
    data = chunk1 + unpacked + chunk2
    assert list(GenerateRequest.FromString(data).input_ids) == [1, 300, 5, 70_000]
    assert wires.read(data, "protobuf", field=2) == [1, 300, 5, 70_000]


def test_protobuf_drops_bits_beyond_64_as_protobuf_does() -> None:
    # A 10-byte varint whose last byte carries more than the 64th bit: protobuf reads the low 64
    # bits, and so does tokenwire (found by fuzz/fuzz_protobuf_ids.py).
    data = b"\x12\x0a\xbb\x80\x84\x86\xf8\xff\xff\xff\xff\x3b"
    assert list(GenerateRequest.FromString(data).input_ids) == [2160132155]      # as uint32
    assert wires.read(data, "protobuf", field=3) == []
    assert wires.read(data, "protobuf", field=2) == [-2134835141]                # as int32


def test_protobuf_non_minimal_varints_are_read() -> None:
    data = b"\x12\x03" + b"\x81\x80\x00"               # 1, in three bytes
    assert list(GenerateRequest.FromString(data).input_ids) == [1]
    assert wires.read(data, "protobuf", field=2) == [1]


def test_as_tokens_of_upb_and_pure_python_repeated_fields() -> None:
    # The upb runtime's repeated scalar field exports a buffer, the pure-Python runtime's is a
    # sequence: as_tokens reads both. Each runtime is chosen before protobuf is first imported.
    code = textwrap.dedent("""
        import sys
        from google.protobuf.internal import api_implementation
        from tokenwire import as_tokens, TokenVector
        from test_wires import GenerateRequest
        ids = [0, 1, 151_935, 2**31 - 1]
        msg = GenerateRequest.FromString(GenerateRequest(input_ids=ids).SerializeToString())
        tv = as_tokens(msg.input_ids, vocab_size=2**31)
        assert type(tv) is TokenVector and tv == ids, tv
        print(api_implementation.Type())
    """)
    seen = set()
    for impl in ("upb", "python"):
        env = {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": impl, "PATH": "/usr/bin:/bin"}
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              cwd=Path(__file__).parent, env=env, timeout=WAIT_S)
        assert proc.returncode == 0, proc.stderr
        seen.add(proc.stdout.strip())
    assert seen == {"upb", "python"}


def test_vocab_size_is_checked_once_for_every_wire() -> None:
    for fmt in tokenwire._core.WIRE_FORMATS:
        data = wires.write([3, 151_936], fmt)
        assert wires.read(data, fmt, vocab_size=151_937) == [3, 151_936]
        with pytest.raises(WireFormatError, match=r"^token id at index 1 is 151936, outside "
                           r"the vocabulary \[0, 151936\)$"):
            wires.read(data, fmt, vocab_size=151_936)
        with pytest.raises(ValueError, match="vocab_size must be positive"):
            wires.read(data, fmt, vocab_size=0)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"^format must be 'msgpack', 'json' or 'protobuf', "
                       r"got 'cbor'$"):
        wires.read(b"\x90", "cbor")
    with pytest.raises(ValueError, match="format must be"):
        wires.write([1], "JSON")
    with pytest.raises(ValueError, match=r"^field= is for format='protobuf' only$"):
        wires.read(b"[]", "json", field=1)
    with pytest.raises(ValueError, match=r"field must be a protobuf field number in "
                       r"\[1, 2\*\*29 - 1\], got 0"):
        wires.write([1], "protobuf", field=0)
    with pytest.raises(ValueError, match=r"got 536870912"):
        wires.read(b"", "protobuf", field=2**29)
    with pytest.raises(TypeError, match=r"^format='msgpack' reads bytes, got str$"):
        wires.read("\x90", "msgpack")
    with pytest.raises(tokenwire.errors.TokenIdOverflowError):
        wires.write([2**31], "json")
    with pytest.raises(TypeError):
        wires.read(12, "json")
    assert tokenwire._core.WIRE_FORMATS == ("msgpack", "json", "protobuf")


# --------------------------------------------------------------------------------------------
# Malformed input: the exact message, nothing partial

def _arr(*items: bytes) -> bytes:
    return bytes([0x90 | len(items)]) + b"".join(items)


MSGPACK_ERRORS = [
    (b"", "msgpack: empty input, expected an array of integers"),
    (b"\x01", "msgpack: expected an array of integers, got an integer (type byte 0x01) at "
     "byte offset 0"),
    (b"\x81\x01\x02", "msgpack: expected an array of integers, got a map (type byte 0x81) at "
     "byte offset 0"),
    (b"\xdc\x00", "msgpack: truncated array header: array16 needs 3 bytes, the input has 2"),
    (b"\xdd\x00\x00\x01", "msgpack: truncated array header: array32 needs 5 bytes, the input "
     "has 4"),
    (b"\xdd\xff\xff\xff\xff\x01\x02", "msgpack: the array header declares 4294967295 items, "
     "but only 2 bytes follow it (an item takes at least 1)"),
    (b"\x92\x01", "msgpack: the array header declares 2 items, but only 1 bytes follow it (an "
     "item takes at least 1)"),
    (b"\x92\xcd\x01", "msgpack: truncated: item 0 at byte offset 1 needs 3 bytes, 2 remain"),
    (b"\x93\xcd\x01\x00", "msgpack: truncated: item 1 at byte offset 4 is missing (the array "
     "declares 3 items)"),
    (_arr(b"\x01", b"\xc0"), "msgpack: item 1 at byte offset 2 is nil (type byte 0xc0), not "
     "an integer"),
    (_arr(b"\xcb" + struct.pack(">d", 1.0)), "msgpack: item 0 at byte offset 1 is a float "
     "(type byte 0xcb), not an integer"),
    (_arr(b"\xca" + struct.pack(">f", 1.0)), "msgpack: item 0 at byte offset 1 is a float "
     "(type byte 0xca), not an integer"),
    (_arr(b"\xa1a"), "msgpack: item 0 at byte offset 1 is a string (type byte 0xa1), not an "
     "integer"),
    (_arr(b"\x00", b"\x91\x01"), "msgpack: item 1 at byte offset 2 is an array (type byte "
     "0x91), not an integer"),
    (_arr(b"\xc3"), "msgpack: item 0 at byte offset 1 is a bool (type byte 0xc3), not an "
     "integer"),
    (_arr(b"\xc4\x00"), "msgpack: item 0 at byte offset 1 is binary (type byte 0xc4), not an "
     "integer"),
    (_arr(b"\xd4\x01\x00"), "msgpack: item 0 at byte offset 1 is an extension (type byte "
     "0xd4), not an integer"),
    (_arr(b"\xc1"), "msgpack: item 0 at byte offset 1 is the unused type byte 0xc1 (type "
     "byte 0xc1), not an integer"),
    (_arr(b"\xce\x80\x00\x00\x00"), "msgpack: item 0 at byte offset 1 is 2147483648, outside "
     "int32"),
    (_arr(b"\x05", b"\xcf" + (2**64 - 1).to_bytes(8, "big")), "msgpack: item 1 at byte offset "
     "2 is 18446744073709551615, outside int32"),
    (_arr(b"\xd3" + (-(2**31) - 1).to_bytes(8, "big", signed=True)), "msgpack: item 0 at byte "
     "offset 1 is -2147483649, outside int32"),
    (_arr(b"\x01") + b"\x02", "msgpack: 1 trailing bytes at byte offset 2, after the array's 1 "
     "items"),
]


@pytest.mark.parametrize("data,message", MSGPACK_ERRORS, ids=lambda x: x.hex()[:24]
                         if isinstance(x, bytes) else "")
def test_msgpack_errors(data: bytes, message: str) -> None:
    with pytest.raises(WireFormatError) as info:
        wires.read(data, "msgpack")
    assert str(info.value) == message
    assert _msgspec_refuses(data)


def _msgspec_refuses(data: bytes) -> bool:
    """msgspec refuses `data` as a list[int] too, or reads ids outside int32."""
    try:
        values = msgspec.msgpack.decode(data, type=list[int])
    except msgspec.DecodeError:
        return True
    return not all(-(2**31) <= v < 2**31 for v in values)


JSON_ERRORS = [
    ("", "JSON: expected '[' at byte offset 0, found the end of the input"),
    ("  {}", "JSON: expected '[' at byte offset 2, found '{'"),
    ("[", "JSON: item 0 at byte offset 1: expected an integer, found the end of the input"),
    ("[1,]", "JSON: item 1 at byte offset 3: expected an integer, found ']'"),
    ("[1 2]", "JSON: expected ',' or ']' after item 0 at byte offset 3, found '2'"),
    ("[1.0]", "JSON: item 0 at byte offset 1 is not an integer (a fraction or exponent): "
     "token ids are written as integers"),
    ("[1, 1e3]", "JSON: item 1 at byte offset 4 is not an integer (a fraction or exponent): "
     "token ids are written as integers"),
    ("[01]", "JSON: item 0 at byte offset 1: a number with a leading zero is not JSON"),
    ("[-01]", "JSON: item 0 at byte offset 1: a number with a leading zero is not JSON"),
    ("[+1]", "JSON: item 0 at byte offset 1: expected an integer, found '+'"),
    ("[-]", "JSON: item 0 at byte offset 1: expected an integer, found '-'"),
    ("[null]", "JSON: item 0 at byte offset 1: expected an integer, found 'n'"),
    ('["1"]', "JSON: item 0 at byte offset 1: expected an integer, found '\"'"),
    ("[[1]]", "JSON: item 0 at byte offset 1: expected an integer, found '['"),
    ("[2147483648]", "JSON: item 0 at byte offset 1 is outside int32 (2147483648)"),
    ("[-2147483649]", "JSON: item 0 at byte offset 1 is outside int32 (-2147483649)"),
    ("[1," + "9" * 40 + "]", "JSON: item 1 at byte offset 3 is outside int32 "
     "(99999999999999999999...)"),
    ("[1]x", "JSON: 1 trailing bytes at byte offset 3, after the array"),
    ("[1][2]", "JSON: 3 trailing bytes at byte offset 3, after the array"),
    ("[1,\x0b2]", "JSON: item 1 at byte offset 3: expected an integer, found byte 0x0b"),
    ("\ufeff[1]", "JSON: expected '[' at byte offset 0, found byte 0xef"),
]


@pytest.mark.parametrize("text,message", JSON_ERRORS)
def test_json_errors(text: str, message: str) -> None:
    for data in (text, text.encode()):
        with pytest.raises(WireFormatError) as info:
            wires.read(data, "json")
        assert str(info.value) == message


def test_json_str_that_is_not_text() -> None:
    with pytest.raises(WireFormatError) as info:
        wires.read("[1, \ud800]", "json")
    assert str(info.value) == "JSON: character 4 is a lone surrogate ('\\ud800'), not text JSON " \
        "can hold"


def test_json_what_json_allows_and_tokenwire_refuses() -> None:
    # JSON has fractions and exponents; token ids are integers, so tokenwire refuses them even
    # when their value is whole (orjson would hand a float to the engine). -0 is an integer.
    assert orjson.loads("[1.0, 1e3]") == [1.0, 1000.0]
    assert wires.read("[-0, 0]", "json") == [0, 0] == orjson.loads("[-0, 0]")
    for text in ("[1.0]", "[1e3]", "[1E3]"):
        with pytest.raises(WireFormatError, match="fraction or exponent"):
            wires.read(text, "json")
    for text in ("[01]", "[1,]", "[NaN]"):       # not JSON at all: every parser refuses them
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(text)
        with pytest.raises(WireFormatError):
            wires.read(text, "json")


def _pb(field: int, wire_type: int) -> bytes:
    return wires.write([(field << 3) | wire_type], "protobuf")


PROTOBUF_PAYLOAD_ERRORS = [
    (b"\x01\x80", "protobuf: truncated varint (item 1) at byte offset 1"),
    (b"\xff" * 10 + b"\x01", "protobuf: over-long varint (item 0) at byte offset 0 (more than "
     "10 bytes)"),
    (b"\x05" + b"\x80" * 10 + b"\x00", "protobuf: over-long varint (item 1) at byte offset 1 "
     "(more than 10 bytes)"),
    # Bits beyond the 64th are dropped, as protobuf's parsers do: then the value is checked.
    (b"\x05" + b"\xff" * 9 + b"\x02", "protobuf: item 1 at byte offset 1 is "
     "9223372036854775807, outside int32 (an id is a uint32 below 2**31 or an int32)"),
    (b"\x80\x80\x80\x80\x08", "protobuf: item 0 at byte offset 0 is 2147483648, outside int32 "
     "(an id is a uint32 below 2**31 or an int32)"),
    (b"\x07\xff\xff\xff\xff\x0f", "protobuf: item 1 at byte offset 1 is 4294967295, outside "
     "int32 (an id is a uint32 below 2**31 or an int32)"),
]


@pytest.mark.parametrize("data,message", PROTOBUF_PAYLOAD_ERRORS)
def test_protobuf_payload_errors(data: bytes, message: str) -> None:
    with pytest.raises(WireFormatError) as info:
        wires.read(data, "protobuf")
    assert str(info.value) == message


PROTOBUF_MESSAGE_ERRORS = [
    (b"\x12", "protobuf: truncated length at byte offset 1"),
    (b"\x12\x05\x01", "protobuf: truncated: field 2 at byte offset 0 declares 5 bytes, 1 remain"),
    (b"\x12\x02\x01\x80", "protobuf: truncated varint (item 1) at byte offset 3"),
    (b"\x08", "protobuf: truncated varint at byte offset 1"),
    (b"\x00", "protobuf: invalid field number 0 at byte offset 0"),
    (b"\x15\x00\x00\x00\x00", "protobuf: field 2 at byte offset 0 has wire type 5, not varints"),
    (b"\x0d\x00\x00", "protobuf: truncated field 1 at byte offset 0"),
    (b"\x13", "protobuf: field 2 at byte offset 0 has wire type 3 (a group: not supported)"),
    (b"\x16", "protobuf: field 2 at byte offset 0 has wire type 6 (not a protobuf wire type)"),
    (b"\x80", "protobuf: truncated tag at byte offset 0"),
    (b"\xf8\xff\xff\xff\x1f", "protobuf: invalid field number 1073741823 at byte offset 0"),
    # A tag or a length is a 32-bit varint: protobuf's parser refuses more than 5 bytes, even
    # when the extra bytes are zeros (the fuzzer found the 6-byte tag of an unknown field).
    (b"\x90\x80\x80\x80\x80\x00\x05", "protobuf: over-long tag at byte offset 0 (more than 5 "
     "bytes)"),
    (b"\xc9\xf2\xc6\xea\x88\x00\xcf\x889999t<", "protobuf: over-long tag at byte offset 0 (more "
     "than 5 bytes)"),
    (b"\x1a\x81\x80\x80\x80\x80\x00\x07", "protobuf: over-long length at byte offset 1 (more "
     "than 5 bytes)"),
]


@pytest.mark.parametrize("data,message", PROTOBUF_MESSAGE_ERRORS)
def test_protobuf_message_errors(data: bytes, message: str) -> None:
    with pytest.raises(WireFormatError) as info:
        wires.read(data, "protobuf", field=2)
    assert str(info.value) == message
    if not message.endswith(("not varints", "(a group: not supported)")):
        with pytest.raises(Exception, match="[Ee]rror parsing"):     # protobuf's parser too
            GenerateRequest.FromString(data)


# --------------------------------------------------------------------------------------------
# Allocation bounded by the input's size

@pytest.mark.parametrize("fmt", ["msgpack", "json", "protobuf"])
def test_allocation_is_bounded_by_the_input(fmt: str) -> None:
    ids = [(i * 7919) % 151_936 for i in range(100_000)]
    data = wires.write(ids, fmt)
    tv, peak = traced_peak(lambda: wires.read(data, fmt))
    assert tv == ids
    # The vector (400 kB) plus, for JSON and protobuf, the room the input's size allows before
    # it is shrunk: at most two ids per JSON byte... four bytes per protobuf byte.
    assert peak <= 4 * len(data) + 4 * len(ids) + 4096, (fmt, peak, len(data))


def test_a_header_that_lies_allocates_nothing() -> None:
    data = b"\xdd\xff\xff\xff\xff" + b"\x00" * 64

    def refused() -> None:
        with pytest.raises(WireFormatError, match="declares 4294967295 items"):
            wires.read(data, "msgpack")

    _, peak = traced_peak(refused)
    assert peak < 65536            # the header alone would ask for 16 GiB


# --------------------------------------------------------------------------------------------
# Memory another thread writes during a read (the GIL released)

@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["msgpack", "json", "protobuf"])
def test_a_buffer_written_during_the_read(fmt: str) -> None:
    # The readers run without the GIL from gil_release_threshold() bytes; a thread rewriting the
    # bytes meanwhile may make the result any ids or a WireFormatError, never a crash, another
    # exception or ids that were not in the buffer's range. That the writer ran *during* a call
    # is checked, waiting for it with a generous deadline: with a switch interval of 1000 s the
    # main thread never hands the GIL over between bytecodes, so the writer can run only while a
    # read has released it.
    import threading
    import time

    import tokenwire._core

    ids = [(i * 7919) % 151_936 for i in range(300_000)]
    good = wires.write(ids, fmt)
    buf = bytearray(good)
    half = len(buf) // 2              # the second half only: each read runs a while before
    writes = [0]
    stop = threading.Event()
    start = threading.Barrier(2)

    def writer() -> None:
        start.wait()
        k = 0
        while not stop.is_set():
            for _ in range(64):
                at = half + (k * 104_729) % (len(buf) - half)
                buf[at] = good[at] if k % 2 else (k * 31) & 0xFF
                k += 1
            writes[0] += 1
            time.sleep(0)                  # gives the GIL back to a read that has finished

    previous = tokenwire._core.gil_release_threshold(0)
    interval = sys.getswitchinterval()
    thread = threading.Thread(target=writer)
    thread.start()
    overlapped = 0
    try:
        start.wait()
        sys.setswitchinterval(1000)
        deadline = time.monotonic() + WAIT_S
        while overlapped < 3 and time.monotonic() < deadline:
            before = writes[0]
            try:
                tv = wires.read(buf, fmt, field=None)
                assert all(-(2**31) <= v < 2**31 for v in tv[:10])
            except WireFormatError:
                pass
            if writes[0] > before:
                overlapped += 1
    finally:
        sys.setswitchinterval(interval)
        stop.set()
        thread.join()
        tokenwire._core.gil_release_threshold(previous)
    assert overlapped >= 3, "the writer never ran during a read: was the GIL released?"
