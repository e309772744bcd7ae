"""The table "Fixtures for every check and every accepting path" of docs/wire-format.md: which
fixtures pin each numbered check (each message of the spec's decoding-rules table), each order
between checks, and each way a frame can be accepted. The table is generated here from the
fixtures themselves: a negative fixture counts for the check whose message it gives, a positive
one for the paths its bytes take (read by the walker below, written from the spec). The test
fails when the table in the spec differs from the generated one, and when a check or a path has
neither a fixture nor a named test (a rule no committed frame can show).

    python tests/test_wire_coverage.py      # rewrites the table in docs/wire-format.md
"""

from __future__ import annotations

import json
import pathlib
import re
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SPEC = ROOT / "docs" / "wire-format.md"
START = "<!-- coverage table: tests/test_wire_coverage.py -->"
END = "<!-- end of coverage table -->"

#: Rules no committed frame can show, and the test that pins each instead.
WITHOUT_FIXTURE = {
    "check 9: N is the sum of a MULTI frame's count table (2^26 + 1 entries, 256 MiB)":
        "tests/test_cpp_wire.py::test_check_9_sums_the_count_table",
    "check 9 after checks 7 and 8 (a sum of 2^58 needs a table of 256 MiB)":
        "tests/test_cpp_wire.py::test_check_9_sums_the_count_table",
    "check 23: `zstd payload decompresses to more than P bytes, the header needs P`":
        "tests/test_wire_spec.py::test_check_23_texts_with_a_libzstd_that_misses_the_size",
    "check 23: `zstd payload decompresses to X bytes, the header needs P`":
        "tests/test_wire_spec.py::test_check_23_texts_with_a_libzstd_that_misses_the_size",
    "no zstd support: `zstd-compressed frame, but the zstandard package is not installed …`":
        "tests/test_wire_spec.py::test_without_zstandard_a_zstd_frame_is_a_wire_format_error",
    "no zstd support in C++: `zstd-compressed frame, but zstd support is not compiled in …`":
        "tests/test_cpp_wire.py::test_without_zstd_zstd_frames_are_refused",
    "zstd: Number_of_Sequences 0 in its 2-byte form, accepted or not (libzstd decides)":
        "tests/test_wire_coverage.py::test_a_two_byte_zero_count_is_decided_by_libzstd",
}

ZSTD_FLAGS = {bytes([f]) for f in range(256) if f & 0x04}

#: Code in the message column of the decoding-rules table that is not a message of its own.
NOT_MESSAGES = {"b'…'", "ChecksumError", "ZSTD_getErrorName(code)", "decode_many",
                "sequence K: ", "sequence 0: ",
                "zstd payload is corrupt: zstd decompress error: Data corruption detected"}

#: Refusals outside the decoding-rules table that a fixture shows: (what, the message's start).
OTHER_REFUSALS = [
    ("`vocab_size` ≤ 0, an argument error (`ValueError`): `vocab_size must be positive, got V`",
     "vocab_size must be positive, got "),
]

#: Orders between checks that a frame breaking two rules pins: (what, fixture, check reported).
ORDERS = [
    ("check 7 before 9 (N is the table's sum, not S)", "table_absurd_count", 7),
    ("check 12 before 13 (pfor)", "order_pfor_size_before_truncation", 12),
    ("check 12 before 13 (ZSTD)", "order_zstd_expansion_before_truncation", 12),
    ("check 13 before 15 and 16", "order_truncated_before_trailing_checksum", 13),
    ("check 15 before 16", "order_trailing_before_checksum", 15),
    ("check 16 before 17", "order_checksum_before_padding_bits", 16),
    ("check 16 before 19", "order_zstd_checksum_before_zstd_walk", 16),
    ("check 16 before 25", "order_pfor_checksum_before_payload", 16),
    ("check 17 before 18", "order_padding_bits_before_multi", 17),
    ("check 18 before 19", "order_multi_before_zstd_walk", 18),
    ("check 18 before 25", "order_pfor_multi_before_payload", 18),
    ("check 18 before 26", "order_multi_before_vocab", 18),
]

#: Every way a frame can be accepted: each needs a positive fixture whose bytes take it.
PATHS = [
    "codec raw", "codec u16", "codec packed", "codec pfor", "CHECKSUM", "MULTI", "MULTI, S = 0",
    "N = 0", "ZSTD over raw", "ZSTD over u16", "ZSTD over packed", "ZSTD over MULTI raw",
    "ZSTD over MULTI u16", "ZSTD over MULTI packed", "ZSTD with CHECKSUM",
    "zstd: single-segment frame", "zstd: Window_Descriptor", "zstd: Window_Descriptor mantissa",
    "zstd: content size in 1 byte", "zstd: content size in 2 bytes",
    "zstd: content size in 4 bytes", "zstd: content size in 8 bytes", "zstd: content size 0",
    "zstd: Dictionary_ID field of 0", "zstd: unused descriptor bit 4 set",
    "zstd: content checksum", "zstd: raw block", "zstd: empty raw block", "zstd: RLE block",
    "zstd: compressed block",
    "zstd: raw literals, 1-byte header", "zstd: raw literals, 2-byte header",
    "zstd: raw literals, 3-byte header", "zstd: RLE literals, 1-byte header",
    "zstd: RLE literals, 2-byte header", "zstd: RLE literals, 3-byte header",
    "zstd: compressed literals, 3-byte header, 1 stream",
    "zstd: compressed literals, 3-byte header, 4 streams",
    "zstd: compressed literals, 4-byte header", "zstd: compressed literals, 5-byte header",
    "zstd: treeless literals",
    "zstd: Number_of_Sequences 0, 1-byte form", "zstd: Number_of_Sequences, 1-byte form",
    "zstd: Number_of_Sequences, 2-byte form", "zstd: Number_of_Sequences, 3-byte form",
    "pfor: short block", "pfor: full block", "pfor: block of width 0",
    "pfor: short block at width 0 with exceptions", "pfor: full block at width 0 with exceptions",
    "pfor: block with exceptions", "pfor: block of width 32",
    "pfor: block longer than 1 + 4m (within the length bound)",
]


def _zstd_paths(section: bytes) -> set[str]:
    """The paths a zstd section takes: its frame header and each block's kind (RFC 8878)."""
    out = set()
    fhd = section[4]
    single, fcs_flag, did_flag = fhd >> 5 & 1, fhd >> 6, fhd & 3
    out.add("zstd: single-segment frame" if single else "zstd: Window_Descriptor")
    pos = 5
    if not single:
        if section[pos] & 7:
            out.add("zstd: Window_Descriptor mantissa")
        pos += 1
    if fhd & 0x10:
        out.add("zstd: unused descriptor bit 4 set")
    if fhd & 0x04:
        out.add("zstd: content checksum")
    did_size = (0, 1, 2, 4)[did_flag]
    if did_size:
        out.add("zstd: Dictionary_ID field of 0")
    pos += did_size
    fcs_size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    out.add(f"zstd: content size in {fcs_size} byte{'s' if fcs_size > 1 else ''}")
    if int.from_bytes(section[pos:pos + fcs_size], "little") == 0 and fcs_size != 2:
        out.add("zstd: content size 0")
    pos += fcs_size
    while True:
        head = int.from_bytes(section[pos:pos + 3], "little")
        btype, size = head >> 1 & 3, head >> 3
        pos += 3
        if btype == 0:
            out.add("zstd: raw block" if size else "zstd: empty raw block")
        elif btype == 1:
            out.add("zstd: RLE block")
        else:
            out.add("zstd: compressed block")
            out |= _compressed_block_paths(section[pos:pos + size])
        pos += 1 if btype == 1 else size
        if head & 1:
            return out


def _compressed_block_paths(block: bytes) -> set[str]:
    out = set()
    ltype, sf = block[0] & 3, block[0] >> 2 & 3
    if ltype <= 1:
        lh = {0: 1, 1: 2, 2: 1, 3: 3}[sf]
        value = int.from_bytes(block[:lh], "little")
        count = value >> 3 if lh == 1 else value >> 4
        out.add(f"zstd: {('raw', 'RLE')[ltype]} literals, {lh}-byte header")
        seq = lh + (count if ltype == 0 else 1)
    else:
        lh, bits = {0: (3, 10), 1: (3, 10), 2: (4, 14), 3: (5, 18)}[sf]
        stored = int.from_bytes(block[:lh], "little") >> (4 + bits)
        if ltype == 3:
            out.add("zstd: treeless literals")
        elif lh == 3:
            out.add(f"zstd: compressed literals, 3-byte header, {1 if sf == 0 else 4} stream"
                    f"{'s' if sf else ''}")
        else:
            out.add(f"zstd: compressed literals, {lh}-byte header")
        seq = lh + stored
    if seq < len(block):
        byte0 = block[seq]
        if byte0 == 0:
            out.add("zstd: Number_of_Sequences 0, 1-byte form")
        else:
            form = 1 if byte0 < 128 else 2 if byte0 < 255 else 3
            out.add(f"zstd: Number_of_Sequences, {form}-byte form")
    return out


def _pfor_paths(payload: bytes, n: int) -> set[str]:
    """The paths a pfor payload takes, block by block ("pfor", Payload)."""
    out, pos = set(), 0
    for first in range(0, n, 128):
        m = min(128, n - first)
        head = payload[pos]
        b, exceptions = head & 0x3F, head >> 7
        size = 1 + (m * b + 7) // 8
        out.add("pfor: full block" if m == 128 else "pfor: short block")
        if b == 0:
            out.add("pfor: block of width 0")
        if b == 32:
            out.add("pfor: block of width 32")
        if exceptions:
            bitmap = payload[pos + size:pos + size + (m + 7) // 8]
            size += len(bitmap) + sum(bin(x).count("1") for x in bitmap)
            out.add("pfor: block with exceptions")
            if b == 0:
                out.add(f"pfor: {'full' if m == 128 else 'short'} block at width 0 with "
                        "exceptions")
        if size > 1 + 4 * m:
            out.add("pfor: block longer than 1 + 4m (within the length bound)")
        pos += size
    return out


def frame_paths(frame: bytes) -> set[str]:
    """Every path of PATHS a valid frame takes."""
    codec, flags, count = frame[5], frame[7], struct.unpack_from("<Q", frame, 8)[0]
    name = ("raw", "u16", "packed", "pfor")[codec]
    out = {f"codec {name}"}
    table = 0
    counts = [count]
    if flags & 0x02:
        out.add("MULTI" if count else "MULTI, S = 0")
        table = (4 * count + 7) // 8 * 8
        counts = list(struct.unpack_from(f"<{count}I", frame, 16))
    if flags & 0x01:
        out.add("CHECKSUM")
    if sum(counts) == 0:
        out.add("N = 0")
    if flags & 0x04:
        out.add(f"ZSTD over {'MULTI ' if flags & 0x02 else ''}{name}")
        if flags & 0x01:
            out.add("ZSTD with CHECKSUM")
        (clen,) = struct.unpack_from("<Q", frame, 16 + table)
        out |= _zstd_paths(frame[16 + table + 8:16 + table + 8 + clen])
    elif codec == 3:
        (plen,) = struct.unpack_from("<Q", frame, 16 + table)
        out |= _pfor_paths(frame[16 + table + 8:16 + table + 8 + plen], sum(counts))
    return out


_ROW = re.compile(r"^\| (\d+) \| .*? \| (.*) \|$")


def check_messages() -> list[tuple[int, str, re.Pattern[str]]]:
    """(check number, message as the spec writes it, its pattern) for each message of the
    spec's decoding-rules table."""
    from test_wire_fixtures import spec_message_patterns

    text = SPEC.read_text()
    out = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        codes = re.findall(r"`([^`]+)`", m.group(2))
        # the same placeholders-to-regex rule as the fixture tests, one message at a time
        patterns = spec_message_patterns(rows=[line])
        out += [(int(m.group(1)), code, p) for code, p in zip(codes, patterns, strict=True)
                if code not in NOT_MESSAGES]
    return out


def build_table() -> str:
    invalid = json.loads((FIXTURES / "invalid" / "manifest.json").read_text())
    valid = json.loads((FIXTURES / "manifest.json").read_text())
    messages = check_messages()
    zstd = {name: (FIXTURES / "invalid" / f"{name}.bin").read_bytes()[7:8] in ZSTD_FLAGS
            for name in invalid}
    by_message: dict[tuple[int, str], list[str]] = {(k, code): [] for k, code, _ in messages}
    reported: dict[str, set[int]] = {}
    for name, case in sorted(invalid.items()):
        for fn in ("decode", "decode_many", "frame_info"):
            message = re.sub(r"^sequence \d+: ", "", case[fn].get("message", ""))
            if not message:
                continue
            number = int((re.findall(r"\d+", message) or ["0"])[0])
            for k, code, pattern in messages:
                # Texts two checks share: 9 and 13 (check 9's B is at least that of 2^58 ids in
                # pfor, 2^51 + 8), 11 and 13 (check 11's C or L is 2^58 or more), 17 and 24
                # (24 is the ZSTD frame's)
                if (k == 9 and number < 2**51 or k == 11 and number < 2**58
                        or k == 17 and zstd[name]):
                    continue
                if pattern.fullmatch(message) or (case[fn].get("match") == "prefix"
                                                  and pattern.pattern.startswith(
                                                      re.escape(message))):
                    if name not in by_message[(k, code)]:
                        by_message[(k, code)].append(name)
                    reported.setdefault(name, set()).add(k)
                    break
    paths: dict[str, list[str]] = {p: [] for p in PATHS}
    for name in sorted(valid):
        for p in frame_paths((FIXTURES / f"{name}.bin").read_bytes()):
            paths.setdefault(p, []).append(name)
    lines = ["| check or path | fixtures (`invalid/` for the negative ones), or the test "
             "that pins it |", "|---|---|"]
    for (k, code), names in by_message.items():
        label = f"check {k}: `{code}`"
        shown = ", ".join(f"`{n}`" for n in names)
        if not names and label in WITHOUT_FIXTURE:
            shown = f"`{WITHOUT_FIXTURE[label]}`"
        lines.append(f"| {label} | {shown} |")
    for what, start in OTHER_REFUSALS:
        names = [n for n, case in sorted(invalid.items())
                 if any(case[fn].get("message", "").startswith(start)
                        for fn in ("decode", "decode_many"))]
        lines.append(f"| {what} | {', '.join(f'`{n}`' for n in names)} |")
    for what, name, k in ORDERS:
        if k not in reported.get(name, set()):
            raise AssertionError(f"{name} does not report check {k} ({what})")
        lines.append(f"| order: {what} | `{name}` |")
    for p, names in paths.items():
        lines.append(f"| accepted: {p} | {', '.join(f'`{n}`' for n in names)} |")
    for what, test in WITHOUT_FIXTURE.items():
        if not what.startswith("check 23: "):
            lines.append(f"| {what} | `{test}` |")
    return "\n".join(lines)


def _spec_table() -> str:
    text = SPEC.read_text()
    return text[text.index(START) + len(START):text.index(END)].strip()


def test_every_check_and_path_has_a_fixture() -> None:
    table = build_table()
    empty = [line for line in table.splitlines()[2:] if line.endswith("|  |")]
    assert not empty, "checks or paths without a fixture (add one, or a named test):\n" + \
        "\n".join(empty)
    unknown = [line for line in table.splitlines()[2:]
               if line.startswith("| accepted: ") and line[12:].split(" |")[0] not in PATHS]
    assert not unknown, f"paths the walker found that PATHS does not list: {unknown}"


def test_the_spec_holds_the_generated_table() -> None:
    assert _spec_table() == build_table(), (
        "docs/wire-format.md's coverage table is out of date: python tests/test_wire_coverage.py")


def test_a_two_byte_zero_count_is_decided_by_libzstd() -> None:
    """Number_of_Sequences 0 written as 80 00: the walk reads the mode byte after it (RFC 8878)
    and checks it, then libzstd decides; the zstandard package's libzstd (1.5.7) refuses a mode
    byte after the count and accepts the block that ends with the count, the reverse of 1.5.4
    (the C++ header's, on the development machine). No fixture can hold either."""
    import pytest

    zstandard = pytest.importorskip("zstandard")
    import tokenwire

    def frame(tail: bytes) -> bytes:
        block = bytes([8 << 3]) + bytes([5] * 8) + tail
        section = (struct.pack("<IBBI", 0xFD2FB528, 0x80, 0x00, 8)
                   + (len(block) << 3 | 2 << 1 | 1).to_bytes(3, "little") + block)
        return (b"TWIR" + struct.pack("<BBBBQ", 1, 2, 8, 0x04, 8)
                + struct.pack("<Q", len(section)) + section)

    with_mode, without = frame(b"\x80\x00\x00"), frame(b"\x80\x00")
    if zstandard.ZSTD_VERSION >= (1, 5, 6):
        assert tokenwire.decode(without).tolist() == [5] * 8
        with pytest.raises(tokenwire.WireFormatError,
                           match="^zstd payload is corrupt: zstd decompress error: "):
            tokenwire.decode(with_mode)
    with pytest.raises(tokenwire.WireFormatError, match="reserved bits set in the sequences"):
        tokenwire.decode(frame(b"\x80\x00\x03"))


def main() -> None:
    text = SPEC.read_text()
    head, rest = text.split(START)
    _, tail = rest.split(END)
    SPEC.write_text(f"{head}{START}\n{build_table()}\n{END}{tail}")


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    main()
