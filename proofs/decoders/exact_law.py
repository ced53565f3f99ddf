"""A decoder that samples an enumerated law of n-token sequences directly.

The mutation check samples its enumerable entries (proofs.decoders.specref.SpecRef, whose `sequence_law`
equals its `generate` in law: tests/proofs/decoders/test_specref.py) through this, so the full plan's
hundreds of thousands of samples per case cost milliseconds: the test sees exactly the law the
buggy decoder has. Sample i is a function of its seed alone (a splitmix64 hash of the seed gives
its uniform), so chunking never changes a sample.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from refdec.sampling import SamplingParams

SeqLaw = dict[tuple[int, ...], float]


def uniforms(seeds: Sequence[int]) -> np.ndarray:
    """One U[0, 1) per seed: splitmix64's finaliser (Steele et al. 2014), top 53 bits."""
    z = np.asarray(seeds, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(2**53)


class LawSampler:
    """generate / generate_batch over `law_of(prompt, n, sampling) -> {sequence: probability}`."""

    def __init__(self, law_of: Callable[[tuple[int, ...], int, SamplingParams], SeqLaw]):
        self.law_of = law_of
        self._tables: dict[tuple, tuple[list[tuple[int, ...]], np.ndarray]] = {}

    def table(self, prompt, n: int, sampling: SamplingParams) -> tuple[list[tuple[int, ...]], np.ndarray]:
        key = (tuple(prompt), n, sampling)
        if key not in self._tables:
            law = self.law_of(tuple(prompt), n, sampling)
            seqs = sorted(law)
            cdf = np.cumsum([law[s] for s in seqs])
            self._tables[key] = seqs, cdf / cdf[-1]
        return self._tables[key]

    def generate_batch(
        self, prompts, max_new_tokens: int, sampling: SamplingParams, seeds, eos_token_id: int | None = None
    ) -> list[list[int]]:
        out: list[list[int]] = []
        groups: dict[tuple, list[int]] = {}
        for i, p in enumerate(prompts):
            groups.setdefault(tuple(p), []).append(i)
        res: list[list[int] | None] = [None] * len(prompts)
        for p, idx in groups.items():
            seqs, cdf = self.table(p, max_new_tokens, sampling)
            picks = np.searchsorted(cdf, uniforms([seeds[i] for i in idx]), side="right")
            for i, k in zip(idx, np.minimum(picks, len(seqs) - 1), strict=True):
                res[i] = list(seqs[int(k)])
        out = [r for r in res if r is not None]
        return out

    def generate(self, prompt, max_new_tokens: int, sampling: SamplingParams, seed: int) -> list[int]:
        return self.generate_batch([prompt], max_new_tokens, sampling, [seed])[0]
