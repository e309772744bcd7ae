"""to_base64 / from_base64: round trips, the same text from pybase64 and binascii, bad text."""

from __future__ import annotations

import base64
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
import tokenwire.text as text
from tokenwire import WireFormatError, from_base64, to_base64
from tokenwire.errors import ChecksumError
from support.strategies import int_arrays, token_lists
from support.wait import WAIT_S

pytest.importorskip("pybase64")          # the test extra installs it: both paths are compared

BACKENDS = ["pybase64", "binascii"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    previous = text._set_pybase64(request.param == "pybase64")
    assert text.base64_backend() == request.param
    try:
        yield request.param
    finally:
        text._set_pybase64(previous)


def both(fn):  # type: ignore[no-untyped-def]
    """fn() under each backend: [(result or exception type and message), ...]."""
    out = []
    for name in BACKENDS:
        previous = text._set_pybase64(name == "pybase64")
        try:
            out.append(("ok", fn()))
        except Exception as e:  # noqa: BLE001 - the point is to compare whatever is raised
            out.append((type(e).__name__, str(e)))
        finally:
            text._set_pybase64(previous)
    return out


@given(ids=token_lists, codec=st.sampled_from(["auto", "raw", "packed"]),
       checksum=st.booleans(), urlsafe=st.booleans())
def test_round_trip_and_same_text_from_both_backends(ids: list[int], codec: str, checksum: bool,
                                                     urlsafe: bool) -> None:
    if codec == "packed" and any(i < 0 for i in ids):
        codec = "raw"
    kw = dict(codec=codec, checksum=checksum, urlsafe=urlsafe)
    (s1, t1), (s2, t2) = both(lambda: to_base64(ids, **kw))   # type: ignore[arg-type]
    assert s1 == s2 == "ok" and t1 == t2
    # The oracle: the standard library's base64 of the same frame.
    frame = tokenwire.encode(ids, codec=codec, checksum=checksum)  # type: ignore[arg-type]
    assert t1 == (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(frame).decode()
    for kind, tv in both(lambda: from_base64(t1, urlsafe=urlsafe)):
        assert kind == "ok" and type(tv) is tokenwire.TokenVector and tv == ids


@given(arr=int_arrays())
def test_any_integer_array_strided_or_not(arr: np.ndarray) -> None:
    s = to_base64(arr)
    expected = arr.astype(np.int64).tolist()
    for encoded in (s, s.encode("ascii"), bytearray(s, "ascii")):
        assert from_base64(encoded).tolist() == expected


@pytest.mark.parametrize("ids", [[], [0], list(range(5))])
def test_small_and_empty(backend: str, ids: list[int]) -> None:
    s = to_base64(ids)
    assert len(s) % 4 == 0 and from_base64(s) == ids and from_base64(memoryview(s.encode())) == ids


def _layouts(raw: bytes) -> dict[str, memoryview]:
    """memoryviews that hold the bytes `raw` in order, in layouts that are not C-contiguous."""
    spread = bytes(x for c in raw for x in (c, 0x2A))     # every other byte is "*"
    layouts = {"strided": memoryview(spread)[::2], "reversed": memoryview(raw[::-1])[::-1]}
    if len(raw) % 4 == 0 and len(raw) >= 8:             # 4 rows of 2 or more
        grid = np.frombuffer(raw, np.uint8).reshape(4, -1)
        layouts["fortran"] = memoryview(np.asfortranarray(grid))
    for view in layouts.values():
        assert not view.c_contiguous and view.tobytes() == raw
    return layouts


@pytest.mark.parametrize("urlsafe", [False, True])
def test_a_memoryview_of_any_layout_reads_as_its_bytes(backend: str, urlsafe: bool) -> None:
    ids = [0xFBFF_FF, 0x3FFFFFF, 7, 70_000] * 5
    for codec in ("raw", "auto"):
        s = to_base64(ids, codec=codec, urlsafe=urlsafe)  # type: ignore[arg-type]
        for name, view in _layouts(s.encode()).items():
            assert from_base64(view, urlsafe=urlsafe) == ids, name
    raw = to_base64(ids, format="int32").encode()
    for view in _layouts(raw).values():
        assert from_base64(view, format="int32") == ids


def test_bad_text_in_a_strided_memoryview_is_the_same_wire_format_error(backend: str) -> None:
    for bad, _ in BAD_TEXT[:-2]:                          # the last two are not base64 errors
        raw = bad.encode("utf-8")
        with pytest.raises(WireFormatError) as plain:
            from_base64(raw)
        for name, view in _layouts(raw).items():
            with pytest.raises(WireFormatError) as strided:
                from_base64(view)
            assert str(strided.value) == str(plain.value), (bad, name)


def test_wrong_dtype_and_values_raise_what_encode_raises(backend: str) -> None:
    with pytest.raises(TypeError):
        to_base64(np.array([1.5, 2.0]))
    with pytest.raises(OverflowError):
        to_base64([2**31])
    with pytest.raises(ValueError, match="codec"):
        to_base64([1], codec="nope")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="str or bytes"):
        from_base64(12345)  # type: ignore[arg-type]


def test_18_bit_ids_take_at_most_3_1_characters_each() -> None:
    ids = np.random.default_rng(0).integers(0, 151_936, size=40_000, dtype=np.int32)
    assert int(ids.max()).bit_length() == 18
    assert len(to_base64(ids)) / len(ids) <= 3.1


def test_urlsafe_alphabet(backend: str) -> None:
    ids = [0xFBFF_FF, 0x3FFFFFF, 0x7FFFFFFF] * 20          # bytes that map to + and /
    std, url = to_base64(ids, codec="raw"), to_base64(ids, codec="raw", urlsafe=True)
    assert ("+" in std or "/" in std) and "+" not in url and "/" not in url
    assert url == std.replace("+", "-").replace("/", "_")
    assert from_base64(url, urlsafe=True) == ids
    with pytest.raises(WireFormatError, match="character '[-_]' at position"):
        from_base64(url)
    with pytest.raises(WireFormatError, match=r"character '[+/]' at position .* \(A-Z a-z 0-9 - _ =\)"):
        from_base64(std, urlsafe=True)
    for raw in (std.encode(), bytearray(std.encode()), memoryview(std.encode())):
        with pytest.raises(WireFormatError, match="character '[+/]' at position"):
            from_base64(raw, urlsafe=True)


#: (text, what the message must say): the same from either backend.
BAD_TEXT = [
    ("AB=A", "padding '=' at position 2 before the end"),
    ("A===", "excess padding '=' at position 3"),
    ("AAAA====", "excess padding '=' at position 6"),
    ("AAAAAAAA====", "excess padding '=' at position 10"),
    ("ABC", "3 characters, not a multiple of 4"),
    ("AB C", "character ' ' at position 2 is not in the alphabet"),
    ("ABCD\n", "character '\\n' at position 4"),
    ("AB-_", "character '-' at position 2"),
    ("ABé=", "non-ASCII character 'é' at position 2"),
    ("AA== ", "character ' ' at position 4 is not in the alphabet"),
    ("AA==    ", "character ' ' at position 4 is not in the alphabet"),
    ("AA==AA==", "padding '=' at position 2 before the end"),
    ("AB==", "non-canonical text: character 'B' at position 1 carries bits past the end of the "
             "data (its low 4 bits must be 0)"),
    ("AAAAAAB=", "non-canonical text: character 'B' at position 6 carries bits past the end of "
                 "the data (its low 2 bits must be 0)"),
    ("", "truncated: header needs 16 bytes, has 0"),
    ("AAAA", "bad magic"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_TEXT)
def test_bad_text_names_the_position(backend: str, bad: str, message: str) -> None:
    with pytest.raises(WireFormatError) as e:
        from_base64(bad)
    assert message in str(e.value)
    if not bad.isascii():
        return
    with pytest.raises(WireFormatError) as e2:
        from_base64(bad.encode("ascii"))
    assert str(e2.value) == str(e.value)


def test_a_bad_character_deep_in_a_long_text() -> None:
    s = to_base64(list(range(10_000)), codec="raw")
    bad = s[:30_001] + "*" + s[30_002:]
    assert both(lambda: from_base64(bad)) == [
        ("WireFormatError", "invalid base64: character '*' at position 30001 is not in the "
                            "alphabet (A-Z a-z 0-9 + / =)")] * 2


def test_frame_problems_after_decoding(backend: str) -> None:
    frame = bytearray(tokenwire.encode(list(range(100)), codec="raw", checksum=True))
    frame[30] ^= 0x01
    with pytest.raises(ChecksumError):
        from_base64(base64.b64encode(bytes(frame)).decode())
    s = to_base64([5, 10, 151_935])
    assert from_base64(s, vocab_size=151_936) == [5, 10, 151_935]
    with pytest.raises(WireFormatError, match="index 2 is 151935, outside the vocabulary"):
        from_base64(s, vocab_size=151_935)
    truncated = base64.b64encode(tokenwire.encode(list(range(100)), codec="raw")[:-4]).decode()
    with pytest.raises(WireFormatError, match="truncated"):
        from_base64(truncated)


_CHARS = "AQgw09+/-_= \n\x00é"


@given(st.one_of(st.text(alphabet=_CHARS, max_size=24),
                 st.lists(st.text(alphabet=_CHARS, min_size=4, max_size=4), max_size=6).map("".join)))
def test_both_backends_accept_and_reject_the_same_text(s: str) -> None:
    for urlsafe in (False, True):
        a, b = both(lambda: from_base64(s, urlsafe=urlsafe))
        assert a == b
        assert a[0] in ("ok", "WireFormatError"), a


def test_binascii_fallback_when_pybase64_is_not_installed() -> None:
    code = (
        "import sys; sys.modules['pybase64'] = None\n"
        "import tokenwire, tokenwire.text as t\n"
        "assert t.base64_backend() == 'binascii' and not t._set_pybase64(True)\n"
        "assert t.base64_backend() == 'binascii'\n"
        "ids = list(range(0, 300000, 7))\n"
        "s = tokenwire.to_base64(ids)\n"
        "assert tokenwire.from_base64(s) == ids\n"
        "print(s[-40:])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT_S,
                       cwd=tempfile.gettempdir())        # not the checkout: the installed package
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == to_base64(list(range(0, 300000, 7)))[-40:]


# --------------------------------------------------------------------------------------------
# format="int32": the bare form relay servers send (base64 of little-endian int32 bytes)


def _relay_text(ids: object) -> str:
    """What such a server writes: base64.b64encode(np.asarray(ids, np.int32).tobytes())."""
    return base64.b64encode(np.asarray(ids, np.int32).tobytes()).decode()


@given(ids=token_lists, urlsafe=st.booleans())
def test_int32_text_is_the_relay_servers_text_from_both_backends(ids: list[int],
                                                                 urlsafe: bool) -> None:
    expected = _relay_text(ids)
    if urlsafe:
        expected = expected.replace("+", "-").replace("/", "_")
    for source in (ids, np.asarray(ids, np.int32), np.asarray(ids, np.int64),
                   tokenwire.TokenVector(ids)):
        assert both(lambda: to_base64(source, format="int32", urlsafe=urlsafe)) == [
            ("ok", expected)] * 2
    for kind, tv in both(lambda: from_base64(expected, format="int32", urlsafe=urlsafe)):
        assert kind == "ok" and type(tv) is tokenwire.TokenVector and tv == ids


def test_int32_reads_the_relay_servers_text(backend: str) -> None:
    ids = list(range(-3, 40_000, 3)) + [2**31 - 1, -(2**31)]
    s = _relay_text(ids)
    for text_form in (s, s.encode("ascii"), bytearray(s, "ascii"), memoryview(s.encode())):
        assert from_base64(text_form, format="int32") == ids
    assert from_base64(s, format="int32").tolist() == np.frombuffer(
        base64.b64decode(s), np.int32).tolist()
    assert from_base64("", format="int32") == []
    # The default stays the frame: the relay text is not one, and the frame is not relay text.
    with pytest.raises(WireFormatError, match="bad magic"):
        from_base64(s)
    assert to_base64(ids) != to_base64(ids, format="int32")
    assert tokenwire.decode(base64.b64decode(to_base64(ids))) == ids


@pytest.mark.parametrize("nbytes", [1, 2, 3, 5, 7, 401])
def test_int32_byte_count_not_a_multiple_of_4(nbytes: int) -> None:
    s = base64.b64encode(bytes(i % 256 for i in range(nbytes))).decode()
    assert both(lambda: from_base64(s, format="int32")) == [
        ("WireFormatError", f"int32 token data must be a multiple of 4 bytes, got {nbytes} bytes")
    ] * 2


def test_int32_vocab_size_and_bad_text(backend: str) -> None:
    s = _relay_text([5, 10, 151_935])
    assert from_base64(s, format="int32", vocab_size=151_936) == [5, 10, 151_935]
    with pytest.raises(WireFormatError, match="index 2 is 151935, outside the vocabulary"):
        from_base64(s, format="int32", vocab_size=151_935)
    with pytest.raises(WireFormatError, match="index 0 is -1, outside the vocabulary"):
        from_base64(_relay_text([-1]), format="int32", vocab_size=10)
    with pytest.raises(ValueError, match="vocab_size must be positive"):
        from_base64(s, format="int32", vocab_size=0)
    for bad, message in BAD_TEXT[:7]:
        with pytest.raises(WireFormatError) as e:
            from_base64(bad, format="int32")
        assert message in str(e.value)


def test_int32_argument_errors(backend: str) -> None:
    with pytest.raises(OverflowError, match="index 1 is 2147483648"):
        to_base64([1, 2**31], format="int32")
    with pytest.raises(TypeError):
        to_base64(np.array([1.5]), format="int32")
    with pytest.raises(ValueError, match="codec and checksum apply to frames"):
        to_base64([1], format="int32", codec="packed")
    with pytest.raises(ValueError, match="codec and checksum apply to frames"):
        to_base64([1], format="int32", checksum=True)
    for call in (lambda: to_base64([1], format="int64"),  # type: ignore[arg-type]
                 lambda: from_base64("AQAAAA==", format="int64")):  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="format must be 'frame' or 'int32', got 'int64'"):
            call()


@pytest.mark.parametrize("codec", ["auto", "raw", "u16", "packed"])
def test_an_int32_reader_with_a_vocabulary_refuses_frame_text(codec: str) -> None:
    """A writer left at the default format: the reader's vocab_size catches it (docs/adopting.md,
    TensorRT-LLM rollout): the byte count, or the magic read as an id."""
    s = to_base64(list(range(101)), codec=codec)  # type: ignore[arg-type]
    with pytest.raises(WireFormatError, match="multiple of 4 bytes|index 0 is 1380538196"):
        from_base64(s, format="int32", vocab_size=1 << 24)


def test_non_canonical_text_is_refused_one_frame_one_text(backend: str) -> None:
    """Every frame has exactly one text: the bits of the last character that lie past the end
    of the data must be zero, or several texts would decode to one frame."""
    alphabet = text._STANDARD_ALPHABET.decode()
    for ids in ([1, 2, 3], [1, 2, 3, 4]):                 # frames of 28 and 32 bytes
        s = to_base64(ids, codec="raw")
        pads = len(s) - len(s.rstrip("="))
        assert pads == (2 if len(ids) == 3 else 1) and from_base64(s) == ids
        at = len(s) - pads - 1
        for bit in range(2 * pads):                       # each unused low bit of s[at]
            other = s[:at] + alphabet[alphabet.index(s[at]) ^ (1 << bit)] + "=" * pads
            assert base64.b64decode(other) == base64.b64decode(s)   # a lenient decoder agrees
            for form in (other, other.encode(), bytearray(other.encode()),
                         memoryview(other.encode())):
                with pytest.raises(WireFormatError, match=f"non-canonical text: character "
                                                          f"'{other[at]}' at position {at} "):
                    from_base64(form)
    urlsafe = to_base64([1, 2, 3, 4], codec="raw", urlsafe=True)
    with pytest.raises(WireFormatError, match="non-canonical"):
        from_base64(urlsafe[:-3] + "_==", urlsafe=True)    # 63: low 4 bits set


def _python_lines_run(fn) -> int:  # type: ignore[no-untyped-def]
    """How many lines of tokenwire/text.py run during fn() (sys.settrace line events)."""
    import sys
    count = 0

    def tracer(frame, event, arg):  # type: ignore[no-untyped-def]
        nonlocal count
        if frame.f_code.co_filename != text.__file__:
            return None
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    except WireFormatError:
        pass
    finally:
        sys.settrace(None)
    return count


@pytest.mark.parametrize("where", ["non-ASCII", "bad character", "trailing space", "padding"])
def test_refusing_a_long_text_runs_no_python_loop_per_character(backend: str, where: str) -> None:
    """Finding what is wrong is a few passes of C code: the Python lines run do not grow with
    the text (a loop per character made 16 MiB of bad text 40x slower than good text)."""
    def bad(n: int) -> str:
        s = to_base64(list(range(n)), codec="raw")
        return {"non-ASCII": s[:-5] + "é" + s[-4:], "bad character": s[:-5] + "*" + s[-4:],
                "trailing space": s + "    ", "padding": s[:8] + "==" + s[10:]}[where]
    small, large = (_python_lines_run(lambda n=n: from_base64(bad(n)))
                    for n in (1_000, 100_000))
    assert 0 < large == small < 100
