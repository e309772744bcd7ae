"""An old worker during a rolling upgrade: it runs the *unmodified* request classes
(examples/before/serving_requests.py) and reads one pickled request from stdin.

    python tests/support/dropin_old_worker.py [--no-tokenwire]

With --no-tokenwire the process behaves as if tokenwire were not installed (an import of any
tokenwire module fails), as on a host that has not been upgraded yet. Prints one JSON line:
what the old consumer code saw, or the exception the unpickling / the consumer raised.
"""

from __future__ import annotations

import importlib.abc
import json
import pickle
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "before"))


class _NoTokenwire(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "tokenwire" or name.startswith("tokenwire."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None


def main() -> int:
    if "--no-tokenwire" in sys.argv:
        sys.meta_path.insert(0, _NoTokenwire())
    import serving_requests  # noqa: F401  (the old classes, under the name the pickle uses)

    data = sys.stdin.buffer.read()
    out: dict = {}
    try:
        req = pickle.loads(data)
    except Exception as exc:
        print(json.dumps({"load_error": f"{type(exc).__name__}: {exc}"}))
        return 0
    ids = getattr(req, "prompt_token_ids", None)
    if ids is None:
        ids = req.input_ids
    out["type"] = type(ids).__name__
    out["len"] = len(ids)
    try:
        out["rotated_head"] = (ids[1:] + [ids[0]])[:3]      # list-assuming consumer code
        ids.append(0)                                        # ... and one that mutates
        out["appended"] = True
    except Exception as exc:
        out["consumer_error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
