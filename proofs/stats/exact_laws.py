"""Exact next-token laws from refdec, and the exact law of the first n generated tokens.

`Oracle` wraps a float64 copy of a model and remembers `depth_logits` of every context it
was asked about (a pure function of the context, so remembering it is not a cache in the
docs/design.md section 5 sense: nothing is ever rolled back or reused across different inputs).

`exact_law` enumerates the prefix tree of the first n tokens under p_R (docs/design.md section 6,
check 3): every sequence when the vocabulary is tiny, otherwise the head of the law (every
node whose probability is at least `min_prob`) plus one pooled remainder cell. A sample is
classified into a head cell, the remainder, or the impossible cell (a continuation the law
gives probability 0 at a node it expanded, a wrong length, or an out-of-range id).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from refdec.errors import LoopcertError
from refdec.sampling import Context, SamplingParams, transform

MAX_FULL_CONTEXTS = 400  # enumerate the whole tree when it has at most this many inner nodes


class Oracle:
    """float64 refdec logits at every depth 1..R of the last position of a context, remembered."""

    def __init__(self, model, *, share: bool = False):
        """A float64 CPU copy of `model`; with `share` (a model already float64 on the CPU, that
        nobody changes) the model itself: a 1.4B-parameter model's float64 copy is 11.5 GB, and
        a run must not hold two (docs/scale.md)."""
        if share and _is_float64_cpu(model):
            self.model = model.eval()
        else:
            self.model = copy.deepcopy(model).to(device="cpu", dtype=torch.float64).eval()
        self.cfg = self.model.cfg
        self.R = self.cfg.recurrence
        self.V = self.cfg.vocab_size
        self._logits: dict[tuple[int, ...], torch.Tensor] = {}
        self._laws: dict[tuple, torch.Tensor] = {}

    @classmethod
    def over(cls, model) -> Oracle:
        """The oracle of a model a run keeps unchanged: shares it when it is float64 on the CPU."""
        return cls(model, share=True)

    def logits(self, context: Sequence[int]) -> torch.Tensor:
        """(R, V) float64: row r-1 is the depth-r logits of the token after `context`."""
        key = tuple(int(t) for t in context)
        got = self._logits.get(key)
        if got is None:
            # clone: a view of the last row would keep the whole (R, T, V) readout alive, T times
            # what is remembered (47 MB a context at V = 49,152 and T = 30: docs/scale.md)
            got = self.model.depth_logits(list(key), list(range(1, self.R + 1)))[:, -1].clone()
            self._logits[key] = got
        return got

    def law(
        self,
        context: Sequence[int],
        depth: int,
        sampling: SamplingParams,
        prompt_len: int | None = None,
        seen: int | None = None,
    ) -> torch.Tensor:
        """(V,) float64: transform(p_depth) for the token after `context` (docs/design.md section 3).
        Parameters that follow the prefix (penalties, min_tokens) need `prompt_len`: the first
        prompt_len tokens of `context` are the prompt, the rest the output so far (no EOS id: a
        certification case names its stops in stop_token_ids). `seen` (a mutant's stale state):
        the processors count only the first `seen` output tokens."""
        if not 1 <= depth <= self.R:
            raise LoopcertError(f"depth {depth} outside 1..R={self.R}")
        ctx = None
        if sampling.needs_context:
            if prompt_len is None:
                raise LoopcertError("a law under penalties or min_tokens needs the prompt's length")
            context = tuple(context)
            out = context[prompt_len:] if seen is None else context[prompt_len : prompt_len + seen]
            ctx = Context.of(context[:prompt_len], out)
        key = (tuple(context), depth, sampling) + (() if ctx is None else (prompt_len, seen))
        got = self._laws.get(key)
        if got is None:
            got = transform(self.logits(context)[depth - 1], sampling, ctx)
            self._laws[key] = got
        return got

    def forget_laws(self) -> None:
        """Drop the transformed laws, keep the logits: what a law costs beyond its forward pass
        (benchmarks/scale_parts.py's vocabulary figure)."""
        self._laws.clear()

    @property
    def contexts_seen(self) -> int:
        return len(self._logits)


def _is_float64_cpu(model) -> bool:
    return all(t.dtype == torch.float64 and t.device.type == "cpu" for t in model.state_dict().values())


def well_ended(seq: Sequence[int], n: int, stops: frozenset[int]) -> bool:
    """n tokens with no stop token before the last, or fewer that end at their first stop."""
    if not seq or len(seq) > n or any(t in stops for t in seq[:-1]):
        return False
    return len(seq) == n or seq[-1] in stops


IMPOSSIBLE = -1  # classify(): a sample the law gives probability zero
REMAINDER = -2  # classify(): a sample outside the enumerated head


@dataclass
class ExactLaw:
    """The law of the first n new tokens: head cells + one remainder cell (mass `remainder`)."""

    prompt: tuple[int, ...]
    n: int
    sampling: SamplingParams
    cells: list[tuple[int, ...]]
    probs: np.ndarray  # (len(cells),) float64
    remainder: float  # mass of every sequence not enumerated (0 under full enumeration)
    full: bool
    min_prob: float
    nodes: dict[tuple[int, ...], np.ndarray] = field(repr=False)  # expanded prefix -> (V,) law
    index: dict[tuple[int, ...], int] = field(repr=False)

    def classify(self, seq: Sequence[int]) -> int:
        """Cell index of a generated sequence, or REMAINDER / IMPOSSIBLE. A sequence ends at its
        first stop token (SamplingParams.stop_ids): shorter only then, never going on past one."""
        seq = tuple(seq)
        if not well_ended(seq, self.n, self.sampling.stop_ids()):
            return IMPOSSIBLE
        got = self.index.get(seq)
        if got is not None:
            return got
        for i in range(len(seq)):
            law = self.nodes.get(seq[:i])
            if law is None:
                return REMAINDER
            if not 0 <= seq[i] < law.size or law[seq[i]] <= 0.0:
                return IMPOSSIBLE
        return REMAINDER  # positive probability, below the head's threshold

    def cell_probs(self) -> np.ndarray:
        """Head cells, then the remainder cell, then the impossible cell (probability 0)."""
        return np.concatenate([self.probs, [max(self.remainder, 0.0), 0.0]])

    def counts(self, samples: Sequence[Sequence[int]]) -> np.ndarray:
        """Counts over `cell_probs()`'s cells."""
        c = np.zeros(len(self.cells) + 2, dtype=np.int64)
        for s in samples:
            k = self.classify(s)
            c[k if k >= 0 else (len(self.cells) if k == REMAINDER else len(self.cells) + 1)] += 1
        return c

    def describe(self) -> str:
        if self.full:
            return f"full enumeration of {len(self.cells)} sequences of positive probability"
        return (
            f"head of {len(self.cells)} sequences (every node with p >= {self.min_prob:.3g}) "
            f"+ one pooled remainder of mass {self.remainder:.4f}"
        )


def exact_law(
    oracle: Oracle,
    prompt: Sequence[int],
    n: int,
    sampling: SamplingParams,
    n_samples: int | None = None,
    min_expected: float = 5.0,
) -> ExactLaw:
    """Enumerate the law of the first n tokens of refdec at depth R under `sampling`.

    Full enumeration when the tree has at most MAX_FULL_CONTEXTS inner nodes; otherwise only
    nodes with probability >= min_expected / n_samples are expanded: a smaller cell could only
    ever fall into the chi-square test's pooled bin (proofs.stats.chisquare.chisquare_gof), so the head
    loses no power to the pooling.
    """
    prompt = tuple(int(t) for t in prompt)
    if n < 1:
        raise LoopcertError(f"n must be >= 1, got {n}")
    inner = sum(oracle.V**k for k in range(n))
    full = inner <= MAX_FULL_CONTEXTS
    if full:
        min_prob = 0.0
    elif n_samples is None:
        raise LoopcertError("a head-of-law enumeration needs n_samples")
    else:
        min_prob = min_expected / n_samples
    nodes: dict[tuple[int, ...], np.ndarray] = {}
    cells: list[tuple[int, ...]] = []
    probs: list[float] = []
    frontier = [((), 1.0)]
    stops = sampling.stop_ids()
    for depth in range(n):
        nxt = []
        for prefix, p in frontier:
            at = (len(prompt),) if sampling.needs_context else ()  # an old-signature oracle serves the rest
            law = oracle.law(prompt + prefix, oracle.R, sampling, *at).numpy()
            nodes[prefix] = law
            for t in np.flatnonzero(law > 0):
                q = p * float(law[t])
                if depth == n - 1 or int(t) in stops:  # a stop ends the sequence: a shorter cell
                    if q > 0 and (full or q >= min_prob):
                        cells.append(prefix + (int(t),))
                        probs.append(q)
                elif full or q >= min_prob:
                    nxt.append((prefix + (int(t),), q))
        frontier = nxt
    probs_arr = np.asarray(probs, dtype=np.float64)
    remainder = 0.0 if full else max(0.0, 1.0 - float(probs_arr.sum()))
    if full:  # float64 rounding only: renormalise so the cells sum to exactly one
        probs_arr = probs_arr / probs_arr.sum()
    return ExactLaw(
        prompt,
        n,
        sampling,
        cells,
        probs_arr,
        remainder,
        full,
        min_prob,
        nodes,
        {c: i for i, c in enumerate(cells)},
    )
