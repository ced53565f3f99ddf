"""Run every check on a candidate and assemble the certificate (docs/design.md section 6).

`certify(...)` returns the certificate as plain JSON-able data: a verdict, a stamp (commit,
versions, device, dtype, seeds, date) and one CheckResult per check. It computes; reports/
renders; loopcert/commands/certify.py writes. Two plans: QUICK (the CI gate, minutes on two
CPU cores) and FULL (nightly: more models, cases, samples, and the false-alarm rate).

Which model each check runs on, and why:
- greedy (float64): the certified model plus tiny presets of the other architectures;
- greedy in the run's dtype and bitwise: the certified model;
- sampling: the certified model, at its own vocabulary (the law is binned from its head, never
  enumerated whole: proofs/stats/views.py); FULL adds the tiny preset of its family as extra
  evidence, never as a replacement. N per case comes from the plan's target TV
  (proofs/checks/distribution.py); a case that cannot reach it fails as "no power";
- mutation and false alarms: their own tiny preset (proofs/checks/mutation.py says why);
- Theorems 1/2 and speed: the certified model.

A decoder factory may decline a model it does not serve by raising
proofs.decoders.protocol.NotApplicable: that run is reported "not applicable" with the reason; declining
the certified model itself, or any other error, is a failure.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

import refdec
from analysis.traces import depth_pairs, traces
from fastdec.config import DecodeConfig
from proofs.certificate import Certificate
from proofs.checks import mutation as mutant_lib
from proofs.checks.bitwise import check_bitwise
from proofs.checks.distribution import (
    Case,
    CaseLaw,
    Target,
    alpha_per_test,
    case_law,
    evaluate,
    planned_samples,
    sample_tally,
)
from proofs.checks.false_alarm import check_false_alarm
from proofs.checks.greedy import check_greedy
from proofs.checks.reproducibility import check_reproducible
from proofs.checks.theorem1 import check_theorem1_random, check_theorem1_search, check_theorem1_traces
from proofs.checks.theorem2 import check_theorem2_published, check_theorem2_traces
from proofs.decoders.candidates import (
    Candidate,
    default_depths,
    fastdec_candidate,
    fastdec_grid,
    user_candidate,
)
from proofs.decoders.protocol import NotApplicable
from proofs.progress import Progress
from proofs.prompts import model_prompts
from proofs.result import CheckResult
from proofs.run.jobs import check_jobs, run_units
from proofs.run.shards import Shard, plan_hash
from proofs.speed.check import check_speed
from proofs.speed.report import PLANS as BENCH_PLANS
from proofs.speed.timing import Workload
from proofs.stamp import git_commit, stamp
from proofs.stats.exact_laws import Oracle
from refdec.config import TINY_PRESETS
from refdec.errors import LoopcertError
from refdec.load import model_fingerprint, parse_dtype
from refdec.sampling import SamplingParams
from refdec.tokenizer import byte_decode
from refdec.validate import check_int, check_number
from refdec.values import check_device, dtype_name

FALLBACK_MODEL = "tiny-raven"
NON_REPRODUCIBLE = "NON-REPRODUCIBLE"
REPRO_SEEDS, REPRO_TOKENS = 3, 6  # reproducibility: seeds x tokens, each decoded twice
SHARE_SLACK = 2.0  # a sampling unit may use up to 2x its proportional share of the pool left


CaseSpec = tuple[str, SamplingParams, int]  # (name, params, n tokens)


@dataclass(frozen=True)
class CertifyPlan:
    mode: str
    greedy_presets: tuple[str, ...]  # tiny presets checked besides the certified model
    greedy_prompts: int
    greedy_tokens: int
    bitwise_prompts: int
    bitwise_tokens: int
    # each entry a case (name, params, n tokens) or a path's options, a tuple of cases in order of
    # preference: the sampled model's own law picks one (choose_case)
    sampling_cases: tuple[CaseSpec | tuple[CaseSpec, ...], ...]
    tv: float  # every sampling view must detect a binned TV >= this (N per case follows)
    sampling_budget_s: float  # sampling time of the whole run (--time-budget overrides)
    sampling_presets: bool  # also sample the tiny preset of the certified model's family
    blackbox_mutant_samples: int  # fastdec's adaptive-verify: slower per sample, far off the law
    false_alarm: int | None  # replicates of each lossless control, or None
    theorem1_random_cases: int
    theorem1_search_examples: int  # hypothesis-guided search (proofs/checks/theorem1.py)
    trace_prompts: int
    trace_positions: int  # at most this many positions (evenly spaced) of the trace prompts
    speed: Workload  # the speed check's prompts, tokens and rounds (`loopcert bench`'s)
    alpha: float = 1e-3  # family-wise level of each sampling check (Holm across its views)
    power: float = 0.99  # probability of detecting a binned TV >= tv
    mutant_names: tuple[str, ...] | None = None  # a subset of proofs.checks.mutation.LIBRARY (None: all)
    case_cap: int | None = None  # a path's options: the first whose N is at most this (choose_case)

    @property
    def target(self) -> Target:
        return Target(self.tv, self.power, self.alpha)


QUICK_CASES = (  # one concentrated case (low T, small top-k) beside one spread case
    ("T=0.7 top-k=4", SamplingParams(temperature=0.7, top_k=4), 3),
    ("T=1.5 top-p=0.9", SamplingParams(temperature=1.5, top_p=0.9), 3),
)
# The full plan's cases: TV 0.01 needs N ~ lambda* / (kappa tv^2) per case, ~1e5 for a view of
# balanced bins (kappa = 4) and ~1e4 when one bin holds most of the mass (kappa = 1/(P(A)(1-P(A)))),
# so at 8 settings x 2 models on two cores it buys only concentrated cases: one per path of the
# sampling transform, each the cheap twin of the mutant library's case for that path (the mutation
# check shows the same test at the same TV killing every bug of the path, proofs/checks/mutation.py).
# How concentrated a temperature makes a law depends on the model, so each path lists options and
# the sampled model's own law picks one (choose_case): the first that has power past the first
# token within FULL_CASE_CAP samples. On the default model v4 (V=256) and tiny-raven the first
# options fit: N per setting 20,384 / 5,127; 20,040 / 5,127; 41,467 / 18,257 (tests/proofs/run/test_certify.py
# checks each against TV 0.01). Measured with FULL's target (OMP_NUM_THREADS=1, proofs.run.certify
# sampling_setup over every option): on v4 T=0.3, T=0.3 top-k=2 and T=0.4 top-p=0.9 need 58,743 /
# 50,466 / 57,536 (v3's choices; v4's low-temperature laws are less concentrated); on a synthetic
# V=61 checkpoint (tests/proofs/run/test_certify_vocab.py) T=0.3 top-p=0.95 leaves one token (no power) and
# T=0.4 top-p=0.95 is taken (9,865); on a V=65,536 one every first option needs 117k-129k and
# T=0.1, T=0.1 top-k=3, T=0.1 top-p=0.99 are taken (34,588 / 34,588 / 27,531). The spread cases
# (T=0.7, T=1.5, top-p 0.8, T=1.5 top-p=0.9, 4 tokens at T=1: N 111k-143k each) are left to the
# quick plan at TV 0.05, a GPU or shards: their bug classes are the ones these cases see, at a
# flatter law.
FULL_CASE_CAP = 45_000  # x 3 cases x 8 settings at 250-500 samples/s (v4): the hour on two cores
FULL_CASES = (
    # temperature, no filter: the whole support, a tail of small tokens; a temperature on one side
    # only, an unnormalised residual, an int8 draft, a rejected lane kept (mutants of case T=0.5)
    tuple((f"T={t}", SamplingParams(temperature=t), 3) for t in (0.2, 0.3, 0.15, 0.1, 0.4)),
    # the top-k path: a filter missing on the target side, a q reported before the filter, stale
    # KV after a rejection, a draft scored at another depth (mutants of case top-k=2)
    tuple(
        (f"T={t} top-k={k}", SamplingParams(temperature=t, top_k=k), 3)
        for t, k in ((0.2, 3), (0.3, 2), (0.15, 3), (0.1, 3), (0.3, 3))
    ),
    # the top-p path: the nucleus cut on either side, always-accept, resampling from the target
    # (mutants of case top-p=0.5)
    tuple(
        (f"T={t} top-p={p}", SamplingParams(temperature=t, top_p=p), 3)
        for t, p in ((0.3, 0.95), (0.4, 0.95), (0.2, 0.99), (0.2, 0.95), (0.1, 0.99))
    ),
)
QUICK = CertifyPlan(
    "quick",
    greedy_presets=("tiny-ouro", "tiny-raven"),
    greedy_prompts=2,
    greedy_tokens=12,
    bitwise_prompts=2,
    bitwise_tokens=16,
    sampling_cases=QUICK_CASES,
    tv=0.05,
    sampling_budget_s=270.0,
    sampling_presets=False,
    blackbox_mutant_samples=200,
    false_alarm=None,
    theorem1_random_cases=1000,
    theorem1_search_examples=200,
    trace_prompts=4,
    trace_positions=48,
    speed=BENCH_PLANS["quick"].grid,
)
FULL = CertifyPlan(
    "full",
    greedy_presets=TINY_PRESETS,
    greedy_prompts=6,
    greedy_tokens=24,
    bitwise_prompts=4,
    bitwise_tokens=32,
    sampling_cases=FULL_CASES,
    case_cap=FULL_CASE_CAP,
    tv=0.01,
    sampling_budget_s=2400.0,
    sampling_presets=True,
    blackbox_mutant_samples=1000,
    false_alarm=200,
    theorem1_random_cases=20000,
    theorem1_search_examples=3000,
    trace_prompts=8,
    trace_positions=256,
    speed=BENCH_PLANS["full"].grid,
)
PLANS = {"quick": QUICK, "full": FULL}


def case_options(entry: CaseSpec | tuple[CaseSpec, ...]) -> tuple[CaseSpec, ...]:
    """One entry of CertifyPlan.sampling_cases -> its cases in order of preference."""
    return (entry,) if isinstance(entry[0], str) else tuple(entry)


def option_samples(law: CaseLaw, plan: CertifyPlan) -> int:
    """N of one option of a path, judged at the Holm level of one such case per plan entry."""
    return planned_samples(law, plan.target, plan.alpha / (len(plan.sampling_cases) * max(1, len(law.views))))


def choose_case(oracle: Oracle, prompt: tuple[int, ...], entry, plan: CertifyPlan) -> CaseLaw:
    """The law of the case one entry of the plan samples on this model: a fixed case as it is; of a
    path's options, the first that is eligible (it has power, N > 0, and a view past the first
    token: a view of token 1 alone never sees a token drawn after a rejection) and needs at most
    plan.case_cap samples; else the eligible one that needs the fewest; else the one with power on
    its first token alone that needs the fewest; else the first (which then fails as no power); N
    as option_samples judges it. The law's `chosen` says which rule chose and what was passed over."""
    options = case_options(entry)
    if len(options) == 1:
        name, sp, k = options[0]
        return case_law(oracle, Case(name, sp, prompt, k))
    cap = plan.case_cap if plan.case_cap is not None else math.inf
    tried: list[tuple[CaseLaw, int, str]] = []  # (law, N, why passed over; "" = fits)
    for name, sp, k in options:
        law = case_law(oracle, Case(name, sp, prompt, k))
        n = option_samples(law, plan)
        if n == 0:
            why = "no view with 2 bins (no power)"
        elif all(v.position == 0 for v in law.views):
            why = f"tests only the first token (N {n:,})"
        else:
            why = f"N {n:,} > {cap:,}" if n > cap else ""
        tried.append((law, n, why))
        if not why:
            break
    past_first = [t for t in tried if t[1] > 0 and any(v.position != 0 for v in t[0].views)]
    powered = [t for t in tried if t[1] > 0]
    if not tried[-1][2]:
        law = tried[-1][0]
        rule = f"the first of {len(options)} options with power past the first token and N <= {cap:,}"
    elif past_first:
        law = min(past_first, key=lambda t: t[1])[0]
        rule = f"no option has N <= {cap:,}: of those with power past the first token, the one needing fewest"
    elif powered:
        law = min(powered, key=lambda t: t[1])[0]
        rule = "no option has power past the first token: of those with power on it, the one needing fewest"
    else:
        law = tried[0][0]
        rule = "no option has power: the first"
    passed = "; ".join(f"{t[0].case.name}: {t[2]}" for t in tried if t[0] is not law)
    return replace(law, chosen=rule + (f"; passed over {passed}" if passed else ""))


@dataclass(frozen=True)
class WorkUnit:
    """One case of one setting on one model: deterministic given the plan and the seed, runnable on
    its own (shards), `id` stable across runs and machines."""

    id: str  # "sampling/<model>/<setting>/<case>"
    check: str  # the check whose evaluation combines it
    model: str
    setting: str
    case: str
    samples: int  # N, planned from the target TV
    base_seed: int  # sample i uses seed base_seed + i
    budget_s: float  # its share of the sampling time budget


@dataclass(frozen=True)
class SamplingCheck:
    label: str  # "sampling[<model>: <setting>]"
    model: str
    candidate: Candidate
    why: str
    budget_s: float
    units: list[WorkUnit]
    not_applicable: str | None = None


def default_model_name() -> str:
    """ "default" when the trained model is installed, else the tiny preset of its family."""
    try:
        refdec.load_model("default")
    except LoopcertError:
        return FALLBACK_MODEL
    return "default"


def certificate_stamp(
    model_name: str, decoder: str, device: str, dtype: torch.dtype, plan: CertifyPlan, seed: int
) -> dict:
    """proofs.stamp's fields, plus what a certificate adds: decoder, plan, base seed."""
    seeds = {
        "sampling": f"{seed} + i for sample i of each case",
        "mutants": f"{seed} + i for sample i of each mutant case",
        "theorem1_random": seed,
        "greedy": 0,
    }
    return {**stamp(model_name, device, dtype, seeds), "mode": plan.mode, "decoder": decoder, "seed": seed}


def load(name: str, dtype: torch.dtype, device: str):
    return refdec.load_model(name, dtype=dtype).to(device)


def pick_prompt(oracle: Oracle, prompts) -> tuple[int, ...]:
    """The prompt whose next-token law (T=1) has the most entropy: the most informative test."""

    def entropy(p):
        law = oracle.law(p, oracle.R, SamplingParams(temperature=1.0))
        return float(-(law * law.clamp_min(1e-300).log()).sum())

    return max(prompts, key=entropy)


def _guard(name: str, fn: Callable[[], CheckResult], progress: Progress, seconds: float = 0.0) -> CheckResult:
    """Run one check; any exception becomes a failed result naming it (never a crash that would
    leave no report: a check that cannot run has failed). Usage errors are all raised by
    `certify` before the first check starts, so none is swallowed here."""
    t0 = time.perf_counter()
    progress(f"[{name}] ...")
    try:
        result = fn()
    except Exception as e:  # noqa: BLE001 - reported as a failed check (usage errors were raised before)
        result = CheckResult.errored(name, e)
    seconds += time.perf_counter() - t0
    result = result.timed(seconds)
    progress(f"[{name}] {'pass' if result.passed else 'FAIL'} ({seconds:.1f}s)")
    return result


class CertifyRun:
    """What every check of one certify run shares: plan, models, oracle, candidates, progress."""

    def __init__(
        self,
        plan: CertifyPlan,
        model_name: str,
        user: Candidate | None,
        device: str,
        dtype: torch.dtype,
        seed: int,
        say: Progress,
        time_budget: float | None = None,
    ):
        self.plan, self.model_name, self.user, self.device, self.dtype = plan, model_name, user, device, dtype
        self.sampling_budget_s = plan.sampling_budget_s if time_budget is None else float(time_budget)
        self.seed, self.say = seed, say
        self.model64 = load(model_name, torch.float64, device)
        self.oracle = Oracle(self.model64)
        self.R = self.model64.cfg.recurrence
        self.model_dt = None if dtype == torch.float64 else load(model_name, dtype, device)
        self.candidates = self.grid(self.R)
        self._setups: dict = {}
        self._sampling: list[SamplingCheck] = []  # sampling_checks()
        self._pool: dict | None = None  # pool_sampling()
        self._reserved: dict[str, float] = {}  # dispatch_share(): unit id -> seconds reserved

    def grid(self, R: int) -> list[Candidate]:
        return [self.user] if self.user else fastdec_grid(R, self.plan.mode == "full")

    def prompts(self, k: int) -> list[tuple[int, ...]]:
        return model_prompts(self.model64, self.model_name, k)

    # -- 1. greedy exactness ------------------------------------------------------------------
    def greedy_float64(self) -> CheckResult:
        """float64 over models x prompts x settings; the certified model must take every setting;
        a tiny preset the factory declines (NotApplicable) is listed as not applicable, any other
        factory error on it is a real bug."""
        runs, not_applicable = [], []
        names = [self.model_name] + [p for p in self.plan.greedy_presets if p != self.model_name]
        for name in names:
            ours = name == self.model_name
            m = self.model64 if ours else load(name, torch.float64, self.device)
            o = self.oracle if ours else Oracle(m)
            for c in self.grid(m.cfg.recurrence):
                if c.own_model and not ours:
                    not_applicable.append(f"{c.label} on {name}: serves only its own model")
                    continue
                try:
                    dec = c.build(m)
                except NotApplicable as e:  # the factory serves only its own checkpoint
                    if ours:
                        raise
                    not_applicable.append(f"{c.label} on {name}: {e or 'declined by the factory'}")
                    continue
                except Exception as e:  # noqa: BLE001 - a factory that breaks on a preset is a finding
                    if ours:
                        raise
                    dec = _Broken(f"the factory failed on {name}: {type(e).__name__}: {e}")
                runs.append((name, c.label, dec, o, torch.float64))
        prompts = {id(r[3]): model_prompts(r[3].model, r[0], self.plan.greedy_prompts) for r in runs}
        result = check_greedy(
            "greedy_float64", runs, lambda o: prompts[id(o)], self.plan.greedy_tokens, self.say
        )
        return result.with_details(not_applicable=not_applicable)

    def greedy_low(self, name: str) -> CheckResult:
        runs = [
            (self.model_name, c.label, c.build(self.model_dt), self.oracle, self.dtype)
            for c in self.candidates
        ]
        prompts = self.prompts(self.plan.greedy_prompts)
        return check_greedy(name, runs, lambda _o: prompts, self.plan.greedy_tokens, self.say)

    # -- 2. bitwise -----------------------------------------------------------------------------
    def bitwise(self) -> CheckResult:
        m32 = self.model_dt
        if self.dtype != torch.float32:
            m32 = load(self.model_name, torch.float32, self.device)
        prompts = self.prompts(self.plan.bitwise_prompts)
        return check_bitwise(
            "bitwise_fixed_width", self.candidates, m32, prompts, self.plan.bitwise_tokens, progress=self.say
        )

    # -- 3. sampling ------------------------------------------------------------------------------
    def sampling_plan(self) -> list[tuple[str, list[Candidate], str]]:
        """(model, settings, why) for each model the sampling check runs on: always the certified
        model at its own vocabulary; FULL adds the tiny preset of its family as extra evidence."""
        out = [
            (
                self.model_name,
                self.candidates,
                f"the certified model, at its own vocabulary (V={self.oracle.V})",
            )
        ]
        if self.plan.sampling_presets and self.model_name not in TINY_PRESETS:
            family = self.model64.cfg.family
            tiny = next(t for t in TINY_PRESETS if refdec.get_preset(t).family == family)
            out.append(
                (
                    tiny,
                    self.grid(refdec.get_preset(tiny).recurrence),
                    f"extra evidence: the tiny preset of {self.model_name}'s family ({family})",
                )
            )
        return out

    def sampling_setup(self, name: str) -> dict:
        """Oracle, prompt, cases, their views and N, and the model to sample, once per model
        (lazily, so that their cost and any failure belong to a check)."""
        key = ("sampling", name)
        if key not in self._setups:
            o = self.oracle if name == self.model_name else Oracle(load(name, torch.float64, "cpu"))
            prompt = pick_prompt(o, model_prompts(o.model, name, 6))
            laws = [choose_case(o, prompt, entry, self.plan) for entry in self.plan.sampling_cases]
            a = alpha_per_test(laws, self.plan.target)
            run_dtype = torch.float64 if self.dtype == torch.float64 else torch.float32
            self._setups[key] = {
                "laws": laws,
                "samples": [planned_samples(law, self.plan.target, a) for law in laws],
                "model": load(name, run_dtype, self.device),
            }
        return self._setups[key]

    def sampling_units(self, name: str, setting: str, budget_s: float) -> list[WorkUnit]:
        """The work units of one sampling check: one per case, the check's time budget shared in
        proportion to N (the deterministic, independently runnable pieces a shard can take)."""
        s = self.sampling_setup(name)
        total = max(1, sum(s["samples"]))
        return [
            WorkUnit(
                f"sampling/{name}/{setting}/{law.case.name}",
                f"sampling[{name}: {setting}]",
                name,
                setting,
                law.case.name,
                n,
                self.seed,
                budget_s * n / total,
            )
            for law, n in zip(s["laws"], s["samples"], strict=True)
        ]

    def run_unit(self, unit: WorkUnit, decoder, budget_s: float | None = None) -> dict:
        """Sample one unit for `budget_s` at most (default: its planned share, unit.budget_s)."""
        law = next(law for law in self.sampling_setup(unit.model)["laws"] if law.case.name == unit.case)
        deadline = time.perf_counter() + (unit.budget_s if budget_s is None else budget_s)
        tally = sample_tally(decoder, law, unit.samples, unit.base_seed, deadline)
        how = "generate_batch" if tally["batched"] else "one call per seed"
        self.say(
            f"  {unit.id}: {tally['samples']}/{unit.samples} samples in {tally['seconds']:.1f}s "
            f"({tally['samples_per_s']:.1f}/s, {how})"
        )
        return {**tally, "unit": unit.id}

    def sampling_checks(self) -> list[SamplingCheck]:
        """One check per (model, setting), each a list of work units (one per case) and an
        assembly step: Holm across every view of its cases."""
        plan = self.sampling_plan()
        per_check = self.sampling_budget_s / max(1, sum(len(grid) for _, grid, _ in plan))
        out = []
        for name, grid, why in plan:
            for c in grid:
                label = f"sampling[{name}: {c.label}]"
                na = None
                if c.own_model and name != self.model_name:
                    na = f"{c.label} serves only its own model"
                units = [] if na else self.sampling_units(name, c.label, per_check)
                out.append(SamplingCheck(label, name, c, why, per_check, units, na))
        self._sampling = out
        return out

    def pool_sampling(self, unit_ids, workers: int = 1) -> None:
        """The sampling budget as one pool over the sampling units this process runs (all of them,
        or a shard's: then its share of the budget by N). Each unit may use up to SHARE_SLACK
        times what is left of the pool in proportion to its N among the units left (never more
        than is left), and what it did not use stays in the pool: a fast setting's leftover helps
        the slow ones after it, and a slow unit that comes first is not cut at its bare
        proportion (a full run with --jobs 2 cut the first pipelined case at 85% of its N so).
        Only how far a case gets before its deadline depends on the clock; N, seeds and samples
        do not. With `workers` processes sampling at once (--jobs) the pool holds that many times
        the budget: it stays wall time."""
        every = [u for chk in self._sampling for u in chk.units]
        ids = set(unit_ids)
        mine = sum(u.samples for u in every if u.id in ids)
        total = sum(u.samples for u in every)
        self._pool = {
            "seconds": self.sampling_budget_s * workers * (mine / total if total else 1.0),
            "samples": mine,
            "units": sum(u.id in ids for u in every),
        }

    def pool_share(self, unit: WorkUnit) -> float:
        """This unit's time from the pool (pool_sampling; by default every sampling unit)."""
        if self._pool is None:
            self.pool_sampling([u.id for chk in self._sampling for u in chk.units])
        p = self._pool
        fair = p["seconds"] * unit.samples / p["samples"] if p["samples"] > 0 else 0.0
        share = min(p["seconds"], SHARE_SLACK * fair)
        p["samples"] = max(0, p["samples"] - unit.samples)
        p["units"] = max(0, p["units"] - 1)
        return share

    def sampling_units_by_id(self) -> dict[str, WorkUnit]:
        return {u.id: u for chk in self._sampling for u in chk.units}

    def dispatch_share(self, uid: str) -> float | None:
        """A parallel run hands a sampling unit its share when it starts; None for any other unit.
        Only its proportional part is reserved from the pool (reserving the slack too would leave
        nothing for a unit dispatched beside it); what it used is settled when it returns."""
        unit = self.sampling_units_by_id().get(uid)
        if unit is None:
            return None
        p = self._pool
        fair = p["seconds"] * unit.samples / p["samples"] if p["samples"] > 0 else 0.0
        share = self.pool_share(unit)
        p["seconds"] = max(0.0, p["seconds"] - fair)
        self._reserved[uid] = fair
        return share

    def returned_share(self, uid: str, share: float | None, result: dict) -> None:
        """A parallel unit returns its reservation and pays for the time it used."""
        if share is not None:
            used = float(result.get("seconds", 0.0))
            self._pool["seconds"] = max(0.0, self._pool["seconds"] + self._reserved.pop(uid, 0.0) - used)

    def say_prediction(self, rate: float) -> None:
        """What the sampling units left plan, and their time at the rate the last one reached."""
        p = self._pool
        if rate > 0 and p["units"]:
            self.say(
                f"  {p['units']} sampling unit(s) left plan {p['samples']} samples: "
                f"~{p['samples'] / rate:.0f}s at {rate:.1f} samples/s; {p['seconds']:.0f}s of the "
                "sampling budget left"
            )

    def sampling_decoder(self, check: SamplingCheck):
        """The check's decoder, built once per process (a shard builds only those it samples)."""
        key = ("decoder", check.label)
        if key not in self._setups:
            try:
                self._setups[key] = check.candidate.build(self.sampling_setup(check.model)["model"])
            except NotApplicable as e:
                if check.model == self.model_name:
                    raise
                self._setups[key] = NotApplicable(str(e) or "declined by the factory")
        return self._setups[key]

    def sampling_unit_result(self, check: SamplingCheck, unit: WorkUnit, share: float | None = None) -> dict:
        """A unit's raw result: its tally, or why it has none (declined, or an error). `share`: its
        sampling time, handed out by a parallel run's parent (proofs/run/jobs.py); None: from this
        process's pool."""
        own = share is None
        try:
            decoder = self.sampling_decoder(check)
            if isinstance(decoder, NotApplicable):
                if own:
                    self.pool_share(unit)  # its share stays in the pool for the units after it
                return {"unit": unit.id, "not_applicable": str(decoder)}
            share = self.pool_share(unit) if own else share
            t0 = time.perf_counter()
            try:
                tally = self.run_unit(unit, decoder, share)
            finally:
                if own:
                    self._pool["seconds"] = max(0.0, self._pool["seconds"] - (time.perf_counter() - t0))
            if own:
                self.say_prediction(tally["samples_per_s"] if tally["samples"] else 0.0)
            return {**tally, "budget_seconds": share}
        except Exception as e:  # noqa: BLE001 - the check fails naming it (usage errors were raised before)
            return {"unit": unit.id, "unit_error": f"{type(e).__name__}: {e}"}

    def sampling_result(self, check: SamplingCheck, raws: list[dict]) -> CheckResult:
        """Assemble one sampling check from its units' raw results (any shard's)."""
        extra = {"model": check.model, "why_this_model": check.why, "budget_s": check.budget_s}
        na = check.not_applicable or next((r["not_applicable"] for r in raws if "not_applicable" in r), None)
        if na:
            return CheckResult(check.label, math.nan, math.nan, True, {**extra, "not_applicable": na})
        err = next((r["unit_error"] for r in raws if "unit_error" in r), None)
        if err:
            return CheckResult(check.label, math.nan, math.nan, False, {**extra, "error": err})
        s = self.sampling_setup(check.model)
        r = evaluate(check.label, s["laws"], raws, self.plan.target)
        extra["units"] = [t["unit"] for t in raws]
        if s["model"].cfg.vocab_size >= 256:  # byte-level: show the prompt as text too
            extra["prompt_text"] = byte_decode(s["laws"][0].case.prompt)
        return r.with_details(**extra)

    # -- 3b. reproducibility ---------------------------------------------------------------------
    def reproducible(self) -> CheckResult:
        model = self.model_dt if self.model_dt is not None else self.model64
        prompt = self.prompts(1)[0]
        seeds = [self.seed + i for i in range(REPRO_SEEDS)]
        return check_reproducible(
            "reproducibility", self.candidates, model, prompt, REPRO_TOKENS, seeds, self.say
        )

    # -- 4. mutants and false alarms -------------------------------------------------------------
    def mutant_library(self) -> tuple:
        names = self.plan.mutant_names
        return tuple(
            mt
            for mt in mutant_lib.LIBRARY
            if (mt.fastdec is None or _has_fastdec()) and (names is None or mt.name in names)
        )

    def mutant_run(self) -> mutant_lib.MutantRun:
        """The models and exact laws the mutants share, built once per process."""
        if "mutants" not in self._setups:
            self._setups["mutants"] = mutant_lib.MutantRun(
                self.plan.target,
                self.seed,
                progress=self.say,
                blackbox_samples=self.plan.blackbox_mutant_samples,
                require_all=self.plan.mode == "full",
            )
        return self._setups["mutants"]

    def mutant_unit(self, mt) -> dict:
        """One mutant's row (a work unit: `mutant/<name>`), or why it has none."""
        try:
            return self.mutant_run().row(mt)
        except Exception as e:  # noqa: BLE001 - the mutation check fails naming it
            return {"name": mt.name, "unit_error": f"{type(e).__name__}: {e}"}

    def mutation(self, rows: list[dict]) -> CheckResult:
        """The mutation check from every mutant's row (any shard's)."""
        err = next((r for r in rows if "unit_error" in r), None)
        if err is not None:
            raise RuntimeError(f"mutant {err['name']}: {err['unit_error']}")
        return self.mutant_run().result(rows)

    def false_alarm(self) -> CheckResult:
        return check_false_alarm(self.plan.false_alarm, self.plan.target, self.seed, progress=self.say)

    # -- 5. theorems -----------------------------------------------------------------------------
    def theorem1_random(self) -> CheckResult:
        return check_theorem1_random(self.plan.theorem1_random_cases, self.seed)

    def theorem1_search(self) -> CheckResult:
        return check_theorem1_search(self.plan.theorem1_search_examples, self.seed)

    def traces(self):
        if "traces" not in self._setups:
            laws = traces(self.oracle.model, self.prompts(self.plan.trace_prompts), self.plan.trace_positions)
            self._setups["traces"] = laws, depth_pairs(self.R, self.plan.mode == "full")
        return self._setups["traces"]

    def theorem1_traces(self) -> CheckResult:
        return check_theorem1_traces(*self.traces(), self.model_name)

    def theorem2_traces(self) -> CheckResult:
        return check_theorem2_traces(*self.traces(), self.model_name)

    # -- 6. speed --------------------------------------------------------------------------------
    def speed(self) -> CheckResult:
        model = self.model_dt if self.model_dt is not None else self.model64
        baseline = fastdec_candidate(DecodeConfig("autoregressive"))
        if not _has_fastdec():
            baseline = self.user
        work = self.plan.speed  # `loopcert bench`'s workload and prompts: the same speedups
        prompts = model_prompts(model, self.model_name, work.prompts, max_len=work.prompt_len)
        return check_speed("speed", self.candidates, baseline, model, prompts, work, self.say)


def skipped_of(checks: list[CheckResult]) -> dict[str, str]:
    """Check name -> why it (or part of it) did not run: a skip is never silent; the
    verdict line, the certificate and the CLI's summary all name it."""
    out = {}
    for c in checks:
        why = c.details.get("skipped")
        if why:
            out[c.name] = why if isinstance(why, str) else "; ".join(map(str, why))
    return out


def certify(
    model_name: str | None = None,
    decoder: str | None = None,
    device: str = "cpu",
    dtype="float32",
    mode: str = "quick",
    seed: int = 0,
    progress: Progress | None = None,
    time_budget: float | None = None,
    shard: Shard | None = None,
    results: dict | None = None,
    jobs: int = 1,
) -> Certificate | dict:
    """Run every check of `mode` on the candidate; returns the certificate (proofs/certificate.py).

    The run is a list of work units in plan order (`plan_units`). With `shard` it runs only the
    shard's units and returns their raw results with the run's identity (proofs/run/shards.py);
    with `results` (merged shards) it runs nothing and assembles the certificate from them,
    through the same code as a single run. `jobs` > 1 runs the units (of the shard, if any) in
    that many forked worker processes (proofs/run/jobs.py): the same results, apart from timings.

    Usage errors (bad mode, dtype, seed, device, --decoder spec, model) raise LoopcertError
    before any check runs."""
    say = progress or (lambda _msg: None)
    if mode not in PLANS:
        raise LoopcertError(f"mode must be one of {sorted(PLANS)}, got {mode!r}")
    plan = PLANS[mode]
    dtype = parse_dtype(dtype)
    # every sampled check seeds a torch.Generator with seed + i: keep the last one below 2**64
    if check_int("seed", seed, 0) >= 2**63:
        raise LoopcertError(
            f"seed must be < 2**63 (sampled checks seed generators with seed + i), got {seed!r}"
        )
    if time_budget is not None:
        check_number("--time-budget (seconds)", time_budget, 0, low_open=True)
    check_jobs(jobs, device)
    check_device(device)
    model_name = model_name or default_model_name()
    user = user_candidate(decoder, connect=results is None) if decoder else None
    t_start = time.perf_counter()
    run = CertifyRun(plan, model_name, user, device, dtype, seed, say, time_budget)
    dname = dtype_name(dtype)
    what = f" (shard {shard})" if shard else (" (merging shards)" if results is not None else "")
    say(
        f"certifying {decoder or 'fastdec'} on {model_name} (R={run.R}, V={run.oracle.V}), {plan.mode} plan, "
        f"{device}, {dname}, seed {seed}{what}"
    )
    say("settings: " + "; ".join(c.label for c in run.candidates))

    units, assemble = plan_units(run, dname)
    ident = identity(run, decoder, time_budget)
    if results is None:
        todo = [(uid, fn) for k, (uid, fn) in enumerate(units) if shard is None or shard.takes(k)]
        run.pool_sampling([uid for uid, _ in todo], workers=jobs)
        if jobs > 1:
            say(f"running {len(todo)} work units in {jobs} worker processes")
            results = run_units(dispatch_order(run, todo), jobs, run.dispatch_share, run.returned_share)
            results = {uid: results[uid] for uid, _ in todo}  # plan order
        else:
            results = {uid: fn() for uid, fn in todo}
        if shard is not None:
            return {
                "shard": [shard.index, shard.count],
                "identity": ident,
                "units": [u for u, _ in units],
                "results": results,
                "seconds": time.perf_counter() - t_start,
            }
    checks = [fn(results) for fn in assemble]

    failed = tuple(c.name for c in checks if not c.passed)
    d1, d2 = default_depths(run.R)
    return Certificate(
        verdict=verdict_of(failed),
        failed=failed,
        skipped=skipped_of(checks),
        stamp={
            **certificate_stamp(model_name, decoder or "fastdec", device, dtype, plan, seed),
            "R": run.R,
            "vocab_size": run.oracle.V,
            "settings": [c.label for c in run.candidates],
            "default_depths": [d1, d2],
            "alpha": plan.alpha,
            "target_tv": plan.tv,
            "power": plan.power,
            "sampling_budget_s": run.sampling_budget_s,
            "work_units": len(units),
            "seconds": time.perf_counter() - t_start,
        },
        checks=tuple(checks),
    )


Unit = tuple[str, Callable[..., dict]]  # (stable id, run it(share=None) -> raw JSON-able result)
Assemble = Callable[[dict], CheckResult]  # {unit id: raw result} -> one check


def plan_units(run: CertifyRun, dname: str) -> tuple[list[Unit], list[Assemble]]:
    """The run's work units in plan order, and one assembly step per check (certificate order).

    A sampling check is one unit per case (`sampling/<model>/<setting>/<case>`), the mutation
    check one per mutant (`mutant/<name>`); every other check is one unit (`check/<name>`)
    whose raw result is its CheckResult."""
    units: list[Unit] = []
    assemble: list[Assemble] = []

    def whole(name: str, fn: Callable[[], CheckResult]) -> None:
        uid = f"check/{name}"
        units.append((uid, lambda share=None: _guard(name, fn, run.say).to_dict()))
        assemble.append(lambda res: CheckResult.from_dict(res[uid]))

    whole("greedy_float64", run.greedy_float64)
    if run.model_dt is not None:
        whole(f"greedy_{dname}", lambda: run.greedy_low(f"greedy_{dname}"))
    whole("bitwise_fixed_width", run.bitwise)
    for chk in run.sampling_checks():
        for u in chk.units:
            units.append((u.id, lambda share=None, chk=chk, u=u: run.sampling_unit_result(chk, u, share)))

        def sampled(res, chk=chk) -> CheckResult:
            raws = [res[u.id] for u in chk.units]
            t = sum(r.get("seconds", 0.0) for r in raws)
            return _guard(chk.label, lambda: run.sampling_result(chk, raws), run.say, seconds=t)

        assemble.append(sampled)
    whole("reproducibility", run.reproducible)
    library = run.mutant_library()
    for mt in library:  # one unit per mutant
        units.append((f"mutant/{mt.name}", lambda share=None, mt=mt: run.mutant_unit(mt)))

    def mutated(res) -> CheckResult:
        rows = [res[f"mutant/{mt.name}"] for mt in library]
        t = sum(r.get("seconds", 0.0) for r in rows)
        return _guard("mutation", lambda: run.mutation(rows), run.say, seconds=t)

    assemble.append(mutated)
    if run.plan.false_alarm:
        whole("false_alarm", run.false_alarm)
    for name, fn in (
        ("theorem1_random", run.theorem1_random),
        ("theorem1_search", run.theorem1_search),
        ("theorem1_traces", run.theorem1_traces),
        ("theorem2_traces", run.theorem2_traces),
        ("theorem2_published", check_theorem2_published),
        ("speed", run.speed),
    ):
        whole(name, fn)
    return units, assemble


def dispatch_order(run: CertifyRun, units: list[Unit]) -> list[Unit]:
    """The order a parallel run hands units out (results do not depend on it; the wall time
    does): the whole checks first (plan order; the speed check alone takes minutes and cannot be
    split), then the sampling units by decreasing planned N, then the mutants, so that no dear
    unit starts last while the other workers idle."""
    n = {uid: u.samples for uid, u in run.sampling_units_by_id().items()}

    def key(k: int) -> tuple:
        uid = units[k][0]
        kind = 0 if uid.startswith("check/") else (1 if uid in n else 2)
        return (kind, -n.get(uid, 0), k)

    return [units[k] for k in sorted(range(len(units)), key=key)]


def identity(run: CertifyRun, decoder: str | None, time_budget: float | None) -> dict:
    """What every shard of one run must share (proofs/run/shards.py IDENTITY)."""
    return {
        "commit": git_commit(),
        "plan": run.plan.mode,
        "plan_hash": plan_hash(run.plan),
        "model": run.model_name,
        "model_fingerprint": model_fingerprint(run.model64),
        "seed": run.seed,
        "decoder": decoder or "fastdec",
        "device": run.device,
        "dtype": dtype_name(run.dtype),
        "time_budget": time_budget,
    }


PREDICT_SECONDS = 5.0  # sampling time of each (setting, case) slice a prediction measures
PROBE_DIVISOR = 8  # a prediction runs each other check at about 1/8 of its size ...
MUTANT_PROBE_STRIDE = 4  # ... and every 4th mutant of the library
PROBE_FIELDS = {  # check -> the plan field its cost grows with, about linearly
    "greedy_float64": "greedy_prompts",
    "greedy_low": "greedy_prompts",
    "bitwise_fixed_width": "bitwise_prompts",
    "false_alarm": "false_alarm",
    "theorem1_random": "theorem1_random_cases",
    "theorem1_search": "theorem1_search_examples",
    "theorem1_traces": "trace_prompts",
    "theorem2_traces": "trace_prompts",
}


def probe_plan(plan: CertifyPlan, library: Sequence) -> tuple[CertifyPlan, dict[str, tuple[str, float]]]:
    """The plan cut down for a prediction, and per check (PROBE_FIELDS' names, "speed",
    "mutation") what was cut and the factor that scales the probe's time back to the plan's. The
    fixed costs (loading presets, warm-up) are scaled too: the prediction errs high."""
    cut, scale = {}, {}
    for check, f in PROBE_FIELDS.items():
        v = getattr(plan, f)
        if v:
            cut[f] = max(1, math.ceil(v / PROBE_DIVISOR))
            scale[check] = (f"{f} {cut[f]} of {v}", v / cut[f])
    r = plan.speed.repeats
    probe_r = max(1, math.ceil(r / PROBE_DIVISOR))
    cut["speed"] = replace(plan.speed, repeats=probe_r)
    scale["speed"] = (f"repeats {probe_r} of {r}", r / probe_r)
    names = tuple(mt.name for mt in library[::MUTANT_PROBE_STRIDE])
    cut["mutant_names"] = names
    scale["mutation"] = (f"{len(names)} of {len(library)} mutants", len(library) / max(1, len(names)))
    return replace(plan, **cut), scale


def makespan(seconds: Sequence[float], jobs: int) -> float:
    """Wall time of units of these durations handed out in this order to `jobs` workers, each to
    the first one free (what proofs/run/jobs.py does)."""
    free = [0.0] * max(1, jobs)
    for t in seconds:
        k = free.index(min(free))
        free[k] += t
    return max(free)


def predict(
    model_name: str | None = None,
    decoder: str | None = None,
    device: str = "cpu",
    dtype="float32",
    mode: str = "quick",
    seed: int = 0,
    progress: Progress | None = None,
    slice_seconds: float = PREDICT_SECONDS,
    jobs: int = 1,
) -> dict:
    """The whole plan's predicted time, per check, before running it (`loopcert certify --predict
    SECONDS`); nothing is certified.

    Sampling: N per case from the plan's target TV, at the samples/s measured on a slice of each
    (setting, case) (`slice_seconds` of sampling, in the chunks a real run draws): the time to reach
    the target without a budget cutting it. Every other check: run at about 1/PROBE_DIVISOR of its
    size (probe_plan), its time scaled back. Setup (models, exact laws) as measured. The wall time
    with `jobs` workers hands the units out in certify --jobs' order (dispatch_order, makespan),
    each worker at the rate measured here alone."""
    say = progress or (lambda _msg: None)
    if mode not in PLANS:
        raise LoopcertError(f"mode must be one of {sorted(PLANS)}, got {mode!r}")
    check_number("--predict (seconds)", slice_seconds, 0, 1e6, low_open=True)
    check_jobs(jobs, device)
    plan, dtype = PLANS[mode], parse_dtype(dtype)
    model_name = model_name or default_model_name()
    t0 = time.perf_counter()
    run = CertifyRun(plan, model_name, user_candidate(decoder) if decoder else None, device, dtype, seed, say)
    dname = dtype_name(dtype)
    units, _ = plan_units(run, dname)  # builds the sampling setups: exact laws, N per case
    setup = time.perf_counter() - t0
    say(f"setup (models, exact laws, N per case): {setup:.1f}s")
    rows, unit_seconds = [], {}
    for chk in run.sampling_checks():
        dec = None if chk.not_applicable else run.sampling_decoder(chk)
        s = run.sampling_setup(chk.model)
        for u, law in zip(chk.units, s["laws"], strict=True):
            row = {
                "model": chk.model,
                "setting": chk.candidate.label,
                "case": u.case,
                "planned": u.samples,
                "slice": 0,
                "samples_per_s": None,
                "predicted_seconds": 0.0,
                "no_power": u.samples == 0,
            }
            if u.samples and not isinstance(dec, NotApplicable):
                t = sample_tally(dec, law, u.samples, seed, time.perf_counter() + slice_seconds)
                rate = t["samples_per_s"] if t["samples"] else 0.0
                row.update(
                    slice=t["samples"],
                    samples_per_s=rate,
                    predicted_seconds=u.samples / rate if rate > 0 else math.inf,
                )
            rows.append(row)
            unit_seconds[u.id] = row["predicted_seconds"]
            got = (
                "no power (no view has 2 bins)"
                if not u.samples
                else (
                    "not applicable"
                    if isinstance(dec, NotApplicable)
                    else f"N = {u.samples}, {row['samples_per_s']:.1f} samples/s -> "
                    f"{row['predicted_seconds'] / 60:.1f} min"
                )
            )
            say(f"  {u.id}: {got}")
    checks = [
        {
            "check": chk.label,
            "samples": sum(u.samples for u in chk.units),
            "predicted_seconds": sum(unit_seconds[u.id] for u in chk.units),
            "how": "N / samples/s measured per case",
        }
        for chk in run.sampling_checks()
    ]
    sampling_s = sum(c["predicted_seconds"] for c in checks)
    full_plan = run.plan
    probe, scale = probe_plan(plan, run.mutant_library())
    run.plan, run._setups = probe, {k: v for k, v in run._setups.items() if isinstance(k, tuple)}
    try:
        probe_units, _ = plan_units(run, dname)
        mutant_t = 0.0
        for uid, fn in probe_units:
            if uid.startswith("sampling/"):
                continue
            t = time.perf_counter()
            fn()
            took = time.perf_counter() - t
            if uid.startswith("mutant/"):
                mutant_t += took
                continue
            name = uid.removeprefix("check/")
            key = "greedy_low" if name == f"greedy_{dname}" and name != "greedy_float64" else name
            how, factor = scale.get(key, ("whole", 1.0))
            checks.append(
                {"check": name, "predicted_seconds": took * factor, "how": f"probe {how} in {took:.1f}s"}
            )
            unit_seconds[uid] = took * factor
            say(f"  {uid}: probe ({how}) {took:.1f}s -> {took * factor / 60:.1f} min")
        how, factor = scale["mutation"]
        checks.append(
            {
                "check": "mutation",
                "predicted_seconds": mutant_t * factor,
                "how": f"probe {how} in {mutant_t:.1f}s",
            }
        )
        say(f"  mutation: probe ({how}) {mutant_t:.1f}s -> {mutant_t * factor / 60:.1f} min")
    finally:
        run.plan = full_plan
    per_mutant = mutant_t * factor / max(1, len(run.mutant_library()))
    ordered = [unit_seconds.get(uid, per_mutant) for uid, _ in dispatch_order(run, units)]  # as certify
    serial = setup + sum(ordered)
    wall = setup + makespan(ordered, jobs)
    no_power = sorted({r["case"] for r in rows if r["no_power"]})
    say(
        f"{plan.mode} plan: {sum(r['planned'] for r in rows)} samples in {len(rows)} (setting, case) pairs, "
        f"{sampling_s / 60:.1f} min of sampling (budget {plan.sampling_budget_s / 60:.1f} min per worker); "
        f"whole plan {serial / 60:.1f} min in one process, {wall / 60:.1f} min with --jobs {jobs}"
        + (f"; no power whatever the time: {', '.join(no_power)}" if no_power else "")
    )
    return {
        "mode": plan.mode,
        "model": model_name,
        "target_tv": plan.tv,
        "rows": rows,
        "checks": checks,
        "setup_seconds": setup,
        "no_power": no_power,
        "predicted_seconds": sampling_s,
        "serial_seconds": serial,
        "jobs": jobs,
        "wall_seconds": wall,
        "sampling_budget_s": plan.sampling_budget_s,
    }


def verdict_of(failed: Sequence[str]) -> str:
    """PASS; NON-REPRODUCIBLE when the only failure is that a seed does not reproduce its tokens
    (the law may be right: proofs/checks/reproducibility.py); else FAIL."""
    if not failed:
        return "PASS"
    return NON_REPRODUCIBLE if list(failed) == ["reproducibility"] else "FAIL"


class _Broken:
    """Stands in for a decoder its factory could not build: every call reports why."""

    def __init__(self, why: str):
        self.why = why

    def generate(self, *a, **k):
        raise RuntimeError(self.why)


def _has_fastdec() -> bool:
    try:
        import fastdec  # noqa: F401
    except ImportError:
        return False
    return True
