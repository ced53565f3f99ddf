"""False-alarm rate of the sampling check (DESIGN.md section 6; nightly / --full).

A known-lossless decoder (`proofs.specref.SpecRef` with no bug) is put through the sampling
check K times on disjoint seed blocks, each test at level alpha. The chi-square test is
asymptotic, so its real level is measured here: the rejection count should be about
Binomial(K, alpha). The check fails when the count is implausibly high for that law
(one-sided binomial p-value below `plausibility`): the test would then flag correct decoders.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import stats

import refdec
from proofs.distribution import Case, case_laws, check_distribution
from proofs.oracle import Oracle
from proofs.progress import Progress
from proofs.result import CheckResult
from proofs.specref import SpecRef
from refdec.sampling import SamplingParams

MODEL = "tiny-ouro"
CASE = Case("T=1", SamplingParams(temperature=1.0), (1, 2, 3))


def check_false_alarm(replicates: int, n_samples: int, base_seed: int, alpha: float = 0.05,
                      plausibility: float = 1e-3, model=None, decoder=None,
                      progress: Progress | None = None) -> CheckResult:
    """`decoder` (default: the lossless SpecRef below) is a parameter so that tests can show the
    check failing on a wrong one."""
    model = refdec.load_model(MODEL, dtype=torch.float64) if model is None else model
    oracle = Oracle(model)
    label = "specref d1=1 d2=2 gate=on (lossless)" if decoder is None else type(decoder).__name__
    decoder = SpecRef(oracle, d1=1, d2=2) if decoder is None else decoder
    laws = case_laws(oracle, [CASE], n_samples)
    p_values = []
    for k in range(replicates):
        r = check_distribution("false_alarm", decoder, [CASE], laws, n_samples,
                               base_seed + k * n_samples, alpha)
        p_values.append(r.measured)
        if progress and (k + 1) % max(1, replicates // 10) == 0:
            progress(f"  false_alarm {k + 1}/{replicates}: {sum(p <= alpha for p in p_values)} rejected")
    rejections = sum(p <= alpha for p in p_values)
    rate = rejections / replicates
    tail = float(stats.binom.sf(rejections - 1, replicates, alpha))  # P(X >= rejections)
    ci = stats.binomtest(rejections, replicates).proportion_ci(0.95)
    details = {"model": model.cfg.name, "decoder": label, **CASE.describe(),
               "replicates": replicates, "n_samples": n_samples, "alpha": alpha,
               "rejections": rejections, "rate_ci95": [ci.low, ci.high], "binomial_tail_p": tail,
               "plausibility": plausibility,
               "seeds": [base_seed, base_seed + replicates * n_samples - 1],
               "p_value_deciles": np.quantile(p_values, np.linspace(0, 1, 11)).tolist()}
    return CheckResult("false_alarm", rate, alpha, tail >= plausibility, details)
