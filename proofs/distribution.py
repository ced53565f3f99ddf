"""Distributional equality under sampling (DESIGN.md section 6, check 3).

For each case (prompt, sampling params, n): the exact law of the first n generated tokens is
enumerated from refdec (proofs/oracle.py), the candidate is sampled N times with seeds
base .. base+N-1, and a chi-square goodness-of-fit test with bins chosen from the expected
counts only (proofs.stats.chisquare_gof) gives a p-value. Holm's procedure across the cases
holds the family-wise level at alpha. Each case states its power: the smallest binned TV
deviation it detects with probability >= 0.99 at its strictest Holm level alpha/m.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from proofs.oracle import ExactLaw, Oracle, exact_law
from proofs.progress import Progress
from proofs.protocol import Decoder, run_generate, tokens_of
from proofs.result import CheckResult
from proofs.stats import chisquare_gof, detectable_tv, holm
from refdec.sampling import SamplingParams

POWER = 0.99
BATCH = 256  # seeds per generate_batch call (at most the decoder's max_batch)


@dataclass(frozen=True)
class Case:
    name: str
    sampling: SamplingParams
    prompt: tuple[int, ...]
    n: int = 3  # n >= 3: the third token follows positions where a rejection may have happened

    def describe(self) -> dict:
        s = self.sampling
        return {"case": self.name, "temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p,
                "prompt": list(self.prompt), "tokens": self.n}


def case_laws(oracle: Oracle, cases: Sequence[Case], n_samples: int) -> list[ExactLaw]:
    return [exact_law(oracle, c.prompt, c.n, c.sampling, n_samples=n_samples) for c in cases]


def sample_case(decoder: Decoder, case: Case, law: ExactLaw, n_samples: int,
                base_seed: int) -> tuple[np.ndarray, str | None]:
    """Counts over law.cell_probs()'s cells; a decoder error stops sampling and is returned.

    A decoder with `generate_batch(prompts, max_new_tokens, sampling, seeds)` is sampled in
    chunks of BATCH seeds (an HTTP decoder keeps that many requests in flight), else one call
    per seed; either way sample i has seed base_seed + i."""
    samples: list[list[int]] = []
    batch = getattr(decoder, "generate_batch", None)
    step = min(BATCH, getattr(decoder, "max_batch", BATCH)) if callable(batch) else 1
    for lo in range(0, n_samples, step):
        seeds = list(range(base_seed + lo, base_seed + min(lo + step, n_samples)))
        try:
            if step == 1:
                samples.append(run_generate(decoder, case.prompt, case.n, case.sampling, seeds[0]))
            else:
                out = batch([list(case.prompt)] * len(seeds), case.n, case.sampling, seeds)
                samples += [tokens_of(r) for r in out]
        except Exception as e:  # noqa: BLE001 - any failure of the candidate is a finding
            return law.counts(samples), f"seeds {seeds[0]}..{seeds[-1]}: {type(e).__name__}: {e}"
    return law.counts(samples), None


def gof_case(counts: np.ndarray, law: ExactLaw, alpha_case: float, error: str | None) -> dict:
    """Chi-square GOF of one case's counts (p-value 0 on a decoder error or an impossible draw)."""
    probs = law.cell_probs()
    n = int(counts.sum())
    if n == 0:
        return {"stat": math.inf, "dof": 0, "p_value": 0.0, "samples": 0, "impossible": 0, "error": error,
                "empirical_tv": math.nan,
                "detectable_tv": math.inf, "bins": 0, "worst_bin": None}
    g = chisquare_gof(counts, probs)
    p_value = 0.0 if error else g["p_value"]
    obs, exp = np.asarray(g["observed"], float), np.asarray(g["expected"], float)
    # TV of the observed frequencies from the law over the test's bins (+ the impossible cell):
    # an upward-biased estimate of the candidate's binned TV shift, for the report.
    emp = 0.5 * (float(np.abs(obs - exp).sum()) + int(counts[-1])) / n
    worst = None
    if obs.size:
        z = (obs - exp) / np.sqrt(exp)
        w = int(np.argmax(np.abs(z)))
        worst = {"observed": int(obs[w]), "expected": float(exp[w]), "z": float(z[w]),
                 "cells": len(g["bins"][w])}
    return {"stat": g["stat"], "dof": g["dof"], "p_value": p_value, "samples": n,
            "impossible": int(counts[-1]), "error": error, "bins": len(g["bins"]), "empirical_tv": emp,
            "detectable_tv": detectable_tv(n, g["bin_probs"], alpha_case, POWER), "worst_bin": worst}


def binning(law: ExactLaw, n_samples: int) -> list[list[int]]:
    """The bins `chisquare_gof` forms for N samples of `law` (they depend on N p only)."""
    probs = law.cell_probs()
    counts = np.zeros(probs.size, dtype=np.int64)
    counts[int(np.argmax(probs))] = n_samples
    return chisquare_gof(counts, probs)["bins"]


def binned_tv(law: ExactLaw, other: np.ndarray, n_samples: int) -> float:
    """TV between `law` and another law over the same cells, as the N-sample test bins them.

    The impossible cell is a bin of its own (any mass there is detected outright)."""
    probs = law.cell_probs()
    bins = binning(law, n_samples)
    a = np.array([probs[b].sum() for b in bins] + [probs[-1]])
    b = np.array([other[b].sum() for b in bins] + [other[-1]])
    return 0.5 * float(np.abs(a - b).sum())


def check_distribution(name: str, decoder: Decoder, cases: Sequence[Case], laws: Sequence[ExactLaw],
                       n_samples: int, base_seed: int, alpha: float,
                       progress: Progress | None = None) -> CheckResult:
    """measured = the smallest p-value, bound = alpha/m (Holm rejects something iff min p <= alpha/m)."""
    m = len(cases)
    alpha_case = alpha / m
    rows = []
    for case, law in zip(cases, laws, strict=True):
        t0 = time.perf_counter()
        counts, error = sample_case(decoder, case, law, n_samples, base_seed)
        row = {**case.describe(), **gof_case(counts, law, alpha_case, error),
               "law": law.describe(), "seeds": [base_seed, base_seed + n_samples - 1],
               "seconds": time.perf_counter() - t0}
        rows.append(row)
        if progress:
            progress(f"  {name} {case.name}: p={row['p_value']:.3g} "
                     f"(detects TV >= {row['detectable_tv']:.3f}) {row['seconds']:.1f}s")
    rejected = holm([r["p_value"] for r in rows], alpha)
    for r, rej in zip(rows, rejected, strict=True):
        r["holm_rejected"] = rej
    worst_tv = max(r["detectable_tv"] for r in rows)
    power = (f"each case detects a binned TV deviation >= {worst_tv:.3g} with probability >= {POWER:g} "
             f"at alpha {alpha_case:.3g} (= {alpha:g}/{m} Holm), N={n_samples} per case; "
             "non-central chi-square")
    return CheckResult(name, min(r["p_value"] for r in rows), alpha_case, not any(rejected),
                       {"alpha": alpha, "n_samples": n_samples, "cases": rows,
                        "detectable_tv": worst_tv, "power_level": POWER}, power)
