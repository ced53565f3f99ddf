"""Theorem 1 of LoopSpec (docs/design.md section 4) checked on exact laws, no sampling: on random and
adversarial laws, on laws a hypothesis search steers towards counterexamples, and on the
laws of a real model at every depth (analysis/traces.py).

With eps1 = TV(p_d1, p_R) and eps2 = TV(p_d2, p_R):
  P(both proposals rejected) <= eps2 without the gate, <= 2 eps2 with it, whatever d1;
  Lemma: TV(p_d2 (-) p_d1, p_R (-) p_d1) <= eps2 / eps1.
The probabilities come from `fastdec.accept.loopspec_law`, i.e. from the rules the decoder
runs. Why it holds (so a failure points at the rules, not at the theorem): with
a = [p_R - p_d1]_+, b = [p_d2 - p_d1]_+ and [x]_+ - [y]_+ <= [x - y]_+,
  eps1 TV(b/|b|, a/|a|) <= sum [a - b]_+ <= eps2  if |b| <= eps1, else <= sum [b - a]_+ <= eps2,
which is the Lemma; ungated, P(both) = eps1 TV(q2, rho1) <= eps2; gated, the x1 where the gate
is closed add sum_{p_d2(x1) >= p_d1(x1)} [p_d1 - p_R]_+(x1) <= eps2. The factor 2 is approached
(`_tight_gated`'s family has ratio -> 2 on four tokens), so the random search aims there too.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch

from fastdec.accept import RESIDUAL_TOL, LoopSpecLaw, loopspec_law, residual, total_variation
from proofs.details import Theorem1Details, Theorem1Example, Theorem1Pair
from proofs.result import CheckResult
from refdec.errors import LoopcertError
from refdec.validate import check_int

# Absolute slack of every inequality: accept.py treats residuals of mass <= RESIDUAL_TOL as
# empty (each of the two residuals can add that much to P(both)), plus float64 rounding of
# sums over V terms.
SLACK = 2 * RESIDUAL_TOL + 1e-14
# Ratios are reported only where eps2 >= this, so that SLACK / eps2 stays below 1e-8 and a
# ratio above its bound is a real violation, not rounding of tiny numbers.
RATIO_MIN_EPS2 = 1e-6

KEYS = ("ratio_gated", "ratio_ungated", "lemma_ratio")  # the ratios, each held to its bound
BOUNDS = {"ratio_gated": 2.0, "ratio_ungated": 1.0, "lemma_ratio": 1.0}

Triple = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (p_R, p_d1, p_d2), each (V,)
LawFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, str], LoopSpecLaw]


def _ratio(p: float, eps2: float, bound: float) -> float:
    """p / eps2; below RATIO_MIN_EPS2: nan if p <= bound eps2 + SLACK holds, else inf."""
    if eps2 >= RATIO_MIN_EPS2:
        return p / eps2
    return math.nan if p <= bound * eps2 + SLACK else math.inf


def check_theorem1_pair(
    p_R: torch.Tensor, p_d1: torch.Tensor, p_d2: torch.Tensor, law: LawFn = loopspec_law
) -> Theorem1Pair:
    """Theorem 1 and the Lemma on one triple of (V,) laws.

    `law` computes the rejection probabilities (the negative controls pass a mutant rule).
    Ratios (P(both rejected) / eps2, and eps1 TV(q2, rho1) / eps2 for the Lemma) are nan where
    eps2 < RATIO_MIN_EPS2 and the bound holds, inf where it fails there, and nan for the Lemma
    where it is undefined (eps1 or |q2| at most RESIDUAL_TOL). `passed_*` always use the
    absolute form p <= bound * eps2 + SLACK.
    """
    eps1 = total_variation(p_d1, p_R)
    eps2 = total_variation(p_d2, p_R)
    ungated = law(p_R, p_d1, p_d2, "off").p_both_rejected
    gated = law(p_R, p_d1, p_d2, "on").p_both_rejected
    rho1, _ = residual(p_R, p_d1)
    q2, _ = residual(p_d2, p_d1)
    lemma_tv = math.nan if rho1 is None or q2 is None else total_variation(q2, rho1)
    lemma_lhs = 0.0 if math.isnan(lemma_tv) else eps1 * lemma_tv  # Lemma times eps1
    return Theorem1Pair(
        eps1=eps1,
        eps2=eps2,
        p_both_rejected_ungated=ungated,
        p_both_rejected_gated=gated,
        ratio_ungated=_ratio(ungated, eps2, 1.0),
        ratio_gated=_ratio(gated, eps2, 2.0),
        lemma_tv=lemma_tv,
        lemma_bound=eps2 / eps1 if eps1 > 0 else math.inf,
        lemma_ratio=math.nan if math.isnan(lemma_tv) else _ratio(lemma_lhs, eps2, 1.0),
        passed_ungated=ungated <= eps2 + SLACK,
        passed_gated=gated <= 2 * eps2 + SLACK,
        passed_lemma=lemma_lhs <= eps2 + SLACK,
    )


def _holds(row: Theorem1Pair) -> bool:
    return row.passed_ungated and row.passed_gated and row.passed_lemma


def _result(
    name: str,
    source: str,
    n: int,
    n_ratio: int,
    worst: dict[str, Theorem1Example],
    failures: list[Theorem1Example],
    about: dict,
) -> CheckResult:
    """The check from what a pass over the triples found: measured / bound are the largest gated
    ratio and 2; it passes when no triple broke a bound (the first 5 breaking it are kept)."""
    maxima = {key: getattr(worst[key].pair, key) if key in worst else math.nan for key in KEYS}
    details = Theorem1Details(
        source=source,
        cases=n,
        cases_with_ratio=n_ratio,
        max_ratio_ungated=maxima["ratio_ungated"],
        max_lemma_ratio=maxima["lemma_ratio"],
        bounds=BOUNDS,
        ratio_min_eps2=RATIO_MIN_EPS2,
        slack=SLACK,
        worst=worst,
        failures=tuple(failures[:5]),
        n_failures=len(failures),
        **about,
    )
    return CheckResult(name, maxima["ratio_gated"], 2.0, not failures, details)


def check_theorem1_cases(
    triples: Iterable[Triple],
    name: str = "theorem1",
    law: LawFn = loopspec_law,
    source: str = "given",
    **about,
) -> CheckResult:
    """Theorem 1 over (p_R, p_d1, p_d2) triples (random, or read from model traces).

    measured / bound are the gated ratio (bound 2); `passed` also needs the ungated ratio
    (bound 1) and the Lemma (bound 1) to hold on every triple: details has all three maxima,
    the worst triple of each, and the number of triples with a reportable ratio. `source` says
    where the triples came from, `about` its parameters (Theorem1Details: seed, vocab, model, ...).
    """
    worst: dict[str, Theorem1Example] = {}
    n = n_ratio = 0
    failures = []
    for i, (p_R, p_d1, p_d2) in enumerate(triples):
        row = check_theorem1_pair(p_R, p_d1, p_d2, law)
        n += 1
        n_ratio += not math.isnan(row.ratio_gated)
        for key in KEYS:
            r = getattr(row, key)
            if not math.isnan(r) and (key not in worst or r > getattr(worst[key].pair, key)):
                worst[key] = Theorem1Example(row, case=i)
        if not _holds(row):
            failures.append(Theorem1Example(row, case=i, laws=(p_R, p_d1, p_d2)))
    if n == 0:
        raise LoopcertError(f"{name}: no (p_R, p_d1, p_d2) triples to check")
    return _result(name, source, n, n_ratio, worst, failures, about)


# -- random and adversarial laws ------------------------------------------------------------------


def _simplex(g: torch.Generator, vocab: int, concentration: float) -> torch.Tensor:
    """A Dirichlet(concentration) draw, (V,) float64 (gamma via torch's generator-aware sampler)."""
    x = torch._standard_gamma(torch.full((vocab,), concentration, dtype=torch.float64), generator=g)
    if float(x.sum()) <= 0:  # every component underflowed: fall back to a one-hot
        x[int(torch.randint(vocab, (), generator=g))] = 1.0
    return x / x.sum()


def _one_hot(vocab: int, i: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(i), vocab).to(torch.float64)


def _mix(p: torch.Tensor, q: torch.Tensor, t: float) -> torch.Tensor:
    r = (1 - t) * p + t * q
    return r / r.sum()


def _tight_gated(g: torch.Generator, vocab: int) -> Triple:
    """The near-extremal gated family found by optimisation (V = 4, Nelder-Mead on the ratio).

    On tokens A, B, C, D: p_R = (1 - a, 0, a - c, c), p_d1 = (0, 1 - b, 0, b),
    p_d2 = (1 - b, 0, 0, b), c <= b <= a. Then eps2 = a - c; x1 = D leaves the gate closed and is
    rejected with probability b - c; x1 = B opens it, is always rejected, and x2 = A is rejected
    with probability (a - c)/(1 - c). So ratio = (b - c)/(a - c) + (1 - b)/(1 - c) -> 2 as
    c << b -> a -> 0. A little Dirichlet noise spreads the laws over the whole vocabulary.
    """
    u = torch.rand(4, generator=g, dtype=torch.float64).tolist()
    a = 1e-2 * u[0]
    b = a * (1 - 0.1 * u[1])
    c = b * 0.1 * u[2]
    A, B, C, D = torch.randperm(vocab, generator=g)[:4].tolist()
    p_R, p_d1, p_d2 = (torch.zeros(vocab, dtype=torch.float64) for _ in range(3))
    p_R[A], p_R[C], p_R[D] = 1 - a, a - c, c
    p_d1[B], p_d1[D] = 1 - b, b
    p_d2[A], p_d2[D] = 1 - b, b
    noise = 10.0 ** -(3 + 6 * u[3])
    return tuple(_mix(p, _simplex(g, vocab, 1.0), noise) for p in (p_R, p_d1, p_d2))


def _restrict(p: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """p conditioned on the token set idx (uniform on idx if p has no mass there)."""
    r = torch.zeros_like(p)
    r[idx] = p[idx] if float(p[idx].sum()) > 0 else 1.0
    return r / r.sum()


def random_triple(g: torch.Generator, vocab: int) -> Triple:
    """One (p_R, p_d1, p_d2) from a mix of generic and adversarial families (chosen by g)."""
    kind = int(torch.randint(7, (), generator=g))
    conc = [0.05, 0.3, 1.0, 5.0][int(torch.randint(4, (), generator=g))]
    p_R, p_d1, p_d2 = (_simplex(g, vocab, conc) for _ in range(3))
    t = float(torch.rand((), generator=g, dtype=torch.float64))
    if kind == 1:  # sharp q1: the draft is nearly certain of one token
        x1 = int(torch.randint(vocab, (), generator=g))
        p_d1 = _mix(_one_hot(vocab, x1), p_d1, 1e-3 * t)
    elif kind == 2:  # p_d2 close to p_R but with mass shifted off the draft's favourite token
        x1 = int(torch.argmax(p_d1))
        off = p_R.clone()
        off[x1] *= t
        p_d2 = _mix(p_R, off / off.sum(), 0.5)
    elif kind == 3:  # depth d2 nearly converged: eps2 small relative to eps1
        p_d2 = _mix(p_R, p_d2, 1e-3 * t)
    elif kind == 4:  # depth d2 no better than d1: p_d2 near p_d1 (small second-proposal mass)
        p_d2 = _mix(p_d1, p_d2, 1e-2 * t)
    elif kind == 5 and vocab >= 3:  # disjoint supports
        cut = sorted(torch.randperm(vocab - 1, generator=g)[:2].add(1).tolist())
        perm = torch.randperm(vocab, generator=g)
        p_R = _restrict(p_R, perm[: cut[0]])
        p_d1 = _restrict(p_d1, perm[cut[0] : cut[1]])
        p_d2 = _restrict(p_d2, perm[cut[1] :])
    elif kind == 6 and vocab >= 4:
        p_R, p_d1, p_d2 = _tight_gated(g, vocab)
    return p_R, p_d1, p_d2


def check_theorem1_random(n_cases: int, seed: int, vocab: int = 8) -> CheckResult:
    """Theorem 1 and the Lemma on n_cases random and adversarial triples (see `random_triple`)."""
    check_int("n_cases", n_cases, 1)
    check_int("vocab", vocab, 2)
    g = torch.Generator().manual_seed(seed)
    triples = (random_triple(g, vocab) for _ in range(n_cases))
    return check_theorem1_cases(triples, "theorem1_random", source="random", seed=seed, vocab=vocab)


def check_theorem1_traces(laws: torch.Tensor, pairs: Sequence[tuple[int, int]], label: str) -> CheckResult:
    R, P, _ = laws.shape
    triples = ((laws[R - 1, t], laws[a - 1, t], laws[b - 1, t]) for a, b in pairs for t in range(P))
    return check_theorem1_cases(
        triples, "theorem1_traces", source="traces", model=label, positions=P, depth_pairs=len(pairs)
    )


# -- guided search: hypothesis steers (p_R, p_d1, p_d2) towards counterexamples --------------


def _laws(weights: list[float], vocab: int) -> tuple[torch.Tensor, ...] | None:
    w = torch.tensor(weights, dtype=torch.float64).reshape(3, vocab)
    if bool((w.sum(-1) <= 0).any()):
        return None
    return tuple(w / w.sum(-1, keepdim=True))


@contextlib.contextmanager
def local_constants(pool=None) -> Iterator[None]:
    """Hypothesis draws, now and then, a constant found in the source of every local module
    loaded so far (hypothesis.internal.conjecture.providers, pinned in constraints.txt): the
    search would depend on what the process had imported before it (which work units a certify
    worker ran first; an editable or a wheel install). Inside, that pool is `pool` (a
    providers.Constants; None: empty, so the examples depend on (seed, max_examples, vocab)
    alone); its cache is emptied on both sides."""
    from hypothesis.internal.conjecture import providers

    real = providers._get_local_constants
    pool = providers.Constants() if pool is None else pool
    providers.CONSTANTS_CACHE.cache.clear()
    providers._get_local_constants = lambda: pool
    try:
        yield
    finally:
        providers._get_local_constants = real
        providers.CONSTANTS_CACHE.cache.clear()


def check_theorem1_search(max_examples: int, seed: int, vocab: int = 5) -> CheckResult:
    try:
        from hypothesis import HealthCheck, Phase, given, settings, target
        from hypothesis import seed as hyp_seed
        from hypothesis import strategies as st
    except ImportError as e:  # a runtime dependency (pyproject.toml): a broken install fails the check
        why = f"hypothesis, a runtime dependency of loopcert, cannot be imported ({e}); reinstall loopcert"
        return CheckResult("theorem1_search", math.nan, 2.0, False, kind="theorem1", error=why)
    worst: dict[str, Theorem1Example] = {}
    failures: list[Theorem1Example] = []
    n = n_ratio = 0
    # Sparse weights (exact zeros) reach disjoint supports and one-hot drafts, where bounds are tight.
    weight = st.one_of(st.just(0.0), st.floats(1e-6, 1.0), st.floats(0.0, 1e-3))

    @hyp_seed(seed)
    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=False,
        phases=[Phase.generate, Phase.target],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(weight, min_size=3 * vocab, max_size=3 * vocab))
    def search(weights):
        nonlocal n, n_ratio
        laws = _laws(weights, vocab)
        if laws is None:
            return
        row = check_theorem1_pair(*laws)
        n += 1
        n_ratio += not math.isnan(row.ratio_gated)
        for k in KEYS:
            r = getattr(row, k)
            if not math.isnan(r):
                target(min(r, 1e6), label=k)
                if k not in worst or r > getattr(worst[k].pair, k):
                    worst[k] = Theorem1Example(row, laws=laws)
        if not _holds(row):
            failures.append(Theorem1Example(row, laws=laws))

    with local_constants():
        search()
    about = {
        "seed": seed,
        "vocab": vocab,
        "examples": max_examples,
        "search": "hypothesis target() on each ratio",
    }
    return _result("theorem1_search", "search", n, n_ratio, worst, failures, about)


def traces_not_applicable(R: int, pairs: Sequence[tuple[int, int]]) -> str | None:
    """Why the trace checks (theorem1_traces, theorem2_traces) have nothing to check, or None: both
    read depth pairs d1 < d2 < R (Theorem 1's triples (p_R, p_d1, p_d2), Theorem 2's second
    proposal); R <= 2 (LoopCoder's published loop_num = 2) has none."""
    if pairs:
        return None
    return f"R={R} leaves no depth pair d1 < d2 < R (Theorem 1's p_d1 and p_d2; Theorem 2's second proposal)"


def not_applicable_traces(name: str, bound: float, kind: str, why: str) -> CheckResult:
    """A trace check's result where it does not apply (traces_not_applicable): passes, says why."""
    return CheckResult(name, float("nan"), bound, True, kind=kind, not_applicable=why)
