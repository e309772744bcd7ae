"""Prompt ids in an HTTP JSON body as a base64 frame: a standard-library server and client.

    python examples/http_base64.py                 # 40,000 ids, one request
    python examples/http_base64.py --isl 128000

The client sends ``{"prompt_token_ids": "<base64>"}`` (`tokenwire.to_base64`: about 3
characters per 18-bit id, against ~7 for a JSON array of the same ids). The server reads the
body with the standard library's `json`, turns the string into a TokenVector with
`tokenwire.from_base64` (no list[int] is built: the text becomes one frame, the frame one int32
buffer), and answers with the length and a checksum of the ids computed on that buffer, which
the client checks. A bad body gets a 400 whose message names the problem. No web framework,
nothing beyond the standard library, numpy and tokenwire.
"""

from __future__ import annotations

import argparse
import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

import tokenwire

VOCAB_SIZE = 151_936     # Qwen2/3: the server rejects ids outside the model's vocabulary


class PromptHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            request = json.loads(body)
            prompt = tokenwire.from_base64(request["prompt_token_ids"], vocab_size=VOCAB_SIZE)
        except (ValueError, KeyError, TypeError) as e:     # WireFormatError is a ValueError
            self._reply(400, {"error": f"{type(e).__name__}: {e}"})
            return
        ids = np.asarray(prompt)                  # a view of the decoded frame, int32
        self._reply(200, {"prompt_len": len(prompt), "id_sum": int(ids.sum(dtype=np.int64)),
                          "last_ids": tokenwire.to_base64(prompt[-4:])})

    def _reply(self, status: int, doc: dict[str, object]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass                                      # keep the example's output to the point


def post(url: str, doc: dict[str, object]) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(url, data=json.dumps(doc).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--isl", type=int, default=40_000, help="prompt length in ids")
    args = p.parse_args()

    server = ThreadingHTTPServer(("127.0.0.1", 0), PromptHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/generate"
    try:
        ids = np.random.default_rng(0).integers(0, VOCAB_SIZE, args.isl, dtype=np.int32)
        text = tokenwire.to_base64(ids)
        status, reply = post(url, {"prompt_token_ids": text, "max_tokens": 16})
        assert status == 200, reply
        print(f"client sent {len(text):,} characters ({len(text) / args.isl:.2f} per id; "
              f"a JSON array would take {len(json.dumps(ids.tolist())):,})")
        print(f"server decoded {reply['prompt_len']:,} ids, sum {reply['id_sum']:,}")
        assert reply["prompt_len"] == args.isl
        assert reply["id_sum"] == int(ids.sum(dtype=np.int64))
        assert tokenwire.from_base64(str(reply["last_ids"])) == ids[-4:].tolist()

        status, reply = post(url, {"prompt_token_ids": text[:100] + "!" + text[101:]})
        print(f"a damaged body: HTTP {status}: {reply['error']}")
        assert status == 400 and "position 100" in str(reply["error"])
        print("round trip OK")
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
