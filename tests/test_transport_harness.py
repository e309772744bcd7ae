"""Every way to send token ids through one harness (tests/support/transports.py): the same
round-trip, memory, hostile-bytes and killed-peer checks on each adapter, over real sockets, the
killed peer a real process.

A check an adapter does not promise is not run for it: `Adapter.damages` lists the damages it
guarantees to catch (an unsigned pickle message cannot catch a changed id; a signature can).
"""

from __future__ import annotations

import signal
import tracemalloc

import numpy as np
import pytest
from support import transports
from support.transports import ADAPTERS, DAMAGES, SIZES, Adapter, ends_of, make_ids
from support.wait import WAIT_S

pytestmark = pytest.mark.integration

# Generous: a receive that waits for a message that is on its way (a loaded machine).
ARRIVES = WAIT_S
# How long a receive waits for a message that must not arrive.
NOTHING = 3.0


def adapter_for(name: str, monkeypatch: pytest.MonkeyPatch) -> Adapter:
    adapter = ADAPTERS[name]
    for module in adapter.requires:
        pytest.importorskip(module)
    if "tokenwire.shm" in adapter.requires:
        from tokenwire import shm
        if not shm.available():
            pytest.skip("shared-memory segments need Linux memfd_create")
    for k, v in adapter.env.items():
        monkeypatch.setenv(k, v)
    return adapter


@pytest.fixture(params=list(ADAPTERS))
def adapter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Adapter:
    return adapter_for(request.param, monkeypatch)


def test_sizes_straddle_the_out_of_band_threshold() -> None:
    below, at = SIZES[2:4]
    assert len(transports.dumps_oob(make_ids(below))) == 1          # in-band
    assert len(transports.dumps_oob(make_ids(at))) == 2             # a frame of its own


def test_round_trip(adapter: Adapter, tmp_path) -> None:
    with ends_of(adapter, str(tmp_path)) as (sender, receiver):
        for seq, n in enumerate(SIZES * 2):          # each size twice: the ends are reused
            sender.send(seq, make_ids(n, seq))
            got_seq, ids = receiver.recv(ARRIVES)
            assert got_seq == seq
            assert type(ids) is transports.TokenVector
            assert len(ids) == n and ids == make_ids(n, seq), f"{n} ids differ"


def test_memory(adapter: Adapter, tmp_path) -> None:
    """A received vector of out-of-band size views the received frame ("view": receiving it
    allocates far less than its ids take, as tracemalloc sees tokenwire's and Python's
    allocations but not libzmq's frames) or holds a copy of its own ("copy": one allocation of
    its ids at least); either way what the sender does next (as many more messages as the shm
    channel has slots, each through a slot the first may have used) never changes it. Where
    the adapter decodes frames its caller holds, the vector is in the very frame's memory."""
    n = SIZES[-1]
    with ends_of(adapter, str(tmp_path)) as (sender, receiver):
        for seq in range(adapter.warm_up):
            sender.send(seq, make_ids(10, seq))
            receiver.recv(ARRIVES)
        sender.send(100, make_ids(n, 100))
        tracemalloc.start()
        try:
            _, first = receiver.recv(ARRIVES)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert first == make_ids(n, 100)
        if adapter.memory == "view":
            assert peak < first.nbytes // 4, f"receiving {first.nbytes} bytes of ids " \
                                              f"allocated {peak}: they were copied"
        else:
            assert adapter.memory == "copy"
            assert peak >= first.nbytes, f"{peak} bytes allocated: no copy of the ids was made"
        for seq in range(101, 110):
            sender.send(seq, make_ids(n, seq))
            assert receiver.recv(ARRIVES)[1] == make_ids(n, seq)
        assert first == make_ids(n, 100), "the first message's ids changed after it arrived"
        decode = adapter.decode(receiver)
        if decode is not None and adapter.memory == "view":
            sender.send(200, make_ids(n, 200))
            frames = receiver.recv_raw(ARRIVES)
            _, ids = decode(frames)
            assert ids == make_ids(n, 200)
            assert np.shares_memory(np.asarray(ids), np.frombuffer(frames[-1], np.uint8))


HOSTILE = sorted({(a.name, d) for a in ADAPTERS.values() for d in a.damages})


@pytest.mark.parametrize(("name", "damage"), HOSTILE)
def test_hostile_bytes(name: str, damage: str, tmp_path, monkeypatch) -> None:
    """A message of `SIZES[-1]` ids captured on the wire, damaged, and put back: the receiver
    raises the adapter's documented error for that damage (so returns nothing), runs no code
    the message names, and takes the next good message as ever."""
    adapter = adapter_for(name, monkeypatch)
    n = SIZES[-1]
    transports.EXECUTED.clear()
    with ends_of(adapter, str(tmp_path)) as (sender, receiver):
        for seq in range(adapter.warm_up):
            sender.send(seq, make_ids(10, seq))
            receiver.recv(ARRIVES)
        sender.send(1, make_ids(n, 1))
        frames = receiver.recv_raw(ARRIVES)
        bad = DAMAGES[damage](frames)
        assert bad != frames
        sender.send_raw(bad)
        errors = adapter.damages[damage]
        with pytest.raises(errors) as raised:
            got = receiver.recv(ARRIVES)
            raise AssertionError(f"the damaged message was received: {got!r:.200}")
        assert str(raised.value), "the error says nothing"
        assert transports.EXECUTED == [], "the message's code ran"
        sender.send(2, make_ids(n, 2))
        assert receiver.recv(ARRIVES) == (2, make_ids(n, 2))


@pytest.mark.slow
def test_killed_peer(adapter: Adapter, tmp_path) -> None:
    """A real sending process killed with SIGKILL while its message of `SIZES[-1]` ids is one
    byte short of arriving (a relay holds that byte): the receiver raises the adapter's error
    or times out, within the deadline; the process is reaped; and the next message, from a
    live sender, arrives whole."""
    target = adapter.endpoint(str(tmp_path))
    receiver = adapter.receiver(target)
    relay = transports.Relay(adapter, str(tmp_path), target, hold=adapter.warm_up)
    proc = transports.spawn_sender(adapter, relay.endpoint)
    try:
        transports.read_line(proc, "ready")
        for seq in range(adapter.warm_up):
            transports.command(proc, f"send {seq} 10")
            transports.read_line(proc, f"sent {seq}")
            assert receiver.recv(ARRIVES) == (seq, make_ids(10, seq))
        seq = adapter.warm_up
        transports.command(proc, f"send {seq} {SIZES[-1]}")
        assert relay.holding.wait(WAIT_S), "the message never reached the relay"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=WAIT_S) == -signal.SIGKILL
        relay.check()
        with pytest.raises(adapter.killed):
            got = receiver.recv(NOTHING)
            raise AssertionError(f"a message of the killed sender was received: {got!r:.200}")
        sender = adapter.sender(target)
        try:
            sender.send(7, make_ids(SIZES[-1], 7))
            assert receiver.recv(ARRIVES) == (7, make_ids(SIZES[-1], 7))
        finally:
            sender.close()
    finally:
        transports.end(proc)                  # the relay's sender connection ends with it
        relay.close()
        receiver.close()

