"""The statistics a sampling case is tested with: binned views of the exact law
(docs/design.md section 7).

A case (prompt, sampling, n tokens) is sampled once; every view tests those samples against a
partition of the outcomes whose bins are fixed from the exact law alone (never from the
samples), so each chi-square keeps its level:

- `token 1`: the first token's law;
- `token j | m_1..m_{j-1}`: token j's law given the most likely tokens before it, counted on the
  samples that start with that prefix (the position after a possible rejection: stale state
  shows here), tested when the prefix has probability >= COND_MIN;
- `n tokens`: the K most likely whole sequences (exact best-first search) + the pooled rest.

Stops (SamplingParams.stop_ids: a case names its EOS there): a sequence ends at its first stop
token, so a sample may be shorter than n. It is padded with STOPPED past its stop; a token view
at position j counts the samples that reached j with its prefix (a stop never sits inside the
prefix: the most likely path ends there, and the later positions are left untested, saying so);
the joint view's cells are the most likely sequences, stopped ones as they are.

Token bins: the most likely tokens one per bin (at most MAX_SINGLE, each p >= SINGLE_MIN), the
rest pooled into at most REMAINDER_GROUPS bins of about equal mass by probability rank. On a
65,536-token vocabulary no single tail token is ever seen 5 times, but mass moving between the
head and the tail (a temperature, top-k or top-p bug) stays visible, and few bins keep the
test's power (the non-central chi-square needs more lambda per extra degree of freedom).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from proofs.stats.exact_laws import Oracle, well_ended
from refdec.sampling import SamplingParams
from refdec.validate import is_int

MAX_SINGLE = 6  # token bins holding one token
SINGLE_MIN = 0.01  # ... each of probability at least this
REMAINDER_GROUPS = 3  # the other tokens, pooled by probability rank into this many bins
GROUP_MIN = 0.01  # a remainder group lighter than this joins its neighbour
COND_MIN = 0.3  # conditional views only when the prefix has at least this probability (N <~ 3.5x)
STOPPED = -1  # a sample's positions past its stop token (sample arrays are rectangular)
JOINT_HEAD = 6  # joint view: this many most likely sequences, each p >= SINGLE_MIN
MAX_EXPANSIONS = 64  # best-first search budget (oracle calls) of the joint view


@dataclass(frozen=True)
class Case:
    name: str
    sampling: SamplingParams
    prompt: tuple[int, ...]
    n: int = 3  # n >= 3: the third token follows positions where a rejection may have happened

    def describe(self) -> dict:
        return {"case": self.name, **self.sampling.describe(), "prompt": list(self.prompt), "tokens": self.n}


@dataclass(frozen=True)
class View:
    """One statistic: a partition of a case's outcomes into bins with exact probabilities."""

    name: str
    probs: np.ndarray  # (K,) bin probabilities, conditional on `prefix`
    labels: tuple[str, ...]  # what each bin holds
    weight: float  # P(prefix): the expected share of the samples this view counts
    law: str  # what was enumerated, in words
    position: int | None = None  # token views: the 0-based position tested
    prefix: tuple[int, ...] = ()  # token views: the condition
    token_bins: np.ndarray | None = field(default=None, repr=False)  # (V,) token -> bin, -1: p = 0
    seq_bins: dict | None = field(default=None, repr=False)  # joint view: sequence -> bin
    rest: int | None = None  # joint view: the bin of every other sequence (None: no remainder)

    @property
    def bins(self) -> int:
        return int(np.count_nonzero(self.probs > 0))

    def sample_bins(self, samples: np.ndarray) -> np.ndarray:
        """(N, n) samples -> (M,) the bin of each sample this view counts (a whole-sequence view:
        every sample; a token view: those with its prefix), -1 for one outside this law's support."""
        if self.seq_bins is not None:
            idx = [
                self.seq_bins.get(tuple(t for t in row if t != STOPPED), self.rest)
                for row in samples.tolist()
            ]
            return np.asarray([-1 if i is None else i for i in idx], dtype=np.int64)
        j = self.position
        mask = (
            np.all(samples[:, :j] == np.asarray(self.prefix, dtype=samples.dtype), axis=1)
            if j
            else np.ones(len(samples), dtype=bool)
        )
        return self.token_bins[samples[mask, j]]

    def bin_counts(self, samples: np.ndarray) -> np.ndarray:
        """(N, n) valid samples -> (K,) counts of the samples this view counts."""
        k = self.probs.size
        b = self.sample_bins(samples)
        return np.bincount(b[b >= 0], minlength=k)[:k]

    def open_counts(self, samples: np.ndarray) -> np.ndarray:
        """(N, n) well-formed samples -> (K + 1,) counts of the samples this view counts, the last
        cell holding those outside this law's support (a token of probability 0 here, or a whole
        sequence outside a fully enumerated head): the engine-relative check compares two
        engines' samples, either of which may leave refdec's support (proofs/checks/relative.py)."""
        k = self.probs.size
        b = self.sample_bins(samples)
        return np.bincount(np.where(b >= 0, b, k), minlength=k + 1)[: k + 1]

    def binned(self, seq_law: dict) -> np.ndarray:
        """Another law of the case's sequences ({sequence: probability}) over this view's bins,
        conditional on the prefix (the law of what this view sees); mass outside the bins, i.e.
        on tokens of probability 0 here, goes to one extra last cell."""
        k = self.probs.size
        out = np.zeros(k + 1)
        for s, p in seq_law.items():
            if self.seq_bins is not None:
                b = self.seq_bins.get(tuple(s), self.rest)
            elif len(s) > self.position and tuple(s[: self.position]) == self.prefix:
                b = int(self.token_bins[s[self.position]])
            else:
                continue
            out[k if b is None or b < 0 else b] += p
        total = out.sum()
        return out / total if total > 0 else out

    def binned_tv(self, seq_law: dict) -> float:
        """TV between refdec's law and another one, as this view sees them."""
        return 0.5 * float(np.abs(self.binned(seq_law) - np.append(self.probs, 0.0)).sum())

    def describe(self) -> dict:
        return {
            "view": self.name,
            "bins": self.bins,
            "bin_probs": self.probs.tolist(),
            "bin_labels": list(self.labels),
            "weight": self.weight,
            "law": self.law,
        }


def token_partition(law: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """(V,) law -> ((V,) token -> bin or -1 where p = 0, (K,) bin probabilities, labels)."""
    live = np.flatnonzero(law > 0)
    order = live[np.argsort(-law[live], kind="stable")]  # ties: lower token id first
    singles = [int(t) for t in order[:MAX_SINGLE] if law[t] >= SINGLE_MIN]
    rest = order[len(singles) :]
    groups: list[np.ndarray] = []
    if rest.size:
        mass = law[rest]
        before = (np.cumsum(mass) - mass) / float(mass.sum())  # equal-mass quantile groups by rank
        g = np.minimum((before * REMAINDER_GROUPS).astype(int), REMAINDER_GROUPS - 1)
        for i in range(REMAINDER_GROUPS):
            grp = rest[g == i]
            if not grp.size:
                continue
            if groups and (float(law[groups[-1]].sum()) < GROUP_MIN or float(law[grp].sum()) < GROUP_MIN):
                groups[-1] = np.concatenate([groups[-1], grp])  # a light group joins its neighbour
            else:
                groups.append(grp)
    parts = [(np.array([t]), f"token {t}") for t in singles]
    rank = len(singles) + 1
    for grp in groups:
        parts.append((grp, f"ranks {rank}..{rank + grp.size - 1}" if grp.size > 1 else f"rank {rank}"))
        rank += grp.size
    while len(parts) > 1 and float(law[parts[-1][0]].sum()) < GROUP_MIN:  # E >= 5 needs mass
        (a, la), (b, lb) = parts[-2], parts.pop()
        parts[-1] = (np.concatenate([a, b]), f"{la} + {lb}")
    bins = np.full(law.size, -1, dtype=np.int64)
    for i, (cells, _) in enumerate(parts):
        bins[cells] = i
    probs = [float(law[cells].sum()) for cells, _ in parts]
    labels = [lb for _, lb in parts]
    return bins, np.asarray(probs), tuple(labels)


def law_at(oracle: Oracle, case: Case, prefix: tuple[int, ...], sampling: SamplingParams):
    """(V,) refdec's law at depth R after case.prompt + prefix under `sampling` (the prompt's
    length passed only where the law follows the prefix: an oracle of the old signature serves
    the rest)."""
    if not sampling.needs_context:
        return oracle.law(case.prompt + prefix, oracle.R, sampling)
    return oracle.law(case.prompt + prefix, oracle.R, sampling, len(case.prompt))


def mode_path(oracle: Oracle, case: Case) -> tuple[list[int], list[float], dict]:
    """The most likely token at each position given the most likely before it (ties: lower id),
    the probability of each prefix, and the law at each prefix node."""
    path, probs, nodes, p = [], [], {}, 1.0
    stops = case.sampling.stop_ids()
    for _ in range(case.n):
        law = law_at(oracle, case, tuple(path), case.sampling).numpy()
        nodes[tuple(path)] = law
        probs.append(p)
        t = int(np.argmax(law))
        p *= float(law[t])
        path.append(t)
        if t in stops:  # the most likely sequence ends here
            break
    return path, probs, nodes


def joint_head(oracle: Oracle, case: Case, nodes: dict) -> tuple[list[tuple[int, ...]], list[float], int]:
    """The most likely whole sequences in order (exact: best-first search over the prefix tree,
    a prefix's probability bounds its extensions), at most JOINT_HEAD of p >= SINGLE_MIN, within
    MAX_EXPANSIONS oracle calls. Returns (sequences, probabilities, prefixes expanded)."""
    heap: list[tuple[float, tuple[int, ...]]] = [(-1.0, ())]
    found, probs, expanded = [], [], 0
    stops = case.sampling.stop_ids()
    while heap and len(found) < JOINT_HEAD:
        negp, prefix = heapq.heappop(heap)
        if -negp < SINGLE_MIN:
            break
        if len(prefix) == case.n or (prefix and prefix[-1] in stops):
            found.append(prefix)
            probs.append(-negp)
            continue
        if prefix not in nodes:
            if expanded >= MAX_EXPANSIONS:
                break
            nodes[prefix] = law_at(oracle, case, prefix, case.sampling).numpy()
        expanded += 1
        law = nodes[prefix]
        for t in np.flatnonzero(law * -negp >= SINGLE_MIN):
            heapq.heappush(heap, (negp * float(law[t]), prefix + (int(t),)))
    return found, probs, expanded


def malformed(sample: Sequence, n: int, V: int, stops: frozenset[int] = frozenset()) -> str | None:
    """Why `sample` breaks the protocol of a case of n tokens over a vocabulary of V: a
    non-integer id, a wrong length (more than n, or fewer not ending at a stop token of `stops`),
    a negative id, an id outside the vocabulary; None when it keeps it. Such a sample is named for
    what it is, never as "probability 0". (Tokens after a stop token keep the protocol: the law
    gives them probability 0, CaseLaw.impossible.)"""
    bad = next((t for t in sample if not is_int(t)), None)
    if bad is not None:
        return f"a non-integer id {bad!r}"
    if len(sample) > n or (len(sample) < n and (not sample or sample[-1] not in stops)):
        ending = " (or fewer ending at a stop token)" if stops else ""
        return f"{len(sample)} tokens, the case asks for {n}{ending}"
    low = min(sample, default=0)
    if low < 0:
        return f"a negative id {low}"
    high = max(sample, default=0)
    if high >= V:
        return f"id {high} outside the vocabulary (V={V})"
    return None


@dataclass
class CaseLaw:
    """Every view of one case, and the laws at the prefixes enumerated (impossible tokens)."""

    case: Case
    views: list[View]
    not_tested: list[str]  # views the rules left out, and why
    nodes: dict[tuple[int, ...], np.ndarray] = field(repr=False)
    V: int
    chosen: str = ""  # a plan path's choice among its options (proofs.run.cases.choose_case)
    # the binned TV its views are judged at when the plan's target needs more samples than the
    # plan's first-token cap (proofs.checks.distribution.capped); None: the plan's target
    target_tv: float | None = None

    def _sorted_out(self, samples: Sequence[Sequence[int]], bad) -> tuple[np.ndarray, int]:
        """The samples that keep the protocol (n tokens, or fewer ending at their first stop token;
        ids in the vocabulary: `malformed`) and that `bad` (a test of one such sample) does not
        flag, as an [N, n] array padded with STOPPED; and how many were left out."""
        n, good, out = self.case.n, [], 0
        stops = self.case.sampling.stop_ids()
        for s in samples:
            s = tuple(s)
            if malformed(s, n, self.V, stops) is not None or not well_ended(s, n, stops) or bad(s):
                out += 1
            else:
                good.append(s + (STOPPED,) * (n - len(s)))
        return np.asarray(good, dtype=np.int64).reshape(len(good), n), out

    def impossible(self, s: tuple[int, ...]) -> bool:
        """A well-formed sample the law gives probability 0: tokens past a stop token, or a token of
        probability 0 at a prefix the law enumerated."""
        if not well_ended(s, self.case.n, self.case.sampling.stop_ids()):
            return True
        return any(s[:j] in self.nodes and self.nodes[s[:j]][s[j]] <= 0 for j in range(len(s)))

    def fails(self, sample: Sequence) -> bool:
        """The sample alone fails its case: malformed, or impossible under the law."""
        stops = self.case.sampling.stop_ids()
        return malformed(sample, self.case.n, self.V, stops) is not None or self.impossible(tuple(sample))

    def tally(self, samples: Sequence[Sequence[int]]) -> dict:
        """Counts of every view, and the samples that are impossible under the law (tokens past a
        stop token, or a token of probability 0 at a prefix the law enumerated). Malformed samples
        (`malformed`) are counted in neither: the sampling check names them as such
        (proofs/checks/distribution.py)."""
        arr, _ = self._sorted_out(samples, lambda s: False)
        n, V, stops = self.case.n, self.V, self.case.sampling.stop_ids()
        impossible = sum(malformed(s, n, V, stops) is None and self.impossible(tuple(s)) for s in samples)
        return {
            "samples": len(samples),
            "impossible": impossible,
            "counts": [v.bin_counts(arr).tolist() for v in self.views],
        }

    def open_tally(self, samples: Sequence[Sequence[int]]) -> dict:
        """Counts of every view with its outside cell (View.open_counts), and the samples that break
        the protocol (a wrong length, an id outside the vocabulary): the engine-relative check's
        tally, which judges no sample impossible (the engine's law is not refdec's to judge)."""
        arr, n_bad = self._sorted_out(samples, lambda s: False)
        return {
            "samples": len(samples),
            "malformed": n_bad,
            "counts": [v.open_counts(arr).tolist() for v in self.views],
        }

    def describe(self) -> str:
        return "; ".join(f"{v.name}: {v.law}" for v in self.views)


def case_law(oracle: Oracle, case: Case) -> CaseLaw:
    """The views of one case, from refdec's exact law at depth R (float64)."""
    path, prefix_probs, nodes = mode_path(oracle, case)
    views, not_tested = [], []
    for j in range(case.n):
        prefix = tuple(path[:j])
        name = f"token {j + 1}" + (f" | {', '.join(map(str, prefix))}" if j else "")
        if j >= len(path):  # the most likely path stopped before position j
            not_tested.append(
                f"{name[: name.index(' |')] if j else name}: the most likely sequence "
                f"ends at stop token {path[-1]} at position {len(path)}"
            )
            continue
        w = prefix_probs[j]
        if w < COND_MIN:
            not_tested.append(f"{name}: the prefix has probability {w:.3g} < {COND_MIN:.3g}")
            continue
        bins, probs, labels = token_partition(nodes[prefix])
        if probs.size < 2:
            live = int(np.count_nonzero(nodes[prefix] > 0))
            if live == 1:  # any other token is impossible, which tally() checks outright
                not_tested.append(f"{name}: one token has all the mass (any other fails as impossible)")
            else:  # the light tokens pool with the top one (GROUP_MIN): one bin, nothing to test
                top = float(nodes[prefix].max())
                not_tested.append(
                    f"{name}: one bin: the most likely token has p={top:.6g}, the other {live - 1} "
                    f"tokens of positive probability ({1 - top:.3g} together) pool with it"
                )
            continue
        law = (
            f"law of token {j + 1}"
            + (f" given the most likely prefix (p={w:.3g})" if j else "")
            + f" over {np.count_nonzero(nodes[prefix] > 0)} tokens of positive probability: "
            f"{sum(lb.startswith('token ') and '+' not in lb for lb in labels)} single-token bin(s) + "
            f"{sum(lb.startswith('rank') or '+' in lb for lb in labels)} pooled bin(s) by rank"
        )
        views.append(View(name, probs, labels, w, law, position=j, prefix=prefix, token_bins=bins))
    head, probs, expanded = joint_head(oracle, case, nodes)
    rest = max(0.0, 1.0 - sum(probs))
    full = rest <= 1e-12
    # a light remainder joins the lightest head sequence's bin, as a light token group joins its
    # neighbour (GROUP_MIN): a bin of mass 1e-6 would ask N >= MIN_EXPECTED / 1e-6 (millions) for
    # a shift the joined bin shows as well; not when that leaves one bin (then the remainder is the
    # view's only test, at N >= MIN_EXPECTED / rest)
    joined = not full and rest < GROUP_MIN and len(head) >= 2
    bins = len(head) + (0 if full or joined else 1)
    if head and bins >= 2:
        labels = [" ".join(map(str, s)) for s in head]
        bin_probs = list(probs)
        if joined:
            bin_probs[-1] += rest
            labels[-1] += " + every other sequence"
        elif not full:
            bin_probs.append(rest)
            labels.append("every other sequence")
        law = (
            f"the {len(head)} most likely sequences of {case.n} tokens (each p >= {SINGLE_MIN:g}; "
            f"exact best-first search, {expanded} prefixes expanded)"
            + ("" if full else f" + the other sequences pooled (mass {rest:.4g})")
            + (f", with the last (mass < {GROUP_MIN:g})" if joined else "")
        )
        views.append(
            View(
                f"{case.n} tokens",
                np.asarray(bin_probs),
                tuple(labels),
                1.0,
                law,
                seq_bins={s: i for i, s in enumerate(head)},
                rest=None if full else len(head) - 1 if joined else len(head),
            )
        )
    elif head:
        not_tested.append(
            f"{case.n} tokens: one bin: the sequence {' '.join(map(str, head[0]))} has p={probs[0]:.6g}, "
            f"the others ({rest:.3g} together) pool with it"
        )
    else:
        not_tested.append(f"{case.n} tokens: no sequence has probability >= {SINGLE_MIN:g}")
    return CaseLaw(case, views, not_tested, nodes, oracle.V)
