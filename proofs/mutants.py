"""Mutation power (DESIGN.md section 6, check 4): wrong decoders must be rejected, lossless
but unusual ones must not.

The mutants are `proofs.specref.SpecRef` with one bug switched on (independent of fastdec's
engine), plus fastdec's lossy `adaptive-verify`. Each is run through the same greedy check
(proofs/greedy.py) and the same sampling check (proofs/distribution.py) as a candidate, on
the setting where its bug shows: a mutant the checks cannot tell from the reference would
measure nothing. Each mutant's exact TV shift is computed by enumeration
(`SpecRef.sequence_law`), both over whole sequences and over the bins the test sees, and set
against the test's detectable TV.

The controls change efficiency, never the law (DESIGN.md section 4: the gate is free; the
draft may use any law as long as it is scored with the law it was drawn from); each is run on
every sampling case, and its exact TV shift must be 0 up to float64 rounding. The check fails
if any mutant survives or any control is flagged.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

import refdec
from proofs.distribution import Case, binned_tv, case_laws, check_distribution
from proofs.greedy import check_greedy
from proofs.oracle import REMAINDER, ExactLaw, Oracle
from proofs.progress import Progress
from proofs.result import CheckResult
from proofs.specref import Bugs, SpecRef
from refdec.sampling import SamplingParams

MODEL = "tiny-ouro"
WHY_MODEL = ("R=4, vocab 13: laws are enumerated exactly, sampling the reference decoder costs about "
             "a millisecond, and every bug below moves the law well past the test's detectable TV")
PROMPT = (1, 2, 3)
CASES = (
    Case("T=0.5", SamplingParams(temperature=0.5), PROMPT),
    Case("top-k=2", SamplingParams(temperature=1.0, top_k=2), PROMPT),
    Case("top-p=0.5", SamplingParams(temperature=1.0, top_p=0.5), PROMPT),
)
GREEDY_PROMPTS = ((1, 2, 3), (4, 7, 11, 2), (0, 5), (12, 3, 8, 6, 9), (2,), (9, 9, 1))
GREEDY_TOKENS = 12
CONTROL_TV_TOL = 1e-9  # a control's exact TV shift is float64 rounding only


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str  # what is wrong (or, for a control, what is unusual), in words
    specref: dict = field(default_factory=dict)  # SpecRef kwargs; empty for a fastdec entry
    fastdec: dict | None = None  # fastdec.Decoder kwargs
    case: str | None = None  # sampling case the bug shows in; None: every case (controls)
    control: bool = False  # lossless: must NOT be rejected

    def build(self, oracle: Oracle):
        if self.fastdec is not None:
            from fastdec import Decoder

            return Decoder(oracle.model, **self.fastdec)
        return SpecRef(oracle, **self.specref)


LIBRARY = (
    Mutant("always-accept", "u = 0: the first proposal is accepted whenever p_R(x1) > 0",
           {"d1": 1, "bugs": Bugs(always_accept=True)}, case="top-p=0.5"),
    Mutant("resample-target", "after a rejection the token is drawn from p_R, not p_R (-) q1",
           {"d1": 3, "bugs": Bugs(resample_target=True)}, case="top-p=0.5"),
    Mutant("target-no-temperature", "temperature applied to the draft but not to p_R",
           {"d1": 1, "bugs": Bugs(target_missing="temperature")}, case="T=0.5"),
    Mutant("target-no-top-k", "top-k applied to the draft but not to p_R",
           {"d1": 1, "bugs": Bugs(target_missing="top_k")}, case="top-k=2"),
    Mutant("target-no-top-p", "top-p applied to the draft but not to p_R",
           {"d1": 1, "bugs": Bugs(target_missing="top_p")}, case="top-p=0.5"),
    Mutant("scored-other-depth", "x1 drawn from p_2 but scored (ratio and residual) with p_3",
           {"d1": 2, "bugs": Bugs(score_depth=3)}, case="top-k=2"),
    Mutant("second-wrong-base", "x2 drawn from p_d2 (-) p_d1 but scored with p_d2",
           {"d1": 1, "d2": 2, "gate": "on", "bugs": Bugs(second_scored_as_p_d2=True)}, case="top-p=0.5"),
    Mutant("unnormalised-residual", "x2's ratio uses [p_R - q1]_+ without normalising it",
           {"d1": 2, "d2": 3, "gate": "off", "bugs": Bugs(unnormalised_residual=True)}, case="T=0.5"),
    Mutant("stale-kv", "after rejecting x1 the context keeps x1 (stale KV after rollback)",
           {"d1": 1, "bugs": Bugs(stale_kv=True)}, case="top-k=2"),
    Mutant("greedy-near-miss", "greedy accepts x1 whose p_R logit is within 0.25 of the max",
           {"d1": 1, "bugs": Bugs(greedy_near_miss=0.25)}, case=None),
    Mutant("fastdec adaptive-verify", "lossy by design: verifies at depth 2 < R, escalates on disagreement",
           fastdec={"strategy": "adaptive-verify", "draft_depth": 1, "rewind_depth": 2}, case="top-k=2"),
    # -- controls: lossless, must pass ------------------------------------------------------------
    Mutant("control: gate inverted", "second proposal exactly when LoopSpec's gate is closed",
           {"d1": 1, "d2": 2, "gate": "inverted"}, control=True),
    Mutant("control: gate off", "second proposal whenever q2 has mass",
           {"d1": 1, "d2": 3, "gate": "off"}, control=True),
    Mutant("control: unfiltered draft", "draft without top-k / top-p, scored with that same law",
           {"d1": 1, "draft_filter": False}, control=True),
    Mutant("control: other depths", "d1 = 3 = R - 1, no second proposal",
           {"d1": 3}, control=True),
)


def exact_shift(decoder, case: Case, law: ExactLaw, n_samples: int) -> dict:
    """TV between the mutant's exact law (enumerated) and refdec's: whole sequences and binned."""
    if not isinstance(decoder, SpecRef):
        return {"tv": None, "binned_tv": None, "how": "black box: not enumerable"}
    probs = law.cell_probs()
    other = np.zeros_like(probs)
    full_tv = 0.0
    seen = set()
    for seq, p in decoder.sequence_law(case.prompt, case.n, case.sampling).items():
        k = law.classify(seq)
        other[k if k >= 0 else (len(law.cells) if k == REMAINDER else len(law.cells) + 1)] += p
        ref = float(law.probs[k]) if k >= 0 else 0.0
        full_tv += abs(p - ref)
        seen.add(k)
    full_tv += sum(float(q) for i, q in enumerate(law.probs) if i not in seen)
    return {"tv": 0.5 * full_tv, "binned_tv": binned_tv(law, other, n_samples), "how": "enumerated"}


def check_mutants(n_samples: int, base_seed: int, alpha: float, library: Sequence[Mutant] = LIBRARY,
                  model=None, progress: Progress | None = None,
                  blackbox_samples: int | None = None) -> CheckResult:
    """measured = surviving mutants + flagged controls (+ controls with a nonzero exact TV); bound 0.

    `blackbox_samples` (default n_samples) is N for the fastdec entries, which cost far more per
    sample than the reference decoder and sit far off the law."""
    model = refdec.load_model(MODEL, dtype=torch.float64) if model is None else model
    oracle = Oracle(model)
    laws = dict(zip((c.name for c in CASES), case_laws(oracle, CASES, n_samples), strict=True))
    cases = {c.name: c for c in CASES}
    rows, references = [], {}
    for m in library:
        t0 = time.perf_counter()
        dec = m.build(oracle)
        greedy = check_greedy(f"greedy[{m.name}]", [(model.cfg.name, m.name, dec, oracle, torch.float64)],
                              lambda _o: GREEDY_PROMPTS, GREEDY_TOKENS, references=references)
        names = [c.name for c in CASES] if m.case is None and m.control else ([m.case] if m.case else [])
        dist = None
        shifts = []
        n = n_samples if m.fastdec is None or blackbox_samples is None else blackbox_samples
        if names:
            dist = check_distribution(f"sampling[{m.name}]", dec, [cases[c] for c in names],
                                      [laws[c] for c in names], n, base_seed, alpha)
            shifts = [exact_shift(dec, cases[c], laws[c], n) for c in names]
        rejected_by = [k for k, r in (("greedy", greedy), ("sampling", dist))
                       if r is not None and not r.passed]
        killed = bool(rejected_by)
        tvs = [s["tv"] for s in shifts if s["tv"] is not None]
        row = {
            "name": m.name, "bug": m.bug, "control": m.control,
            "settings": _settings(m),
            "cases": names, "rejected_by": rejected_by, "rejected": killed,
            "ok": (not killed and all(t <= CONTROL_TV_TOL for t in tvs)) if m.control else killed,
            "greedy_real_bugs": greedy.measured,
            "greedy_divergences": len(greedy.details["divergences"]),
            "p_value": None if dist is None else dist.measured,
            "alpha_case": None if dist is None else dist.bound,
            "tv": max(tvs) if tvs else None,
            "binned_tv": max((s["binned_tv"] for s in shifts if s["binned_tv"] is not None), default=None),
            "empirical_binned_tv": None if dist is None
            else max(r["empirical_tv"] for r in dist.details["cases"]),
            "detectable_tv": None if dist is None else dist.details["detectable_tv"],
            "n_samples": n if names else 0, "seconds": time.perf_counter() - t0,
        }
        rows.append(row)
        if progress:
            verdict = ("rejected by " + " + ".join(rejected_by)) if killed else "not rejected"
            progress(f"  mutation {m.name}: {verdict} ({'ok' if row['ok'] else 'WRONG'})")
    bad = [r["name"] for r in rows if not r["ok"]]
    survivors = sum(1 for r in rows if not r["control"] and not r["rejected"])
    flagged = sum(1 for r in rows if r["control"] and not r["ok"])
    details = {"model": model.cfg.name, "why_this_model": WHY_MODEL, "rows": rows, "survivors": survivors,
               "controls_flagged": flagged,
               "n_samples": n_samples, "alpha": alpha, "seeds": [base_seed, base_seed + n_samples - 1],
               "greedy_prompts": [list(p) for p in GREEDY_PROMPTS], "greedy_tokens": GREEDY_TOKENS,
               "cases": [c.describe() for c in CASES],
               "laws": {n: law.describe() for n, law in laws.items()}, "wrong": bad}
    return CheckResult("mutation", len(bad), 0, not bad, details)


def _settings(m: Mutant) -> str:
    if m.fastdec is not None:
        return "fastdec " + ", ".join(f"{k}={v}" for k, v in m.fastdec.items())
    parts = [f"{k}={v}" for k, v in m.specref.items() if k != "bugs"]
    bugs = m.specref.get("bugs")
    if bugs is not None and not bugs.lossless:
        parts += [f"{k}={v}" for k, v in vars(bugs).items() if v not in (None, False, 0.0)]
    return "specref " + ", ".join(parts)
