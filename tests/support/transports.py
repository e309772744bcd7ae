"""One harness for every way tokenwire sends token ids between processes (the checks run by
tests/test_transport_harness.py): an adapter per way to send, each a sending and a receiving end
over a real socket, and the four checks every adapter passes.

  round trip    the ids that arrive equal the ids sent, at every size of `SIZES`;
  memory        a received vector views the received frame ("view"), or holds a copy of its
                own that nothing the sender does later changes ("copy");
  hostile bytes each damage an adapter guarantees to catch raises the adapter's documented
                error class, and nothing is returned;
  killed peer   a real sending process killed with SIGKILL one byte before the end of its
                message: the receiver raises the adapter's error or times out, never hangs,
                and the next message from a live sender arrives whole.

An adapter is one `Adapter` entry in `ADAPTERS`: its two ends, how a message is framed on the
wire (for the relay that cuts a message one byte short), and what it guarantees. A new way to
send is a new entry. The module imports no pytest: a sending process imports it too
(``python -c "from support.transports import run_sender; ..."``).
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing.connection
import os
import pickle
import select
import selectors
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Type

import numpy as np

from tokenwire import TokenVector, TokenwireError
from tokenwire.errors import AuthenticationError
from tokenwire._core import ImmutableBuffer
from tokenwire.transport import (dumps_oob, key_from_env, loads_oob, recv_pyobj_oob,
                                 send_pyobj_oob)
from support.wait import WAIT_S

#: Sizes every adapter sends: empty, one id, both sides of the out-of-band threshold (64 KiB:
#: 16,384 ids; tests/test_transport_harness.py checks where it lies), and a long prompt.
SIZES = [0, 1, 16_383, 16_384, 128_000]
#: The key of the signed adapters; their sending process reads it from `KEY_ENV`.
KEY = bytes(range(7, 39))
KEY_ENV = "TOKENWIRE_HARNESS_KEY"
TESTS = Path(__file__).resolve().parent.parent

Message = Tuple[int, TokenVector]


def make_ids(n: int, seed: int = 0) -> TokenVector:
    """`n` seeded ids of a real vocabulary's range, the int32 bounds at both ends."""
    ids = np.random.default_rng(seed).integers(0, 151_936, size=n, dtype=np.int32)
    if n >= 2:
        ids[0], ids[-1] = 2**31 - 1, -(2**31)
    return TokenVector(ids)


# --------------------------------------------------------------------------------------------
# the ends: a Sender connects to an endpoint, a Receiver binds it


class Receiver:
    def recv(self, timeout: float) -> Message:
        """The next message as (seq, ids); the adapter's `killed` error after `timeout` s."""
        raise NotImplementedError

    def recv_raw(self, timeout: float) -> List[bytes]:
        """The next message's frames as they crossed the wire."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class Sender:
    def send(self, seq: int, ids: TokenVector) -> None:
        raise NotImplementedError

    def send_raw(self, frames: List[bytes]) -> None:
        """Put `frames` on the wire as one message, as they are."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


# -- plain pickle over a socket (multiprocessing.connection: a length, then the pickle) ---------

def _address(endpoint: str) -> Tuple[int, Any]:
    scheme, _, rest = endpoint.partition("://")
    if scheme == "ipc":
        return socket.AF_UNIX, rest
    host, _, port = rest.rpartition(":")
    return socket.AF_INET, (host, int(port))


class PickleReceiver(Receiver):
    def __init__(self, endpoint: str) -> None:
        family, address = _address(endpoint)
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.bind(address)
        self.listener.listen(4)
        self.conn: Optional[multiprocessing.connection.Connection] = None

    def _connection(self, timeout: float) -> multiprocessing.connection.Connection:
        if self.conn is None or self.conn.closed:
            self.listener.settimeout(timeout)
            sock, _ = self.listener.accept()
            sock.setblocking(True)
            self.conn = multiprocessing.connection.Connection(sock.detach())
        return self.conn

    def _wait(self, timeout: float) -> multiprocessing.connection.Connection:
        conn = self._connection(timeout)
        if not conn.poll(timeout):
            raise TimeoutError(f"no message within {timeout} s")
        return conn

    def recv(self, timeout: float) -> Message:
        conn = self._wait(timeout)
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            conn.close()                      # the peer is gone: the next sender connects anew
            raise
        return msg["seq"], msg["ids"]

    def recv_raw(self, timeout: float) -> List[bytes]:
        return [self._wait(timeout).recv_bytes()]

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.listener.close()


class PickleSender(Sender):
    def __init__(self, endpoint: str) -> None:
        family, address = _address(endpoint)
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.connect(address)
        self.conn = multiprocessing.connection.Connection(sock.detach())

    def send(self, seq: int, ids: TokenVector) -> None:
        self.conn.send({"seq": seq, "ids": ids})

    def send_raw(self, frames: List[bytes]) -> None:
        (frame,) = frames
        self.conn.send_bytes(frame)

    def close(self) -> None:
        self.conn.close()


# -- pyzmq: frames of dumps_oob, send_pyobj_oob, the shm channel, msgspec's Encoder ------------

class ZmqReceiver(Receiver):
    def __init__(self, endpoint: str, load: Callable[[Any], Message],
                 decode: Optional[Callable[[List[Any]], Message]] = None) -> None:
        import zmq
        self.zmq = zmq
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PULL)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        self.load = load
        self.decode = decode

    def _timeout(self, timeout: float) -> None:
        self.sock.setsockopt(self.zmq.RCVTIMEO, max(1, int(timeout * 1000)))

    def recv(self, timeout: float) -> Message:
        self._timeout(timeout)
        return self.load(self.sock)

    def recv_raw(self, timeout: float) -> List[bytes]:
        self._timeout(timeout)
        return self.sock.recv_multipart()

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()


class ZmqSender(Sender):
    def __init__(self, endpoint: str, send: Callable[[Any, int, TokenVector], None]) -> None:
        import zmq
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PUSH)
        self.sock.setsockopt(zmq.LINGER, 30_000)     # a message sent before close() arrives
        self.sock.connect(endpoint)
        self._send = send

    def send(self, seq: int, ids: TokenVector) -> None:
        self._send(self.sock, seq, ids)

    def send_raw(self, frames: List[bytes]) -> None:
        self.sock.send_multipart(frames)

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


def _as_message(obj: Any) -> Message:
    assert type(obj) is dict, f"received {obj!r:.200}, not the message sent"
    return obj["seq"], obj["ids"]


def _frames_receiver(key: Optional[bytes]) -> Callable[[str], Receiver]:
    """dumps_oob's frames, received by the caller's own socket code and loaded with loads_oob:
    zmq.Frames read from an ipc stream, which libzmq alone holds and never rewrites, wrapped in
    `ImmutableBuffer` (the caller's promise that lets loads_oob view them)."""
    def make(endpoint: str) -> Receiver:
        def load(sock: Any) -> Message:
            frames = sock.recv_multipart(copy=False)
            return _as_message(loads_oob([ImmutableBuffer(f) for f in frames], key=key))
        return ZmqReceiver(endpoint, load,
                           decode=lambda frames: _as_message(loads_oob(frames, key=key)))
    return make


def _frames_sender(signed: bool) -> Callable[[str], Sender]:
    def make(endpoint: str) -> Sender:
        key = key_from_env(KEY_ENV) if signed else None     # a worker's key: from its environment

        def send(sock: Any, seq: int, ids: TokenVector) -> None:
            sock.send_multipart(dumps_oob({"seq": seq, "ids": ids}, key=key), copy=False)
        return ZmqSender(endpoint, send)
    return make


def _oob_receiver(key: Optional[bytes]) -> Callable[[str], Receiver]:
    def make(endpoint: str) -> Receiver:
        return ZmqReceiver(endpoint, lambda sock: _as_message(recv_pyobj_oob(sock, key=key)))
    return make


def _oob_sender(signed: bool) -> Callable[[str], Sender]:
    def make(endpoint: str) -> Sender:
        key = key_from_env(KEY_ENV) if signed else None     # a worker's key: from its environment
        return ZmqSender(endpoint, lambda sock, seq, ids: send_pyobj_oob(
            sock, {"seq": seq, "ids": ids}, key=key))
    return make


class ShmReceiver(ZmqReceiver):
    """recv_pyobj_oob(channel=shm.Receiver): the ids of a message that took a slot are copied
    out of the segment once."""

    def __init__(self, endpoint: str) -> None:
        from tokenwire import shm
        self.channel = shm.Receiver()
        super().__init__(endpoint, lambda sock: _as_message(
            recv_pyobj_oob(sock, channel=self.channel)))

    def close(self) -> None:
        super().close()
        self.channel.close()


class ShmSender(ZmqSender):
    def __init__(self, endpoint: str) -> None:
        from tokenwire import shm
        self.channel = shm.Sender(slots=4, slot_bytes=1 << 20)
        super().__init__(endpoint, lambda sock, seq, ids: send_pyobj_oob(
            sock, {"seq": seq, "ids": ids}, channel=self.channel))

    def close(self) -> None:
        super().close()
        self.channel.close()


@functools.lru_cache(maxsize=None)
def _msgspec_types() -> Tuple[Any, Any, Any]:
    import msgspec

    import tokenwire.msgspec as tw_msgspec

    class Request(msgspec.Struct):
        seq: int
        ids: TokenVector
    return tw_msgspec, Request, msgspec


def _as_request(obj: Any) -> Message:
    assert type(obj).__name__ == "Request", f"received {obj!r:.200}, not the message sent"
    return obj.seq, obj.ids


def _msgspec_receiver(endpoint: str) -> Receiver:
    tw_msgspec, request, _ = _msgspec_types()
    decoder = tw_msgspec.Decoder(request)
    return ZmqReceiver(endpoint, lambda sock: _as_request(decoder.recv(sock)),
                       decode=lambda frames: _as_request(decoder.decode(frames)))


def _msgspec_sender(endpoint: str) -> Sender:
    tw_msgspec, request, _ = _msgspec_types()
    encoder = tw_msgspec.Encoder(codec=None)    # raw over ipc://, compact over tcp://
    return ZmqSender(endpoint, lambda sock, seq, ids: encoder.send(sock, request(seq, ids)))


class MsgspecShmReceiver(ShmReceiver):
    """msgspec's Decoder(channel=shm.Receiver)."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(endpoint)
        tw_msgspec, request, _ = _msgspec_types()
        decoder = tw_msgspec.Decoder(request, channel=self.channel)
        self.load = lambda sock: _as_request(decoder.recv(sock))


class MsgspecShmSender(ShmSender):
    """msgspec's Encoder(channel=shm.Sender)."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(endpoint)
        tw_msgspec, request, _ = _msgspec_types()
        encoder = tw_msgspec.Encoder(channel=self.channel)
        self._send = lambda sock, seq, ids: encoder.send(sock, request(seq, ids))


# --------------------------------------------------------------------------------------------
# damage: what the hostile-bytes check does to a message's frames


def _cut_last(frames: List[bytes]) -> List[bytes]:
    """The last frame one byte short (the ids of a message with buffers; else the pickle)."""
    return frames[:-1] + [frames[-1][:-1]]


def _cut_last_by_an_id(frames: List[bytes]) -> List[bytes]:
    return frames[:-1] + [frames[-1][:-4]]


def _cut_first(frames: List[bytes]) -> List[bytes]:
    return [frames[0][:-1], *frames[1:]]


def _drop_last(frames: List[bytes]) -> List[bytes]:
    return frames[:-1] if len(frames) > 1 else []


def _append(frames: List[bytes]) -> List[bytes]:
    return [*frames, bytes(8)]


def _flip(k: int) -> Callable[[List[bytes]], List[bytes]]:
    def flip(frames: List[bytes]) -> List[bytes]:
        out = list(frames)
        f = bytearray(out[k])
        f[len(f) // 2] ^= 0x40
        out[k] = bytes(f)
        return out
    return flip


class _Payload:
    """An attacker's object: unpickling it calls `_record` (it stands for os.system)."""

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_record, ("attacker code ran",))


EXECUTED: List[str] = []


def _record(tag: str) -> str:
    EXECUTED.append(tag)
    return tag


def _forge_unsigned(frames: List[bytes]) -> List[bytes]:
    return [pickle.dumps(_Payload(), protocol=5)]


def _forge_other_key(frames: List[bytes]) -> List[bytes]:
    return [bytes(f) for f in dumps_oob(_Payload(), key=bytes(range(101, 133)))]


def _forge_msgpack(frames: List[bytes]) -> List[bytes]:
    import msgspec
    return [msgspec.msgpack.encode({"seq": "not an int", "ids": [1, 2]})]


#: Every damage by name, applied to the frames of a message of `SIZES[-1]` ids (a message with
#: an out-of-band buffer; the shm channel's and the signed adapter's leading frames too).
DAMAGES: Dict[str, Callable[[List[bytes]], List[bytes]]] = {
    "last frame cut by a byte": _cut_last,
    "last frame cut by an id": _cut_last_by_an_id,
    "first frame cut by a byte": _cut_first,
    "last frame dropped": _drop_last,
    "frame appended": _append,
    "first frame flipped": _flip(0),
    "last frame flipped": _flip(-1),
    "unsigned pickle": _forge_unsigned,
    "signed with another key": _forge_other_key,
    "msgpack of another shape": _forge_msgpack,
}

# What an unsigned pickle message guarantees to catch: a truncated pickle, a missing buffer, a
# buffer that is not whole ids. (A byte changed elsewhere, a buffer shortened by whole ids or an
# extra frame are not detectable without a signature: anyone who can reach an unsigned socket
# can send any pickle.)
_UNSIGNED = ("last frame cut by a byte", "first frame cut by a byte", "last frame dropped")
_PICKLE_ERRORS: Tuple[Type[BaseException], ...] = (pickle.UnpicklingError, TokenwireError)


# --------------------------------------------------------------------------------------------
# how each adapter's messages are framed on a stream (where the relay cuts one short)


class MessageEnds:
    """Fed the bytes a sender writes on its connection, reports where each message ends."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.pos = 0                  # bytes of `buf` parsed
        self.base = 0                 # stream offset of buf[0]
        self.ends: List[int] = []     # stream offsets one past each message's last byte
        self.known_end: Optional[int] = None   # the end of the message being read, once known

    def feed(self, data: bytes) -> None:
        self.buf += data
        self._parse()

    def _take(self, n: int) -> Optional[bytes]:
        if len(self.buf) - self.pos < n:
            return None
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out

    def _parse(self) -> None:
        raise NotImplementedError


class ConnectionMessages(MessageEnds):
    """multiprocessing.connection: a big-endian int32 length (-1: a uint64 length follows),
    then that many bytes."""

    def _parse(self) -> None:
        while True:
            start = self.pos
            head = self._take(4)
            if head is None:
                return
            (n,) = struct.unpack("!i", head)
            if n == -1:
                more = self._take(8)
                if more is None:
                    self.pos = start
                    return
                (n,) = struct.unpack("!Q", more)
            self.known_end = self.base + self.pos + n
            if len(self.buf) - self.pos < n:
                self.pos = start
                return
            self.pos += n
            self.ends.append(self.base + self.pos)
            self.known_end = None


class ZmtpMessages(MessageEnds):
    """ZMTP 3 (libzmq's stream protocol): a 64-byte greeting, then frames of a flags byte (1:
    more, 2: long size, 4: a command), a size of 1 or 8 bytes, a body; a message ends with a
    frame that is neither a command nor followed by more."""

    def __init__(self) -> None:
        super().__init__()
        self.greeted = False

    def _parse(self) -> None:
        if not self.greeted:
            if self._take(64) is None:
                return
            self.greeted = True
        while True:
            start = self.pos
            flags = self._take(1)
            if flags is None:
                return
            head = self._take(8 if flags[0] & 2 else 1)
            if head is None:
                self.pos = start
                return
            n = int.from_bytes(head, "big")
            last = not flags[0] & 5
            if last:
                self.known_end = self.base + self.pos + n
            if len(self.buf) - self.pos < n:
                self.pos = start
                return
            self.pos += n
            if last:
                self.ends.append(self.base + self.pos)
                self.known_end = None


# --------------------------------------------------------------------------------------------
# the adapters


@dataclass(frozen=True)
class Adapter:
    name: str
    receiver: Callable[[str], Receiver]
    sender: Callable[[str], Sender]
    scheme: str                                   # "ipc" or "tcp"
    framing: Callable[[], MessageEnds]
    #: what a received vector of out-of-band size holds: "view" (the received frame) or
    #: "copy" (its own copy, or a decoded frame)
    memory: str
    #: damage name -> the error classes it raises (`DAMAGES`)
    damages: Dict[str, Tuple[Type[BaseException], ...]]
    #: what a receive raises when the sender died mid-message (nothing whole arrived)
    killed: Tuple[Type[BaseException], ...]
    #: the module the adapter needs, if not tokenwire's own
    requires: Tuple[str, ...] = ()
    #: messages the receiver reads before the one the killed-peer check cuts short (the shm
    #: channel's first message offers the segment)
    warm_up: int = 0
    env: Dict[str, str] = field(default_factory=dict)

    def endpoint(self, directory: str) -> str:
        if self.scheme == "ipc":
            return f"ipc://{directory}/{uuid.uuid4().hex[:12]}.sock"
        with socket.socket() as s:                 # a free port; bound again at once
            s.bind(("127.0.0.1", 0))
            return f"tcp://127.0.0.1:{s.getsockname()[1]}"

    def decode(self, receiver: Receiver) -> Optional[Callable[[List[Any]], Message]]:
        """The adapter's public decoding of frames it holds, where it has one."""
        return getattr(receiver, "decode", None)


def _zmq_again() -> Tuple[Type[BaseException], ...]:
    try:
        import zmq
    except ModuleNotFoundError:
        return ()
    return (zmq.Again,)


def _msgspec_errors() -> Tuple[Type[BaseException], ...]:
    try:
        import msgspec
    except ModuleNotFoundError:
        return (TokenwireError,)
    return (msgspec.DecodeError, msgspec.ValidationError, TokenwireError)


def _adapters() -> List[Adapter]:
    unsigned = {d: _PICKLE_ERRORS for d in _UNSIGNED}
    # Without sign_buffers a signature covers the buffers' number and sizes, not their bytes.
    signed = {d: (AuthenticationError,) for d in DAMAGES
              if d not in ("msgpack of another shape", "last frame flipped")}
    again = _zmq_again()
    msgspec_errors = _msgspec_errors()
    zmq_ipc = dict(scheme="ipc", framing=ZmtpMessages, killed=again, requires=("zmq",))
    return [
        Adapter("pickle", PickleReceiver, PickleSender, "tcp", ConnectionMessages, "copy",
                {d: _PICKLE_ERRORS for d in ("last frame cut by a byte",
                                             "first frame cut by a byte")},
                (EOFError, OSError)),     # OSError: "got end of file during message"
        Adapter("dumps_oob", _frames_receiver(None), _frames_sender(False), memory="view",
                damages=unsigned, **zmq_ipc),
        Adapter("dumps_oob-key", _frames_receiver(KEY), _frames_sender(True), memory="view",
                damages=signed, env={KEY_ENV: KEY.hex()}, **zmq_ipc),
        Adapter("send_pyobj_oob", _oob_receiver(None), _oob_sender(False), memory="view",
                damages=unsigned, **zmq_ipc),
        # Over tcp:// the ids travel as checksummed compact frames: a changed id is caught.
        Adapter("send_pyobj_oob-tcp", _oob_receiver(None), _oob_sender(False), "tcp",
                ZmtpMessages, "copy", {**unsigned, "last frame flipped": _PICKLE_ERRORS},
                again, ("zmq",)),
        Adapter("send_pyobj_oob-key", _oob_receiver(KEY), _oob_sender(True), memory="view",
                damages=signed, env={KEY_ENV: KEY.hex()}, **zmq_ipc),
        Adapter("shm-channel", ShmReceiver, ShmSender, memory="copy",
                damages={**unsigned, "first frame flipped": (TokenwireError,)}, warm_up=1,
                **{**zmq_ipc, "requires": ("zmq", "tokenwire.shm")}),
        Adapter("msgspec", _msgspec_receiver, _msgspec_sender, memory="view",
                damages={d: msgspec_errors for d in (
                    "last frame cut by a byte", "last frame cut by an id",
                    "first frame cut by a byte", "last frame dropped",
                    "msgpack of another shape")},
                **{**zmq_ipc, "requires": ("zmq", "msgspec")}),
        Adapter("msgspec-shm", MsgspecShmReceiver, MsgspecShmSender, memory="copy",
                damages={d: msgspec_errors for d in (
                    "last frame cut by a byte", "first frame cut by a byte",
                    "last frame dropped", "first frame flipped")}, warm_up=1,
                **{**zmq_ipc, "requires": ("zmq", "msgspec", "tokenwire.shm")}),
    ]


ADAPTERS = {a.name: a for a in _adapters()}


# --------------------------------------------------------------------------------------------
# the killed peer: a sending process, and a relay that cuts its message one byte short


def run_sender(name: str, endpoint: str) -> None:
    """A sending process (``python -c``): reads ``send SEQ N`` lines from stdin, sends SEQ with
    N ids (`make_ids`) and answers ``sent SEQ``; ``exit`` closes it."""
    sender = ADAPTERS[name].sender(endpoint)
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[0] == "exit":
            break
        seq, n = int(words[1]), int(words[2])
        sender.send(seq, make_ids(n, seq))
        print(f"sent {seq}", flush=True)
    sender.close()


def spawn_sender(adapter: Adapter, endpoint: str) -> subprocess.Popen:
    """`run_sender` in a fresh interpreter, started from a neutral directory (from a clone, its
    uncompiled tokenwire/ would shadow the installed one)."""
    env = {**os.environ, **adapter.env, "PYTHONPATH": str(TESTS)}
    code = "import sys; from support.transports import run_sender; run_sender(*sys.argv[1:])"
    return subprocess.Popen([sys.executable, "-c", code, adapter.name, endpoint],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            cwd=tempfile.gettempdir(), env=env)


class Relay:
    """Stands between one sending process and the receiver's endpoint: forwards both ways,
    but of the sender's message number `hold` (from 0) holds back the last byte and all that
    follows. `holding` is set once that message sits in the relay whole but for its last byte
    (the receiver has everything else); when the sender's connection ends the relay drops what
    it held and closes its connection to the receiver."""

    def __init__(self, adapter: Adapter, directory: str, target: str, hold: int) -> None:
        self.adapter, self.target, self.hold = adapter, target, hold
        self.endpoint = adapter.endpoint(directory)
        family, address = _address(self.endpoint)
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.bind(address)
        self.listener.listen(1)
        self.holding = threading.Event()
        self.closed = threading.Event()
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._pump()
        except BaseException as e:          # reported by the test (`check`)
            self.error = e
        finally:
            self.closed.set()

    def _pump(self) -> None:
        self.listener.settimeout(300)
        try:
            down, _ = self.listener.accept()   # the sending process
        finally:
            self.listener.close()
        family, address = _address(self.target)
        up = socket.socket(family, socket.SOCK_STREAM)
        try:
            up.connect(address)                # the receiver
        except BaseException:
            up.close()
            down.close()
            raise
        ends = self.adapter.framing()
        sent = 0                               # bytes of the sender's stream forwarded
        pending = bytearray()                  # bytes received from the sender, not forwarded
        sel = selectors.DefaultSelector()
        sel.register(down, selectors.EVENT_READ, "down")
        sel.register(up, selectors.EVENT_READ, "up")
        try:
            while True:
                for key, _ in sel.select(timeout=WAIT_S):
                    sock = key.fileobj
                    data = sock.recv(1 << 16)            # type: ignore[union-attr]
                    if not data:
                        return                           # either side gone: close both
                    if key.data == "up":
                        down.sendall(data)
                        continue
                    pending += data
                    ends.feed(data)
                    limit = sent + len(pending)
                    if len(ends.ends) > self.hold:
                        limit = min(limit, ends.ends[self.hold] - 1)
                        self.holding.set()
                    elif len(ends.ends) == self.hold and ends.known_end is not None:
                        limit = min(limit, ends.known_end - 1)
                    if limit > sent:
                        up.sendall(pending[:limit - sent])
                        del pending[:limit - sent]
                        sent = limit
        finally:
            sel.close()
            up.close()
            down.close()

    def close(self) -> None:
        """Close the listening socket if no sender ever connected (a test that failed before):
        the relay's other sockets close when the sender's connection ends."""
        with contextlib.suppress(OSError):
            self.listener.close()

    def check(self) -> None:
        assert self.closed.wait(WAIT_S), "the relay did not see the sender's connection end"
        if self.error is not None:
            raise AssertionError(f"the relay failed: {self.error!r}") from self.error


def read_line(proc: subprocess.Popen, expect: str, deadline: float = WAIT_S) -> None:
    """The sending process's next line, which must be `expect`, within `deadline` seconds."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = getattr(proc, "_lines", b"")
    stop = time.monotonic() + deadline
    while b"\n" not in buf:
        left = stop - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, left))
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:
            raise AssertionError(f"the sending process said {buf!r} and then "
                                 + ("ended" if ready else f"nothing for {deadline} s")
                                 + f", expected {expect!r}")
        buf += chunk
    line, _, rest = buf.partition(b"\n")
    proc._lines = rest                          # type: ignore[attr-defined]
    assert line.decode() == expect, f"the sending process said {line!r}, expected {expect!r}"


def command(proc: subprocess.Popen, line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line.encode() + b"\n")
    proc.stdin.flush()


def end(proc: subprocess.Popen) -> None:
    """Kill `proc` (if it still runs) and reap it."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=WAIT_S)
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


@contextlib.contextmanager
def ends_of(adapter: Adapter, directory: str) -> Iterator[Tuple[Sender, Receiver]]:
    """A receiver bound to a fresh endpoint and a sender connected to it, in this process."""
    endpoint = adapter.endpoint(directory)
    receiver = adapter.receiver(endpoint)
    try:
        sender = adapter.sender(endpoint)
        try:
            yield sender, receiver
        finally:
            sender.close()
    finally:
        receiver.close()
