"""The planted bugs of the mutation check (tests/mutants/run.py): each a small, realistic edit of
one file -- an exact snippet that must occur there exactly once, and its replacement -- with
the tests that must fail while it is in place. A mutant that survives means a bug of that shape
would ship unnoticed: add the test that kills it. A snippet that no longer matches after a
change to its file: update the entry (or drop it if the code it guarded is gone)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


FIXTURES = "tests/test_wire_fixtures.py::test_negative_fixture_fails_with_its_exact_message"
GOLDEN = "tests/test_wire_fixtures.py::test_golden_frame_decodes"
BITPACK = "tokenwire/include/tokenwire/bitpack.h"
FRAME = "tokenwire/include/tokenwire/frame.h"
PFOR = "tokenwire/include/tokenwire/pfor.h"
SEGMENT = "tokenwire/shm.py"
RECEIVER = "tokenwire/shm.py"
OOB = "tokenwire/_oob.py"
CRC32C = "tokenwire/include/tokenwire/crc32c.h"
HARNESS = "tests/test_transport_harness.py"

# _Segment.take: the copy out of the slot, then the checks and the free (its compare-and-swap).
_COPY = """\
        try:
            # The copy first, into storage nobody else can write; the checks after it.
            data: Any = TokenVector.frombuffer(view) if n % 4 == 0 and not raw else bytes(view)
        finally:
            view.release()
"""
_CHECK = """\
        length, written_for = words.load(state + 1), words.load(state + 2)
        if length != n or written_for != seq:
            # Not freed: the slot may hold another message's bytes (a forged descriptor that
            # guessed nothing but read a live generation); it is taken back by sequence.
            raise WireFormatError(
                f"shared-memory slot {i} holds {length} bytes of message {written_for}, not the "
                f"descriptor's {n} bytes of message {seq}")
        # One compare-and-swap checks that nothing rewrote the slot during the copy and frees
        # it: generations never repeat, so an unchanged word means unchanged bytes, and a slot
        # the sender took back and rewrote meanwhile keeps its new message.
        if not self._release(state, expect):
            raise WireFormatError(f"shared-memory slot {i} was rewritten while it was read")
"""

MUTANTS: list[Mutant] = [
    # -- C kernels: bitpack, crc32c, pfor -------------------------------------------------------
    Mutant("u16 ids read big-endian at an odd address", BITPACK,
           "for (size_t i = 0; i < n; i++) { uint16_t v; memcpy(&v, src + 2 * i, 2); dst[i] = v; }",
           "for (size_t i = 0; i < n; i++) dst[i] = (int32_t)src[2 * i] << 8 | src[2 * i + 1];",
           ("tests/test_codecs.py::test_frames_decode_at_any_address",)),
    Mutant("u16 ids stored with their top bit cleared", BITPACK,
           "for (size_t i = 0; i < n; i++) d[i] = (uint16_t)twbp_id(src, i);",
           "for (size_t i = 0; i < n; i++) d[i] = (uint16_t)(twbp_id(src, i) & 0x7fff);",
           ("tests/test_codecs.py::test_ids_just_outside_the_range_are_refused",
            "tests/test_codecs.py::test_round_trip")),
    Mutant("encoder's scan misses the sign of the last ids", BITPACK,
           "        acc |= v;\n        dst[i] = (int32_t)v;",
           "        acc |= v & 0x7fffffffu;\n        dst[i] = (int32_t)v;",
           ("tests/test_codecs.py::test_ids_just_outside_the_range_are_refused",
            "tests/test_codecs.py::test_round_trip")),
    Mutant("packer drops its last partial byte", BITPACK,
           "    if (pk->bits) {\n        *pk->out++ = (uint8_t)pk->acc;",
           "    if (pk->bits >= 8) {\n        *pk->out++ = (uint8_t)pk->acc;",
           (GOLDEN, "tests/test_codecs.py::test_round_trip")),
    Mutant("crc32c (hardware path) skips the last byte of a tail", CRC32C,
           "    while (n--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);",
           "    while (n-- > 1) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);",
           (GOLDEN,)),
    Mutant("crc32c (software path) swaps two slicing tables", CRC32C,
           "twcrc_table[3][hi & 0xFF] ^ twcrc_table[2][(hi >> 8) & 0xFF]",
           "twcrc_table[2][hi & 0xFF] ^ twcrc_table[3][(hi >> 8) & 0xFF]",
           ("tests/test_crc32c_kernel.py",)),
    Mutant("pfor accepts a block width of 33", PFOR,
           'if (b > 32) TWPF_FAIL(TWPF_E_WIDTH, "block width above 32", at);',
           'if (b > 33) TWPF_FAIL(TWPF_E_WIDTH, "block width above 32", at);',
           (FIXTURES,)),
    Mutant("pfor accepts exceptions at width 32", PFOR,
           "if (exc && b == 32) TWPF_FAIL(",
           "if (exc && b > 32) TWPF_FAIL(",
           (FIXTURES,)),
    Mutant("pfor accepts an exception flag with an empty bitmap", PFOR,
           'if (e == 0) TWPF_FAIL(TWPF_E_EXCEPTIONS, "exception flag with an empty bitmap", at);',
           "(void)0;",
           (FIXTURES,)),
    Mutant("pfor accepts bytes after the last block", PFOR,
           "if (p != len) TWPF_FAIL(TWPF_E_TRAILING,",
           "if (p > len) TWPF_FAIL(TWPF_E_TRAILING,",
           (FIXTURES,)),
    Mutant("pfor accepts a block wider than its largest id", PFOR,
           "if (b && !(orv >> (b - 1)))",
           "if (b > 1 && !(orv >> b))",
           (FIXTURES,)),

    # -- frame checks (frame.h) ------------------------------------------------------------------
    Mutant("one trailing byte accepted", FRAME,
           "    if (n > L->nbytes) {",
           "    if (n > L->nbytes + 1) {",
           (FIXTURES,)),
    Mutant("the count table's last padding byte not checked", FRAME,
           "k < TW_HEADER_SIZE + table_len; k++)",
           "k < TW_HEADER_SIZE + table_len - 1; k++)",
           ("tests/test_wire.py::test_malformed_frame_messages",)),
    Mutant("packed padding bits checked one bit short", FRAME,
           "if (tail_bits && (payload[L->payload_len - 1] >> tail_bits))",
           "if (tail_bits && (payload[L->payload_len - 1] >> (tail_bits + 1)))",
           (FIXTURES,)),
    Mutant("wire version 0 accepted", FRAME,
           "    if (version != TW_WIRE_VERSION) {",
           "    if (version > TW_WIRE_VERSION) {",
           (FIXTURES,)),
    Mutant("pfor payload length not bounded above", FRAME,
           "        if (plen < lo || plen > hi) {",
           "        if (plen < lo) {",
           (FIXTURES,)),
    Mutant("checksum compared on its low 16 bits", FRAME,
           "        if (stored != actual) {",
           "        if ((uint16_t)stored != (uint16_t)actual) {",
           ("tests/test_codecs.py::test_bit_flips_are_refused_when_checksummed",)),
    Mutant("zstd expansion bound doubled", FRAME,
           "if (L->payload_len > clen * TW_ZSTD_MAX_EXPANSION) {",
           "if (L->payload_len > 2 * clen * TW_ZSTD_MAX_EXPANSION) {",
           ("tests/test_wire.py::TestZstd::test_expansion_bound_at_its_boundary",)),

    # -- conversions (_convert.pxi) --------------------------------------------------------------
    Mutant("uint ids up to 2**31 accepted", "tokenwire/_convert.pxi",
           "        return v <= <src_int>INT32_MAX",
           "        return v <= <src_int>INT32_MAX + 1",
           ("tests/test_as_tokens.py",)),
    Mutant("int64 ids checked by their high word alone", "tokenwire/_convert.pxi",
           "return <int32_t>(<uint64_t>v >> 32) == (<int32_t>v >> 31)",
           "return (<uint64_t>v >> 32) == 0 or (<uint64_t>v >> 32) == 0xffffffffu",
           ("tests/test_as_tokens.py",)),
    Mutant("vocabulary check compares signed", "tokenwire/_convert.pxi",
           "        ok &= <uint32_t>_id_at(p, i) < vocab",
           "        ok &= _id_at(p, i) < <int64_t>vocab",
           (FIXTURES, "tests/test_as_tokens.py")),
    Mutant("vocab_size 0 taken", "tokenwire/_convert.pxi",
           "    if v <= 0:\n        raise ValueError(f\"vocab_size must be positive",
           "    if v < 0:\n        raise ValueError(f\"vocab_size must be positive",
           ("tests/test_as_tokens.py", "tests/test_wire.py", "tests/test_valid_edge_inputs.py")),

    # -- frames (_wire.pxi) ----------------------------------------------------------------------
    Mutant("decode_many reads every sequence from the start", "tokenwire/_wire.pxi",
           "            start += n\n",
           "            start += 0\n",
           ("tests/test_codecs.py::test_round_trip_many",)),
    Mutant("decode takes a multi-sequence frame of no sequences", "tokenwire/_wire.pxi",
           "        if L.flags & FLAG_MULTI:\n            raise WireFormatError(",
           "        if L.flags & FLAG_MULTI and L.nseq > 1:\n            raise WireFormatError(",
           (FIXTURES,)),
    Mutant("decode_many skips the vocabulary of pfor frames", "tokenwire/_wire.pxi",
           "            if limit:\n                for k in range(len(out)):",
           "            if False:\n                for k in range(len(out)):",
           (FIXTURES,)),
    Mutant("u16 payloads viewed as int32", "tokenwire/_wire.pxi",
           "    return L.codec == CODEC_RAW and _can_view_ids(source, payload)",
           "    return L.codec <= 1 and _can_view_ids(source, payload)",
           ("tests/test_codecs.py::test_frames_decode_at_any_address",
            "tests/test_codecs.py::test_round_trip")),

    # -- the pickle scan (_picklescan.pxi) and the restore bound -------------------------------
    Mutant("LONG_BINPUT index equal to the pickle's length accepted", "tokenwire/_picklescan.pxi",
           "if kind == _PUT4 and length >= <uint64_t>n:",
           "if kind == _PUT4 and length > <uint64_t>n:",
           ("tests/test_check_pickle.py",)),
    Mutant("text PUT index equal to the pickle's length accepted", "tokenwire/_picklescan.pxi",
           "    if index >= n:\n",
           "    if index > n:\n",
           ("tests/test_check_pickle.py",)),
    Mutant("a counted argument may claim its own count's bytes", "tokenwire/_picklescan.pxi",
           "            if length > <uint64_t>(n - pos - k):",
           "            if length > <uint64_t>(n - pos):",
           ("tests/test_check_pickle.py",)),
    Mutant("restore repeat bound raised to 6,400", "tokenwire/_restore.pxi",
           "cdef Py_ssize_t _MAX_REPEATS = 64\n",
           "cdef Py_ssize_t _MAX_REPEATS = 6400\n",
           ("tests/test_restore.py",)),

    # -- the request layer (tokenwire/state.py, tokenwire/request.py) ----------------------------
    Mutant("a state version from the future accepted", "tokenwire/state.py",
           "not 1 <= version <= _STATE_VERSION):",
           "not 1 <= version <= _STATE_VERSION + 1):",
           ("tests/test_state.py",)),
    Mutant("a state tuple of three items unpacked", "tokenwire/state.py",
           "        if len(state) != 2:\n",
           "        if len(state) < 2:\n",
           ("tests/test_state.py",)),
    Mutant("slot state taken as a list too", "tokenwire/state.py",
           "    if slots is not None and type(slots) is not dict:\n",
           "    if slots is not None and type(slots) not in (dict, list):\n",
           ("tests/test_state.py",)),
    Mutant("prompt_len counts one more", "tokenwire/request.py",
           "        return _PROMPT_FIELD.length(self)",
           "        return _PROMPT_FIELD.length(self) + 1",
           ("tests/test_request.py",)),

    # -- the shared-memory channel -----------------------------------------------------------------
    Mutant("the descriptor's sequence not compared with the slot's", SEGMENT,
           "        if length != n or written_for != seq:",
           "        if length != n:",
           ("tests/test_shm_descriptor.py::test_any_entry_value_reads_the_slot_or_is_refused",)),
    Mutant("the slot is freed before it is copied", SEGMENT, _COPY + _CHECK, _CHECK + _COPY,
           ("tests/test_shm_receiver.py::test_the_slot_is_copied_before_it_is_freed",)),
    Mutant("a slot index one past the ring accepted", SEGMENT,
           "        if i >= self.slots:\n            raise WireFormatError(",
           "        if i > self.slots:\n            raise WireFormatError(",
           ("tests/test_shm_descriptor.py::test_tampered_descriptor_is_refused",)),
    Mutant("a length past the slot accepted", SEGMENT,
           "        if n > self.slot_bytes:\n",
           "        if n > self.slot_bytes + 4:\n",
           ("tests/test_shm_descriptor.py::test_tampered_descriptor_is_refused",)),
    Mutant("a freed slot read again (generation compared without its state)", SEGMENT,
           "        if word != expect:\n",
           "        if word >> 2 != gen:\n",
           ("tests/test_shm_descriptor.py::test_tampered_descriptor_is_refused",)),
    Mutant("a record proven by its sequence alone", SEGMENT,
           "        return bool(words.load(rec) == seq and got == token)",
           "        return bool(words.load(rec) == seq)",
           ("tests/test_shm_hostile.py::test_a_real_sequence_with_a_forged_token_frees_no_slot",)),
    Mutant("slots taken with sign_buffers", RECEIVER,
           "            if not slots:\n",
           "            if False:\n",
           ("tests/test_shm_descriptor.py::test_sign_buffers_refuses_a_descriptor_naming_slots",)),

    # -- the signed transport (_oob.py) ------------------------------------------------------------
    Mutant("the signature leaves out the frame lengths", OOB,
           "                     + fmt.pack(n - 1, *lens))",
           "                     )",
           ("tests/test_transport_auth.py",)),
    Mutant("sign_buffers signs no buffer", OOB,
           "    if sign_buffers:\n        for b in buffers:\n            inner.update(b)",
           "    if False:\n        for b in buffers:\n            inner.update(b)",
           ("tests/test_transport_auth.py",)),
    Mutant("the signature leaves out the pickle's last byte", OOB,
           "    inner.update(head)\n",
           "    inner.update(memoryview(head)[:-1])\n",
           ("tests/test_transport_auth.py",)),
    Mutant("a key of few distinct bytes taken", OOB,
           "    if distinct < _MIN_DISTINCT_KEY_BYTES:",
           "    if distinct < 2:",
           ("tests/test_transport_auth.py",)),
    Mutant("any frame starting with the marker is a signature", OOB,
           "    return frame.nbytes == SIGNATURE_BYTES and frame[:4] == _SIG_MAGIC",
           "    return frame.nbytes >= 4 and frame[:4] == _SIG_MAGIC",
           ("tests/test_transport_auth.py"
            "::test_a_signature_frame_of_another_size_is_no_signature",)),

    # -- every way to send, through one harness ----------------------------------------------------
    Mutant("a signature checked for its shape only", OOB,
           "    if not hmac.compare_digest(sig, expected):",
           "    if False:",
           (HARNESS + "::test_hostile_bytes",)),
    Mutant("recv_pyobj_oob copies a frame it could view", "tokenwire/transport.py",
           "    return ImmutableBuffer(frame) if type(fd) is int and fd >= 0 else frame",
           "    return frame",
           (HARNESS + "::test_memory",)),
    Mutant("a msgspec buffer shorter than its reference taken", "tokenwire/msgspec.py",
           "        if nbytes != 4 * count:",
           "        if nbytes < 4 * count - 4:",
           (HARNESS + "::test_hostile_bytes",)),
]
