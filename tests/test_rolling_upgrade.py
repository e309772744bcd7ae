"""Rolling upgrades: proxies and workers running different versions exchange requests.

A new proxy sends to an old worker (real subprocess, tests/support/dropin_old_worker.py, running
the unmodified classes with and without tokenwire installed): by default a TokenVector, with
`list_on_wire` (process-wide, per class, or TOKENWIRE_LIST_ON_WIRE) exactly the list the old class
expects. An old proxy sends to a new worker: the converted class loads the unmodified class's
pickles, every protocol.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import tokenwire
from support.serving import PROTOCOLS, ROOT, after, before, executor, ids_of, tokenized
from support.wait import WAIT_S
from tokenwire import TokenVector, token_buffer

# --------------------------------------------------------------------------------------------
# new proxy, old worker (real processes running the unmodified classes)


def _old_worker(data: bytes, *args: str) -> dict:
    worker = ROOT / "tests" / "support" / "dropin_old_worker.py"
    r = subprocess.run([sys.executable, str(worker), *args],
                       input=data, capture_output=True, timeout=WAIT_S,
                       cwd=tempfile.gettempdir())
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def test_rolling_upgrade_new_proxy_old_worker():
    ids = ids_of(1000)
    req = executor(after, list(ids))
    # Default format: an old worker without tokenwire cannot even load it ...
    assert "ModuleNotFoundError" in _old_worker(pickle.dumps(req, 5), "--no-tokenwire")["load_error"]
    # ... one with tokenwire installed loads a TokenVector: concatenation works, .append does not.
    seen = _old_worker(pickle.dumps(req, 5))
    assert seen["type"] == "TokenVector" and seen["rotated_head"] == ids[1:4]
    assert seen["consumer_error"].startswith("AttributeError")
    # The switch, process-wide: the old class receives exactly the list it expects.
    previous = tokenwire.list_on_wire(True)
    try:
        data = pickle.dumps(req, 5)
    finally:
        tokenwire.list_on_wire(previous)
    assert b"tokenwire" not in data
    seen = _old_worker(data, "--no-tokenwire")
    assert seen == {"type": "list", "len": 1000, "rotated_head": ids[1:4], "appended": True}
    # A new worker reads the list form too (and keeps it a list: it is the source).
    back = pickle.loads(data)
    assert back.prompt_token_ids == ids and after.ExecutorRequest.prompt_token_ids.is_materialized(back)


def test_list_on_wire_per_class_and_environment():
    @tokenwire.token_fields("ids", list_on_wire=True)
    class Compat:
        def __init__(self, ids):
            self.ids = ids

    class CompatMixin(tokenwire.state._TokenwireMixin, list_on_wire=True):
        ids = tokenwire.TokenIds()

    class Fast(tokenwire.state._TokenwireMixin, list_on_wire=False):
        ids = tokenwire.TokenIds()

    obj = Compat(np.arange(3, dtype=np.int32))               # held as a buffer, sent as a list
    assert obj.__getstate__() == {"ids": [0, 1, 2]}
    m = CompatMixin()
    m.ids = [4]
    assert m.__getstate__() == {"ids": [4]}
    f = Fast()
    f.ids = [4]
    previous = tokenwire.list_on_wire(True)
    try:
        assert type(f.__getstate__()["ids"]) is TokenVector    # the class's choice wins
        assert tokenwire.list_on_wire() is True
    finally:
        tokenwire.list_on_wire(previous)
    code = "import tokenwire; print(tokenwire.list_on_wire())"
    for value, expected in (("1", "True"), ("0", "False"), ("", "False")):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "TOKENWIRE_LIST_ON_WIRE": value},
                           cwd=tempfile.gettempdir())
        assert r.stdout.strip() == expected, r.stderr


class RenamingUnpickler(pickle.Unpickler):
    """Loads the unmodified classes' pickles as the same-named converted classes (in a real
    deployment the module name is the same on both sides)."""

    def find_class(self, module, name):
        return super().find_class(module.replace("serving_requests_before", "serving_requests"), name)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_old_proxy_new_worker(protocol):
    """Workers first: a new class loads what the unmodified class pickled."""
    ids = ids_of(500)
    for build in (executor, tokenized):
        old = build(before, list(ids))
        new = RenamingUnpickler(io.BytesIO(pickle.dumps(old, protocol))).load()
        assert type(new).__module__ == "serving_requests"
        name = "prompt_token_ids" if build is executor else "input_ids"
        assert getattr(new, name) == ids and token_buffer(new, name) == ids
        assert vars(new).keys() == vars(old).keys()


