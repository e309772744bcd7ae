"""A transport of one's own: requests with token ids over an asyncio stream.

    python examples/asyncio_stream.py                 # 40,000 ids, one request each way

tokenwire's out-of-band layer is transport-neutral: `dumps_oob` turns an object into frames (a
signature, a protocol-5 pickle, then each large buffer -- the int32 ids -- as a frame of its own,
a view of the object's memory, not a copy), and `loads_oob` verifies the signature and loads
the object back from frames, viewing buffers it is given as `bytes`. pyzmq's multipart messages
are one way to carry frames (`send_pyobj_oob`); this is another, over any asyncio stream (TCP
here, a Unix socket alike): a message is a u32 frame count, then per frame a u64 length and its
bytes, all little-endian.

The reader bounds what it allocates by its own limits before reading (at most MAX_FRAMES frames,
MAX_MESSAGE_BYTES bytes in all), and the signature is checked before anything is unpickled,
so a peer that can reach the port but lacks the key gets its message refused, nothing run.
Nothing here but the standard library, numpy and tokenwire.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import struct
from typing import Any, List

import numpy as np

import tokenwire
from tokenwire.errors import AuthenticationError, WireFormatError
from tokenwire.transport import dumps_oob, loads_oob

MAX_FRAMES = 64
MAX_MESSAGE_BYTES = 64 << 20
_COUNT = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")


async def write_message(writer: asyncio.StreamWriter, obj: Any, key: bytes) -> None:
    """Send `obj`: its frames from `dumps_oob`, each behind its length (the ids are written
    from the vector's own memory)."""
    frames = dumps_oob(obj, key=key)
    writer.write(_COUNT.pack(len(frames)))
    for frame in frames:
        writer.write(_LENGTH.pack(memoryview(frame).nbytes))
        writer.write(frame)
    await writer.drain()


async def read_message(reader: asyncio.StreamReader, key: bytes) -> Any:
    """The next object on `reader`, verified with `key` (tokenwire.AuthenticationError when it
    was not signed with it, WireFormatError when the framing breaks this reader's limits). The
    frames are `bytes`: immutable, so the ids are viewed where they were read."""
    (count,) = _COUNT.unpack(await reader.readexactly(_COUNT.size))
    if not 1 <= count <= MAX_FRAMES:
        raise WireFormatError(f"a message of {count} frames (this reader takes 1 to "
                              f"{MAX_FRAMES})")
    frames: List[bytes] = []
    total = 0
    for _ in range(count):
        (n,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
        total += n
        if total > MAX_MESSAGE_BYTES:
            raise WireFormatError(f"a message of more than {MAX_MESSAGE_BYTES} bytes")
        frames.append(await reader.readexactly(n))
    return loads_oob(frames, key=key)


async def main(isl: int) -> None:
    key = secrets.token_bytes(32)
    received: "asyncio.Queue[Any]" = asyncio.Queue()

    async def worker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    request = await read_message(reader, key)
                except asyncio.IncompleteReadError:
                    return                               # the peer closed the stream
                except (AuthenticationError, WireFormatError) as e:
                    await received.put(e)
                    return                               # a refused peer loses its stream
                ids = np.asarray(request["prompt_token_ids"])   # int32, viewing the frame
                await received.put(request)
                await write_message(writer, {"request_id": request["request_id"],
                                             "sum": int(ids.sum(dtype=np.int64))}, key)
        finally:
            writer.close()

    server = await asyncio.start_server(worker, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    ids = tokenwire.as_tokens(np.random.default_rng(0).integers(0, 151_936, isl).tolist())
    async with server:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await write_message(writer, {"request_id": "r1", "prompt_token_ids": ids}, key)
        got = await received.get()
        answer = await read_message(reader, key)
        same = got["prompt_token_ids"] == ids
        print(f"received {len(got['prompt_token_ids'])} ids, equal: {same}; "
              f"answer sum ok: {answer['sum'] == int(np.asarray(ids).sum(dtype=np.int64))}")
        writer.close()

        # A peer without the key: refused before anything is unpickled.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await write_message(writer, {"request_id": "r2", "prompt_token_ids": ids},
                            secrets.token_bytes(32))
        print(f"wrong key: {type(await received.get()).__name__}")
        writer.close()

        # A frame count beyond the reader's limit: refused before anything is read.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_COUNT.pack(1 << 30))
        await writer.drain()
        print(f"too many frames: {await received.get()}")
        writer.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--isl", type=int, default=40_000, help="prompt length in ids")
    asyncio.run(main(parser.parse_args().isl))
