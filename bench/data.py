"""Seeded, realistic token streams generated in-process (no download needed)."""

from __future__ import annotations

import numpy as np

#: Vocabulary sizes of the streams the benchmarks use by default: Qwen2/Qwen3 and Llama 2.
VOCABS = {"qwen": 151_936, "llama2": 32_000}


def token_stream(n: int, vocab: int = VOCABS["qwen"], seed: int = 0) -> np.ndarray:
    """`n` int32 ids: Zipf-distributed ranks (a = 1.2, like word frequencies) mapped through a
    fixed shuffle of the vocabulary, since a tokenizer's frequent tokens are not all small ids."""
    rng = np.random.default_rng(seed)
    ranks = np.empty(0, dtype=np.int64)
    while ranks.size < n:   # draw, drop ranks beyond the vocabulary, repeat until n remain
        draw = rng.zipf(1.2, size=max(n, 1024)) - 1
        ranks = np.concatenate([ranks, draw[draw < vocab]])
    perm = np.random.default_rng(12345 + vocab).permutation(vocab)
    return perm[ranks[:n]].astype(np.int32)
