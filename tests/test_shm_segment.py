"""tokenwire.shm's segment and what reaches it: the segment is a sealed memfd only its owner can
open, the atomics on its shared words (_ShmWords) act on aligned words inside it only, and a
channel's geometry and numeric arguments (slots, slot_bytes, threshold, max_segments, spin_us,
timeout_ms) are checked before they are used.

In-process tests over real zmq sockets and a real segment.
"""

from __future__ import annotations

import os
import stat

import pytest
from support import shm_helpers
from support.shm_helpers import attach, ids, shm

# The fixtures the tests take by name (pytest finds them as attributes of this module).
pair = shm_helpers.pair
channel = shm_helpers.channel


# -- the segment: a sealed memfd only its owner opens, and its shared words ------------------------

def test_segment_is_a_sealed_owner_only_memfd(channel):
    sender, _ = channel
    st = os.fstat(sender._fd)
    assert stat.S_IMODE(st.st_mode) == 0o600
    import fcntl
    seals = fcntl.fcntl(sender._fd, fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW and seals & fcntl.F_SEAL_SEAL
    assert os.readlink(f"/proc/self/fd/{sender._fd}").startswith("/memfd:tokenwire-")
    with pytest.raises(OSError):
        os.ftruncate(sender._fd, 4096)           # nobody can shrink it under a reader


def test_shared_words_refuse_unaligned_buffers_and_indices_outside():
    """The atomics act on aligned 8-byte words inside the buffer only."""
    from tokenwire._core import _ShmWords
    buf = bytearray(80)
    base = memoryview(buf)
    words = None
    for k in range(8):
        try:
            words = _ShmWords(base[k:k + 64], 8)
            break
        except ValueError as e:
            assert "8-byte boundary" in str(e)
    assert words is not None                   # one of eight offsets is aligned
    with pytest.raises(ValueError, match="8-byte boundary"):
        _ShmWords(base[k + 1:k + 65], 8)
    with pytest.raises(ValueError, match="do not fit"):
        _ShmWords(base[k:k + 64], 9)
    with pytest.raises(ValueError, match="do not fit"):
        _ShmWords(base[k:k + 64], 2**61)
    with pytest.raises(IndexError):
        words.load(8)
    with pytest.raises(IndexError):
        words.store(-1, 0)
    assert words.cas(7, 0, 5) and not words.cas(7, 0, 6) and words.load(7) == 5
    assert words.wait(7, 5, 0) and not words.wait(7, 6, 1000)
    with pytest.raises(BufferError):
        _ShmWords(bytes(64), 8)                # read-only: no atomics on it
    words.release()
    with pytest.raises(ValueError, match="released"):
        words.load(0)


# -- geometry and numeric arguments are checked before they are used -------------------------------

def test_sender_refuses_a_bad_geometry():
    with pytest.raises(ValueError, match="slots"):
        shm.Sender(slots=0)
    with pytest.raises(ValueError, match="slot_bytes"):
        shm.Sender(slot_bytes=2**40)


@pytest.mark.parametrize("spin_us", [float("inf"), 1e16, 9.3e15, 60_000_001, float("nan"), -1])
def test_a_spin_outside_a_minute_is_refused(zmq_ctx, pair, channel, spin_us):
    """spin_us is checked as a number before it is converted to nanoseconds (a double beyond
    int64 converted to it is undefined behaviour), in the channel and in its kernel."""
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    pull.setsockopt(zmq_ctx[0].RCVTIMEO, 2000)          # a spin taken as 0 blocks: not forever
    with pytest.raises(ValueError, match="spin_us must be in"):
        receiver._recv(pull, spin_us=spin_us)
    with pytest.raises(ValueError, match="spin_us must be in"):
        receiver._poll(pull, spin_us=spin_us, timeout_ms=0)
    with pytest.raises(ValueError, match="timeout_us must be in"):
        receiver._segments[sender._id].words.wait(0, 1, spin_us)
    sender._send(push, {"ids": ids(start=3)})
    assert receiver._recv(pull, spin_us=shm._MAX_SPIN_US)["ids"] == ids(start=3)


@pytest.mark.parametrize("make, error, match", [
    (lambda: shm.Sender(slots=2.5), TypeError, "slots must be an int"),
    (lambda: shm.Sender(slots=0), ValueError, r"slots must be in \[1, 65536\], got 0"),
    (lambda: shm.Sender(slot_bytes=1 << 31), ValueError, "slot_bytes must be in"),
    (lambda: shm.Sender(threshold=-1), ValueError, "threshold must be in"),
    (lambda: shm.Sender(threshold="1"), TypeError, "threshold must be an int, got str"),
    (lambda: shm.Receiver(max_segments=0), ValueError, "max_segments must be in"),
    (lambda: shm.Receiver(max_segments=True), TypeError, "max_segments must be an int"),
    (lambda: shm.Receiver(spin_us=float("nan")), ValueError, "spin_us must be in"),
    (lambda: shm.Receiver(spin_us="1"), TypeError, "spin_us must be a number"),
])
def test_channel_arguments_are_checked(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_poll_timeout_and_spin_types_are_checked(pair, channel):
    _, receiver = channel
    _, pull = pair
    with pytest.raises(ValueError, match="timeout_ms must be in"):
        receiver._poll(pull, timeout_ms=-5)
    with pytest.raises(TypeError, match="spin_us must be a number"):
        receiver._recv(pull, spin_us="100")


def test_the_public_surface():
    """tokenwire.shm exports its two ends and `available`; each end's public members are its
    construction, `close`, the context manager and `stats`: everything else is reached through
    send_pyobj_oob / recv_pyobj_oob (or tokenwire.msgspec) with channel=."""
    assert shm.__all__ == ["Receiver", "Sender", "available"]
    for cls in (shm.Sender, shm.Receiver):
        assert [n for n in vars(cls) if not n.startswith("_")] == ["close"]
        assert "__enter__" in vars(cls) and "__exit__" in vars(cls)
        with cls() as end:
            assert [n for n in vars(end) if not n.startswith("_")] == ["stats"]
