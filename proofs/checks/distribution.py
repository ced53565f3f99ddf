"""Distributional equality under sampling, planned by detectable TV (docs/design.md section 6, check 3).

For each case (prompt, sampling params, n) the views of refdec's exact law (proofs/stats/views.py)
fix the bins; the candidate is sampled N times with seeds base .. base+N-1 (proofs/decoders/draw.py)
and each view's counts get a chi-square goodness-of-fit p-value. Holm's procedure across every
view of every case holds the family-wise level at alpha.

Power is planned, not hoped for: the plan names the binned TV each view must detect with
probability >= `power` at its strictest Holm level alpha/m, and N per case is the
`required_samples` of its hungriest view (a conditional view counts only the samples on its
prefix, so it needs N / P(prefix), with a margin for the binomial count). A view that ends
below its target FAILS as "no power" (fewer than 2 bins, a decoder error), stating the TV it
reached and the N it would need: a check that cannot detect the deviations it names has not
passed. A case the time budget cut short of N whose samples reject nothing is INCOMPLETE instead
(CheckResult.incomplete: N reached against N planned, the TV it detects there against the
target): the budget guards against a runaway run, and the machine's load is no evidence against
the decoder. Samples that already reject (Holm) fail the check, cut short or not.

A plan may cap N per case (CertifyPlan.case_samples_cap, `capped`): a case whose target needs
more is judged at the smallest binned TV it reaches within the cap (CaseLaw.target_tv, stated in
each view's row). N grows with the vocabulary; the per-position test under the same case
(proofs/checks/positions.py) judges every token of long samples, whatever the vocabulary, and
carries the temperature-drift claim there.

Requests that raised (skipped by proofs/decoders/draw.py, below its cap) fail the case, and its
completed samples are judged too: a view's rejection counts only past its bias bound, the TV by which
dropping the failed requests can move the law it sees (proofs.details.RaisedRequests derives it).

A case the engine refused (proofs.decoders.protocol.Refused) is not sampled. When it sets the
engines' other parameters (refdec.sampling.ENGINE_FIELDS), which a decoder may decline, that is
named and neither passes nor fails; a refusal of a case that sets only the core ones (temperature,
top_k, top_p) fails the check, naming them: a decoder that cannot sample them has not passed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from proofs.decoders.draw import draw
from proofs.decoders.protocol import Decoder
from proofs.details import (
    CaseSpec,
    RaisedRequests,
    RelativeDetails,
    SamplingCase,
    SamplingDetails,
    SamplingView,
)
from proofs.result import CheckResult
from proofs.stats.chisquare import chisquare_gof, detectable_tv, holm, required_samples
from proofs.stats.views import Case, CaseLaw, View, case_law, malformed
from refdec.progress import Progress
from refdec.sampling import ENGINE_FIELDS
from refdec.validate import check_number

__all__ = [
    "Case",
    "Target",
    "capped",
    "case_law",
    "case_target",
    "check_distribution",
    "evaluate",
    "planned_samples",
    "relative_samples",
]

POWER = 0.99
MIN_EXPECTED = 5.0  # chisquare_gof pools bins expected fewer times
COUNT_MARGIN_SIGMAS = 3.5  # a conditional view's count falls short of its need with p < 3e-4


@dataclass(frozen=True)
class Target:
    """What every sampling view must detect: binned TV >= tv with probability >= power, the
    family of views of one setting held at level alpha (Holm)."""

    tv: float
    power: float = POWER
    alpha: float = 1e-3

    def __post_init__(self):
        for name in ("tv", "power", "alpha"):
            check_number(f"Target.{name}", getattr(self, name), 0, 1, low_open=True, high_open=True)


def alpha_per_test(laws: Sequence[CaseLaw], target: Target) -> float:
    """Holm's strictest level: alpha / (number of views of the setting)."""
    return target.alpha / max(1, sum(len(law.views) for law in laws))


def view_needs(view: View, target: Target, alpha_test: float, samples_per_n: int = 1) -> int | None:
    """Samples of the case this view needs to reach the target; None when it has < 2 bins.
    samples_per_n: draws it takes per unit of the test's N (2 for each decoder of a two-sample
    test of equal sizes, whose N is n_a n_b / (n_a + n_b): proofs/stats/two_sample.py)."""
    if view.bins < 2:
        return None
    need = max(
        samples_per_n * required_samples(target.tv, view.probs, alpha_test, target.power),
        math.ceil(MIN_EXPECTED / float(view.probs[view.probs > 0].min())),
    )  # no bin pooled away
    w = view.weight
    if w >= 1.0:
        return need
    n = math.ceil(need / w)
    while n * w - COUNT_MARGIN_SIGMAS * math.sqrt(n * w * (1 - w)) < need:
        n = math.ceil(n * 1.02) + 1
    return n


def case_target(law: CaseLaw, target: Target) -> Target:
    """The target `law`'s views are judged at: its own TV when the plan capped its N
    (CaseLaw.target_tv, `capped`), else the plan's."""
    return target if law.target_tv is None else replace(target, tv=law.target_tv)


def planned_samples(law: CaseLaw, target: Target, alpha_test: float) -> int:
    """N of one case: the most any of its views needs (0 when none has 2 bins: no power)."""
    target = case_target(law, target)
    return max((view_needs(v, target, alpha_test) or 0 for v in law.views), default=0)


def relative_samples(law: CaseLaw, target: Target, alpha_test: float) -> int:
    """N per decoder of one case of the engine-relative (two-sample) check: twice the one-sample
    need of its hungriest view (0 when no view has 2 bins)."""
    target = case_target(law, target)
    return max((view_needs(v, target, alpha_test, 2) or 0 for v in law.views), default=0)


def capped(law: CaseLaw, target: Target, alpha_test: float, cap: int | None) -> CaseLaw:
    """`law` judged at the smallest binned TV (3 significant digits, rounded up) its views reach
    within `cap` samples, when the plan's target needs more (CaseLaw.target_tv); else `law` as it
    is. N grows as 1/TV^2 and with the vocabulary: the cap keeps the first-token exact-law test
    where it is affordable, and the per-position evidence under the same case (proofs/checks/
    positions.py) carries the temperature-drift claim whatever the vocabulary. A law whose views
    need more than `cap` at any TV (bins too small for MIN_EXPECTED) keeps the plan's target."""
    law = replace(law, target_tv=None)
    n = planned_samples(law, target, alpha_test)
    if cap is None or n <= cap:
        return law
    tv = target.tv * math.sqrt(n / cap)  # N ~ 1/TV^2: a first guess, then up 1% at a time
    while tv < 1.0:
        scale = 10 ** (2 - math.floor(math.log10(tv)))  # 3 significant digits
        tv = math.ceil(tv * scale - 1e-9) / scale
        if planned_samples(replace(law, target_tv=tv), target, alpha_test) <= cap:
            return replace(law, target_tv=tv)
        tv *= 1.01
    return law


def sample_tally(
    decoder: Decoder,
    law: CaseLaw,
    n_samples: int,
    base_seed: int,
    deadline: float | Callable[[int, float], float] | None = None,
    max_rows: int | None = None,
    stop_early: bool = False,
) -> dict:
    """Sample one case and count it through every view (what a work unit returns); max_rows caps
    the seeds of one generate_batch call (proofs.decoders.draw). `stop_early`: stop at the call
    that returned a sample certain to fail the case (malformed or impossible: CaseLaw.fails), as
    certify's sampling units do; the mutation check draws its N whatever (its power margins)."""
    c = law.case
    fails = law.fails if stop_early else None
    d = draw(decoder, c.prompt, c.n, c.sampling, base_seed, n_samples, deadline, max_rows, fails)
    bad = malformed_samples(d.samples, law, d.seeds or [])
    return {
        **law.tally(d.samples),
        "planned": n_samples,
        "seconds": d.seconds,
        "samples_per_s": d.samples_per_s,
        "batched": d.batched,
        "error": "; ".join(e for e in (d.error, bad) if e) or None,
        "stopped_by_deadline": d.stopped_by_deadline,
        "seeds": [base_seed, base_seed + n_samples - 1],
        **({"refused": d.refused} if d.refused else {}),  # the engine refused the case's parameters
        # requests that raised, skipped (proofs.decoders.draw): the case fails on them, and its views
        # judge the completed samples within the bias bound (raised_law)
        **({"raised": d.failed, "first_raised": [d.first_failed_seed, d.first_failure]} if d.failed else {}),
    }


def malformed_samples(
    samples: Sequence, law: CaseLaw, seeds: int | Sequence[int], shown: int = 3
) -> str | None:
    """The samples that break the protocol, named for what they are (proofs.stats.views.malformed:
    a wrong length, an id outside the vocabulary, a negative or non-integer id) with their seeds
    (`seeds`: each sample's, Draw.seeds, or the first of consecutive ones); None when there are
    none. A case with any fails as the decoder's error."""
    if isinstance(seeds, int):
        seeds = range(seeds, seeds + len(samples))
    bad = [
        (seed, why)
        for seed, s in zip(seeds, samples, strict=True)
        if (why := malformed(s, law.case.n, law.V, law.case.sampling.stop_ids()))
    ]
    if not bad:
        return None
    named = "; ".join(f"seed {seed}: {why}" for seed, why in bad[:shown])
    return f"{len(bad)} malformed sample(s) ({named}{'; ...' if len(bad) > shown else ''})"


def case_spec(case: Case) -> CaseSpec:
    s = case.sampling
    return CaseSpec(case.name, s.temperature, s.top_k, s.top_p, tuple(case.prompt), case.n)


def view_row(
    case: str, view: View, counts: Sequence[int], target: Target, alpha_test: float, fatal: bool
) -> SamplingView:
    """One view's chi-square result; Holm has not judged it yet (holm_rejected False)."""
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    row = {
        "case": case,
        "view": view.name,
        "law": view.law,
        "counted": n,
        "needed_n": view_needs(view, target, alpha_test),
        "target_tv": target.tv,
        "bin_labels": view.labels,
        "bin_probs": view.probs,
        "counts": counts,
        "holm_rejected": False,
    }
    if n == 0 or view.bins < 2:
        return SamplingView(
            **row,
            bins=view.bins if n else 0,
            stat=None,
            p_value=0.0 if fatal else 1.0,
            detectable_tv=math.inf,
            empirical_tv=None,
            has_power=False,
        )
    g = chisquare_gof(counts, view.probs)
    tv = detectable_tv(n, g["bin_probs"], alpha_test, target.power)
    return SamplingView(
        **row,
        bins=len(g["bins"]),
        stat=g["stat"],
        p_value=0.0 if fatal else g["p_value"],
        detectable_tv=tv,
        empirical_tv=0.5 * float(np.abs(counts / n - view.probs).sum()),
        has_power=tv <= target.tv,
    )


def view_bias_bound(failed: int, counted: int) -> float:
    """The TV by which dropping `failed` requests can move the law a view sees of its `counted`
    completed samples (proofs.details.RaisedRequests derives it): failed / (counted + failed), all
    of the failed ones on the view's prefix at worst; the failed fraction for an unconditional view."""
    return failed / (counted + failed)


def beyond_bias(v) -> bool:
    """Holm rejected the view, by more than the selection of the completed requests can explain
    (its observed TV past its bias bound, when requests raised)."""
    if not v.holm_rejected:
        return False
    bound = getattr(v, "bias_bound", None)
    return bound is None or v.empirical_tv is None or v.empirical_tv > bound


def raised_requests(tally: dict, views: Sequence[SamplingView]) -> RaisedRequests | None:
    """What the requests that raised leave of the case (None: none raised): their count, the first
    seed and message, the bias bound, and the completed samples' verdict on the law."""
    failed = tally.get("raised", 0)
    if not failed:
        return None
    seed, message = tally["first_raised"]
    requests = tally["samples"] + failed
    if tally["impossible"] or any(beyond_bias(v) for v in views):
        law = "rejected"
    elif any(v.holm_rejected for v in views):
        law = "within the bias bound"
    else:
        law = "not rejected"
    return RaisedRequests(failed, requests, seed, message, failed / requests, law)


def judged(cases: Sequence, fatal: list[str], target: Target, alpha_test: float) -> dict:
    """The verdict fields of a sampling check's details (SamplingDetails, RelativeDetails) from its
    Holm-judged cases and the ones that failed on their samples (`fatal`). A case that failed on its
    samples (rejected, impossible or malformed, an error) is named for that; "no power" names only
    the cases that could have passed unseen. Passes iff all three lists are empty."""
    rejected = sorted({v.case for c in cases for v in c.views if beyond_bias(v)})
    refused = [c.case for c in cases if getattr(c, "refused", None)]  # judged by evaluate
    raised = [c.case for c in cases if getattr(c, "raised", None)]  # failed on the exceptions
    short = [c for c in cases if not c.has_power and c.case not in fatal + rejected + refused + raised]
    # cut by the time budget, every view able to reach the target at its N: more samples would
    # decide it; a view of one bin or a case without samples for another reason never would
    incomplete = [
        c.case for c in short if c.stopped_by_deadline and c.views and all(v.needed_n for v in c.views)
    ]
    no_power = [c.case for c in short if c.case not in incomplete]
    if cases and len(refused) == len(cases):  # nothing sampled: the check has no evidence
        no_power = list(refused)
    return dict(
        alpha=target.alpha,
        alpha_test=alpha_test,
        target_tv=target.tv,
        power_level=target.power,
        detectable_tv=max((c.detectable_tv for c in cases), default=math.inf),
        no_power=tuple(no_power),
        rejected=tuple(rejected),
        failed_samples=tuple(fatal),
        incomplete=tuple(incomplete),
    )


def judged_result(name: str, details: SamplingDetails | RelativeDetails, power: str) -> CheckResult:
    """A sampling check's result from its details (their verdict fields: judged): measured = the
    smallest p-value of its views, bound = the strictest Holm level; passes iff Holm rejects
    nothing, no case failed on its samples or was refused its core parameters, and every view
    reached the target TV. When the only shortfall is cases the time budget cut (incomplete), the
    result is incomplete, not failed: `incomplete` says how far each got."""
    refused_core = getattr(details, "refused_core", ())  # the relative check's engines refuse nothing
    raised = getattr(details, "raised", ())  # a request that raised is a finding: the check fails
    failed = details.rejected or details.no_power or details.failed_samples or refused_core or raised
    measured = min((v.p_value for c in details.cases for v in c.views), default=0.0)
    short = None if failed else shortfall(details)
    passed = not failed and short is None
    return CheckResult(name, measured, details.alpha_test, passed, details, power, incomplete=short)


def shortfall(details: SamplingDetails | RelativeDetails) -> str | None:
    """What the time budget left undone: per incomplete case, N reached against N planned and the
    binned TV it detects there against the target (None: nothing was cut short)."""
    if not details.incomplete:
        return None
    cases = {c.case: c for c in details.cases}
    parts = []
    for name in details.incomplete:
        c = cases[name]
        drawn = c.samples if isinstance(c.samples, int) else min(c.samples)  # relative: both decoders'
        reached = f"binned TV {c.detectable_tv:.3g}" if math.isfinite(c.detectable_tv) else "no TV yet"
        parts.append(f"{name}: {drawn}/{c.planned} samples, detects {reached} (target {details.target_tv:g})")
    return "the time budget ran out before the planned N, with nothing rejected: " + "; ".join(parts)


def refusal_parameters(params: dict) -> tuple[tuple[str, ...], bool]:
    """(the parameters a refusal of a case is taken to be of, whether they are core ones) from the
    case's SamplingParams.describe(): its ENGINE_FIELDS when it sets any (an engine may decline
    those: not a failure); else the core filters it sets, top_k and top_p, or its temperature."""
    engine = tuple(f for f in ENGINE_FIELDS if f in params)
    if engine:
        return engine, False
    core = tuple(f"{f}={params[f]:g}" for f in ("top_k", "top_p") if params.get(f) is not None)
    return core or (f"temperature={params['temperature']:g}",), True


def evaluate(name: str, laws: Sequence[CaseLaw], tallies: Sequence[dict], target: Target) -> CheckResult:
    """The check from the work units' tallies (pure: shards can be combined here).

    measured = the smallest p-value, bound = alpha/m; passes iff Holm rejects nothing, no sample
    was impossible, the decoder never failed, and every view reached the target TV."""
    alpha_test = alpha_per_test(laws, target)
    per_case = []
    for law, t in zip(laws, tallies, strict=True):
        fatal = bool(t["impossible"] or t["error"])
        per_case.append(
            []  # refused by the engine: no sample, no view in Holm's family, no power asked of it
            if t.get("refused")
            else [
                view_row(law.case.name, v, c, case_target(law, target), alpha_test, fatal)
                for v, c in zip(law.views, t["counts"], strict=True)
            ]
        )
    p_values = [v.p_value for views in per_case for v in views]
    rejected = iter(holm(p_values, target.alpha) if p_values else [])
    per_case = [[replace(v, holm_rejected=bool(next(rejected))) for v in views] for views in per_case]
    per_case = [  # where requests raised, each view's bias bound: a rejection counts only past it
        [replace(v, bias_bound=view_bias_bound(t["raised"], v.counted)) for v in views]
        if t.get("raised")
        else views
        for views, t in zip(per_case, tallies, strict=True)
    ]
    cases = [
        SamplingCase(
            **vars(case_spec(law.case)),
            planned=t["planned"],
            samples=t["samples"],
            seconds=t["seconds"],
            samples_per_s=t["samples_per_s"],
            batched=t["batched"],
            impossible=t["impossible"],
            error=t["error"],
            seeds=t["seeds"],
            stopped_by_deadline=t["stopped_by_deadline"],
            detectable_tv=max((v.detectable_tv for v in views), default=math.inf),
            needed_n=max((v.needed_n or 0 for v in views), default=0) or None,
            has_power=bool(views) and all(v.has_power for v in views),
            not_tested=law.not_tested,
            chosen=law.chosen,
            views=views,
            order=law.case.sampling.order,
            params=law.case.sampling.describe(),
            refused=t.get("refused"),
            raised=raised_requests(t, views),
        )
        for law, t, views in zip(laws, tallies, per_case, strict=True)
    ]
    views = [v for c in cases for v in c.views]
    verdict = judged(cases, [c.case for c in cases if c.impossible or c.error], target, alpha_test)
    core = {}  # case -> the core parameters its engine refused
    for c in cases:
        params, is_core = refusal_parameters(c.params) if c.refused else ((), False)
        if is_core:
            core[c.case] = params
    refused_core = tuple(f"{', '.join(params)} ({case})" for case, params in core.items())
    verdict["raised"] = tuple(c.case for c in cases if c.raised)
    # a refusal of core parameters is its own failure, not named again as "no power"
    verdict["no_power"] = tuple(n for n in verdict["no_power"] if n not in core)
    worst = verdict["detectable_tv"]
    drawn = sum(c.samples for c in cases)
    seconds = sum(c.seconds for c in cases)
    own = "; ".join(f"{law.case.name}: {law.target_tv:g}" for law in laws if law.target_tv is not None)
    power = (
        f"every view must detect a binned TV >= {target.tv:g} with probability >= {target.power:g} at "
        f"alpha {alpha_test:.3g} (= {target.alpha:g}/{max(1, len(views))} Holm)"
        + (f", the cases the plan's N cap holds at their own TV ({own})" if own else "")
        + f"; reached: {worst:.3g} (worst case); non-central chi-square"
    )
    details = SamplingDetails(
        **verdict,
        samples=drawn,
        sampling_seconds=seconds,
        samples_per_s=drawn / seconds if seconds > 0 else None,
        cases=tuple(cases),
        refused_core=refused_core,
    )
    return judged_result(name, details, power)


def check_distribution(
    name: str,
    decoder: Decoder,
    laws: Sequence[CaseLaw],
    target: Target,
    base_seed: int,
    samples: Sequence[int] | None = None,
    budget_s: float | None = None,
    progress: Progress | None = None,
) -> CheckResult:
    """Plan (unless `samples` fixes N per case), sample and evaluate one decoder; `budget_s` caps
    the sampling time, shared among the cases in proportion to their N."""
    alpha_test = alpha_per_test(laws, target)
    ns = list(samples) if samples is not None else [planned_samples(law, target, alpha_test) for law in laws]
    end = None if budget_s is None else time.perf_counter() + budget_s
    tallies = []
    for i, (law, n) in enumerate(zip(laws, ns, strict=True)):
        deadline = None  # what an earlier case left unused passes on to the later ones
        if end is not None:
            deadline = time.perf_counter() + (end - time.perf_counter()) * n / max(1, sum(ns[i:]))
        t = sample_tally(decoder, law, n, base_seed, deadline)
        tallies.append(t)
        if progress:
            progress(
                f"  {name} {law.case.name}: {t['samples']}/{n} samples in {t['seconds']:.1f}s "
                f"({t['samples_per_s']:.0f}/s{', batched' if t['batched'] else ''})"
            )
    return evaluate(name, laws, tallies, target)
