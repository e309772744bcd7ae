"""Points of docs/wire-format.md that no fixture shows by itself: the encoder's error for ids it
cannot take (which error wins, and where `sequence K: ` goes; a sequence of 2**32 ids), and that
the pfor width-tie fixture really is a tie."""

from __future__ import annotations

import builtins
import json
import mmap
import pathlib
import re
import struct
import sys

import pytest

import tokenwire
from tokenwire.errors import TokenIdError, TokenIdOverflowError, TokenIdTypeError

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"

U16 = "codec 'u16' needs ids in [0, 65536); "


def _raises(cls: type[Exception], message: str, fn: object, *args: object,
            **kwargs: object) -> None:
    with pytest.raises(cls) as info:
        fn(*args, **kwargs)  # type: ignore[operator]
    assert type(info.value) is cls
    assert str(info.value) == message


def test_a_forced_codec_names_the_sequence_after_its_range() -> None:
    _raises(TokenIdError, U16 + "sequence 1: id at index 0 is 70000",
            tokenwire.encode_many, [[1], [70000]], codec="u16")
    _raises(TokenIdError, "codec 'packed' needs ids in [0, 2147483647]; sequence 2: id at index 1 "
            "is -5", tokenwire.encode_many, [[1], [], [3, -5, -6]], codec="packed")
    # the first failing sequence, and within it the first id
    _raises(TokenIdError, U16 + "sequence 0: id at index 2 is 65536",
            tokenwire.encode_many, [[1, 2, 65536, 70000], [70000]], codec="u16")
    _raises(TokenIdError, U16 + "id at index 1 is 70000",
            tokenwire.encode, [1, 70000, -1], codec="u16")


def test_a_conversion_error_starts_with_the_sequence() -> None:
    _raises(TokenIdTypeError, "sequence 1: token id at index 1 must be an int, got str",
            tokenwire.encode_many, [[1], [2, "x"]])
    _raises(TokenIdOverflowError, "sequence 2: token id at index 1 is 2147483648, outside int32 "
            "[-2147483648, 2147483647]", tokenwire.encode_many, [[], [0], [1, 2**31]])
    _raises(TokenIdTypeError, "token id at index 1 must be an int, got str",
            tokenwire.encode, [1, "x"])


@pytest.mark.parametrize("codec", ["u16", "packed"])
def test_a_conversion_error_anywhere_wins_over_a_range_error(codec: str) -> None:
    """Every sequence is converted before any id is checked against the codec: the range error
    of sequence 0 loses to the conversion error of sequence 1."""
    _raises(TokenIdTypeError, "sequence 1: token id at index 1 must be an int, got str",
            tokenwire.encode_many, [[1, 70000, -1], [2, "x"]], codec=codec)
    _raises(TokenIdOverflowError, "sequence 1: token id at index 0 is 2147483648, outside int32 "
            "[-2147483648, 2147483647]", tokenwire.encode_many, [[-1], [2**31]], codec=codec)
    _raises(TokenIdTypeError, "token id at index 2 must be an int, got str",
            tokenwire.encode, [-1, 70000, "x"], codec=codec)


def test_the_codec_argument_is_checked_before_the_ids() -> None:
    with pytest.raises(ValueError, match=r"^unknown codec 'bogus' \(expected "):
        tokenwire.encode_many([[1], [2, "x"]], codec="bogus")


@pytest.mark.skipif(sys.maxsize < 2**34, reason="a 16 GiB mapping needs a 64-bit address space")
def test_a_sequence_of_2_32_ids_is_refused_by_its_count(tmp_path: pathlib.Path) -> None:
    """encode_many's stage 3 ("Ids the encoder cannot take"): a sequence of 2**32 ids is refused
    from its length alone, before any id is read. The ids are a TokenVector viewing a read-only
    mapping of a sparse 16 GiB file: no page of it is ever touched, so the test needs no 16 GiB
    of memory or disk."""
    from tokenwire import TokenVector
    from tokenwire._core import ImmutableBuffer

    path = tmp_path / "ids"
    with path.open("wb") as f:
        f.truncate(4 * 2**32)
    with path.open("rb") as f:      # the mapping outlives the file object
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    huge = TokenVector.frombuffer(ImmutableBuffer(mapping))     # a view: nothing is read
    assert len(huge) == 2**32
    text = "sequence 1 has 4294967296 ids; a multi-sequence frame holds < 2**32 per sequence"
    for codec in ("auto", "raw", "u16", "packed", "pfor"):
        _raises(TokenIdOverflowError, text, tokenwire.encode_many, [[1, 2], huge],
                codec=codec)
    # stage 3 comes after every conversion (stage 2) and before a forced codec's range
    # (stage 4): a bad id anywhere wins, sequence 0's 70000 under u16 does not
    _raises(TokenIdTypeError, "sequence 2: token id at index 1 must be an int, got str",
            tokenwire.encode_many, [[1], huge, [2, "x"]])
    _raises(TokenIdOverflowError, text, tokenwire.encode_many, [[70000], huge],
            codec="u16")
    _raises(TokenIdOverflowError, text.replace("sequence 1", "sequence 0"),
            tokenwire.encode_many, [huge, huge])


def test_the_pfor_tie_fixture_is_a_tie_won_by_the_larger_width() -> None:
    """pfor_tie_widths: width 1 (what the encoder wrote) and width 0 (both ids exceptions) take
    the same 4 bytes and both decode to the ids; the encoder's rule takes the larger."""
    case = json.loads((FIXTURES / "manifest.json").read_text())["pfor_tie_widths"]
    frame = (FIXTURES / "pfor_tie_widths.bin").read_bytes()
    ids = case["sequences"][0]
    assert frame[24:] == bytes.fromhex("81408040")                    # b = 1, one exception
    narrower = frame[:16] + struct.pack("<Q", 4) + bytes.fromhex("80c00180")
    assert tokenwire.decode(narrower).tolist() == ids == tokenwire.decode(frame).tolist()
    assert len(narrower) == len(frame)
    assert tokenwire.encode(ids, codec="pfor") == frame


# ---------------------------------------------------------------------------------------------
# The encoder's input rules ("Ids the encoder cannot take"; "The `codec` argument"), each row of
# the spec's table exactly as written there.

class _Index:
    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


INT32 = ", outside int32 [-2147483648, 2147483647]"


def test_integer_scalars_and_index_objects_are_ids() -> None:
    np = pytest.importorskip("numpy")
    ids = [np.int64(5), np.uint8(7), np.int8(-3), _Index(9), 11]
    assert tokenwire.decode(tokenwire.encode(ids)).tolist() == [5, 7, -3, 9, 11]
    _raises(TokenIdOverflowError, "token id at index 0 is 2147483648" + INT32,
            tokenwire.encode, [np.uint32(2**31)])
    _raises(TokenIdOverflowError, "token id at index 1 is 1099511627776" + INT32,
            tokenwire.encode, [1, _Index(2**40)])


@pytest.mark.parametrize(("element", "name"), [
    (True, "bool"), (False, "bool"), ("1", "str"), (1.0, "float"), (None, "NoneType"),
    ([1], "list")])
def test_bool_and_other_non_integers_are_type_errors(element: object, name: str) -> None:
    _raises(TokenIdTypeError, f"token id at index 1 must be an int, got {name}",
            tokenwire.encode, [0, element])
    _raises(TokenIdTypeError, f"sequence 1: token id at index 1 must be an int, got {name}",
            tokenwire.encode_many, [[], [0, element]])


def test_numpy_bool_and_float_arrays() -> None:
    np = pytest.importorskip("numpy")
    _raises(TokenIdTypeError, "token id at index 0 must be an int, got bool",
            tokenwire.encode, [np.bool_(True)])
    _raises(TokenIdTypeError, "token id at index 0 must be an int, got float32",
            tokenwire.encode, [np.float32(1)])
    _raises(TokenIdTypeError, "token ids must be integers, got an array of dtype float64",
            tokenwire.encode, np.array([1.0, 2.0]))


def test_not_1d_is_a_token_id_error() -> None:
    np = pytest.importorskip("numpy")
    _raises(TokenIdError, "token ids must be 1-D, got shape (2, 3)",
            tokenwire.encode, np.zeros((2, 3), dtype=np.int32))
    _raises(TokenIdError, "token ids must be 1-D, got shape ()", tokenwire.encode, np.array(5))
    _raises(TokenIdError, "sequence 1: token ids must be 1-D, got shape (1, 1)",
            tokenwire.encode_many, [[1, 2], np.array([[1]])])


@pytest.mark.parametrize(("value", "text"), [
    (2**128 - 1, str(2**128 - 1)), (-(2**128) + 1, str(-(2**128) + 1)),
    (-(2**127) - 1, str(-(2**127) - 1)),
    (2**128, "an int of 129 bits"), (-(2**128), "a negative int of 129 bits"),
    (-(2**128) - 1, "a negative int of 129 bits"), (2**200, "an int of 201 bits")])
def test_an_int_of_b_bits_counts_magnitude_bits(value: int, text: str) -> None:
    _raises(TokenIdOverflowError, f"token id at index 0 is {text}" + INT32,
            tokenwire.encode, [value])


EXPECTED = "(expected 'auto', 'raw', 'u16', 'packed', 'pfor' or 'zstd')"


@pytest.mark.parametrize(("codec", "shown"), [
    ("RAW", "'RAW'"), (b"raw", "b'raw'"), (3, "3"), (None, "None"),
    ("x" * 100, "'xxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxx'")])
def test_an_unknown_codec_name(codec: object, shown: str) -> None:
    for fn, ids in ((tokenwire.encode, [1]), (tokenwire.encode_many, [[1]])):
        _raises(ValueError, f"unknown codec {shown} {EXPECTED}", fn, ids, codec=codec)


# ---------------------------------------------------------------------------------------------
# The zstd section's texts: rule 22's libzstd tail, and the class of the "not installed" error.

def test_rule_22_is_the_prefix_and_the_bare_libzstd_text() -> None:
    pytest.importorskip("zstandard")
    invalid = FIXTURES / "invalid"
    for name, text in (("zstd_corrupt_block", "Data corruption detected"),
                       ("zstd_content_checksum_wrong", "Restored data doesn't match checksum")):
        frame = (invalid / f"{name}.bin").read_bytes()
        _raises(tokenwire.WireFormatError,
                f"zstd payload is corrupt: zstd decompress error: {text}", tokenwire.decode, frame)


@pytest.mark.parametrize(("name", "text"), [
    ("zstd_falls_short_raw_block", "Data corruption detected"),
    ("zstd_falls_short_rle_block", "Data corruption detected"),
    ("zstd_overruns_by_one", "Data corruption detected"),
    ("zstd_overruns", "Destination buffer is too small"),
    ("zstd_literals_header_past_block", "Data corruption detected"),
    ("zstd_literals_compressed_header_past_block", "Data corruption detected"),
    ("zstd_sequences_header_past_block", "Src size is incorrect"),
    ("zstd_sequences_mode_byte_past_block", "Src size is incorrect")])
def test_libzstd_answers_first(name: str, text: str) -> None:
    """Output that falls short of P or overruns it (rule 23) is refused by libzstd's own size
    check first, and a block whose literals or sequences header the walk leaves unread (it is
    not in the block) by libzstd's block decoder: rule 22, with the texts the spec gives
    ("Output that overruns or falls short (23)", "The zstd walk (19)")."""
    pytest.importorskip("zstandard")
    frame = (FIXTURES / "invalid" / f"{name}.bin").read_bytes()
    for fn in (tokenwire.decode, tokenwire.decode_many):
        _raises(tokenwire.WireFormatError,
                f"zstd payload is corrupt: zstd decompress error: {text}", fn, frame)


def test_the_tests_the_spec_names_exist() -> None:
    """docs/wire-format.md names a test beside each rule no fixture can pin
    (`tests/test_….py::test_…`): each must exist."""
    import re

    root = FIXTURES.parent.parent
    named = re.findall(r"`(tests/test_\w+\.py)::(test_\w+)`",
                       (root / "docs" / "wire-format.md").read_text())
    assert len(named) >= 2, named
    for path, test in named:
        assert re.search(rf"^def {test}\(", (root / path).read_text(), re.M), (path, test)


_EXAMPLE_ROW = re.compile(r"^  \| `((?:encode|encode_many)\(.*\))` \| `(\w+)` \| `(.*)` \|$", re.M)


def test_the_spec_s_encoder_examples_are_what_the_code_raises() -> None:
    """docs/wire-format.md, "The encoder's texts, exactly as raised": every row's call raises
    exactly the row's class (by name: a subclass does not do) and text."""
    import tokenwire.errors

    text = (FIXTURES.parent.parent / "docs" / "wire-format.md").read_text()
    rows = _EXAMPLE_ROW.findall(text)
    assert len(rows) >= 20, rows
    namespace = {"encode": tokenwire.encode, "encode_many": tokenwire.encode_many}
    for call, cls_name, message in rows:
        cls = getattr(tokenwire.errors, cls_name, None) or getattr(builtins, cls_name)
        _raises(cls, message, eval, call, namespace)  # noqa: S307 - the spec's own examples


def test_without_zstandard_a_zstd_frame_is_a_wire_format_error() -> None:
    import subprocess
    import sys
    import tempfile

    code = ("import sys; sys.modules['zstandard'] = None\n"
            "import tokenwire, pathlib\n"
            f"frame = pathlib.Path({str(FIXTURES / 'zstd_over_u16.bin')!r}).read_bytes()\n"
            "tokenwire.frame_info(frame)\n"
            "try:\n"
            "    tokenwire.decode(frame)\n"
            "except tokenwire.WireFormatError as e:\n"
            "    print(type(e).__name__, isinstance(e, ValueError), e)\n")
    # From a directory of its own: the clone's root would import its uncompiled sources.
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=tempfile.gettempdir()).stdout
    assert out == ("WireFormatError True zstd-compressed frame, but the zstandard package is "
                   "not installed (pip install tokenwire[zstd])\n")


@pytest.mark.parametrize(("change", "text"), [
    ("+ b'\\x05'", "zstd payload decompresses to more than 8 bytes, the header needs 8"),
    ("[:7]", "zstd payload decompresses to 7 bytes, the header needs 8")])
def test_check_23_texts_with_a_libzstd_that_misses_the_size(change: str, text: str) -> None:
    """Check 23 ("Output that overruns or falls short (23)"): libzstd refuses every such frame
    by 22 first, so its two texts are shown with a stand-in zstandard module whose reader gives
    one byte more, or one less, than the valid section of zstd_window_exponent_21 holds."""
    import subprocess
    import tempfile

    code = ("import sys, zstandard, types\n"
            "real = zstandard.ZstdDecompressor\n"
            "class Reader:\n"
            "    def __init__(self, comp):\n"
            f"        self.out = real().decompress(comp){change}\n"
            "    def read(self, n):\n"
            "        out, self.out = self.out[:n], self.out[n:]\n"
            "        return out\n"
            "class Decompressor:\n"
            "    def stream_reader(self, comp, read_across_frames=False):\n"
            "        return Reader(comp)\n"
            "fake = types.ModuleType('zstandard')\n"
            "fake.ZstdError = zstandard.ZstdError\n"
            "fake.frame_content_size = zstandard.frame_content_size\n"
            "fake.ZstdDecompressor = Decompressor\n"
            "sys.modules['zstandard'] = fake\n"
            "import tokenwire, pathlib\n"
            f"path = {str(FIXTURES / 'zstd_window_exponent_21.bin')!r}\n"
            "frame = pathlib.Path(path).read_bytes()\n"
            "for fn in (tokenwire.decode, tokenwire.decode_many):\n"
            "    try:\n"
            "        fn(frame)\n"
            "    except tokenwire.WireFormatError as e:\n"
            "        print(type(e).__name__, e)\n")
    pytest.importorskip("zstandard")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=tempfile.gettempdir()).stdout
    assert out == f"WireFormatError {text}\n" * 2
