"""Run every check on a candidate and assemble the certificate (DESIGN.md section 6).

`certify(...)` returns the certificate as plain JSON-able data: a verdict, a stamp (commit,
versions, device, dtype, seeds, date) and one CheckResult per check. It computes; reports/
renders; loopcert/commands/certify.py writes. Two plans: QUICK (the CI gate, minutes on two
CPU cores) and FULL (nightly: more models, cases, samples, and the false-alarm rate).

Which model each check runs on, and why:
- greedy (float64): the certified model plus tiny presets of the other architectures;
- greedy in the run's dtype and bitwise: the certified model;
- sampling: the certified model when its vocabulary is tiny, else the tiny preset of its
  family, because enumerating and sampling a 256-token law N times at depth 32 does not fit in
  minutes on a CPU (~0.3 s per sample); FULL adds the certified model itself (head of the law
  + remainder, fewer cases and samples);
- mutation and false alarms: their own tiny preset (proofs/mutants.py says why);
- Theorems 1/2 and speed: the certified model.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

import refdec
from fastdec.config import DecodeConfig
from proofs import mutants as mutant_lib
from proofs.bitwise import check_bitwise
from proofs.candidates import Candidate, default_depths, fastdec_candidate, fastdec_grid, user_candidate
from proofs.distribution import Case, case_laws, check_distribution
from proofs.false_alarm import check_false_alarm
from proofs.greedy import check_greedy
from proofs.model_theorems import check_theorem1_traces, check_theorem2_traces, depth_pairs, traces
from proofs.oracle import Oracle
from proofs.progress import Progress
from proofs.prompts import model_prompts
from proofs.reproducible import check_reproducible
from proofs.result import CheckResult
from proofs.speed import check_speed
from proofs.stamp import stamp
from proofs.theorem1 import check_theorem1_random
from proofs.theorem1_search import check_theorem1_search
from proofs.theorem2 import check_theorem2_published
from refdec.config import TINY_PRESETS
from refdec.errors import LoopcertError
from refdec.io import parse_dtype
from refdec.sampling import SamplingParams
from refdec.validate import check_int

FALLBACK_MODEL = "tiny-raven"
NON_REPRODUCIBLE = "NON-REPRODUCIBLE"
REPRO_SEEDS, REPRO_TOKENS = 3, 6  # reproducibility: seeds x tokens, each decoded twice


@dataclass(frozen=True)
class CertifyPlan:
    mode: str
    greedy_presets: tuple[str, ...]  # tiny presets checked besides the certified model
    greedy_prompts: int
    greedy_tokens: int
    bitwise_prompts: int
    bitwise_tokens: int
    sampling_cases: tuple[tuple[str, SamplingParams, int], ...]  # (name, params, n tokens)
    samples: int  # N per sampling case
    large_model_cases: tuple[tuple[str, SamplingParams, int], ...]  # a large-vocabulary certified
    large_model_samples: int  # model is sampled too (head of the law) when this is > 0
    mutant_samples: int
    blackbox_mutant_samples: int  # fastdec's adaptive-verify: slower per sample, far off the law
    false_alarm: tuple[int, int] | None  # (replicates, N) or None
    theorem1_random_cases: int
    theorem1_search_examples: int  # hypothesis-guided search (proofs/theorem1_search.py)
    trace_prompts: int
    trace_positions: int  # at most this many positions (evenly spaced) of the trace prompts
    speed_prompts: int
    speed_tokens: int
    speed_repeats: int
    alpha: float = 1e-3  # family-wise level of each sampling check (Holm across its cases)
    mutant_names: tuple[str, ...] | None = None  # a subset of proofs.mutants.LIBRARY (None: all)


QUICK_CASES = (  # two cases cover T below and above 1, top-k and top-p: fastdec costs ~50 ms/sample
    ("T=0.7 top-k=4", SamplingParams(temperature=0.7, top_k=4), 3),
    ("T=1.5 top-p=0.9", SamplingParams(temperature=1.5, top_p=0.9), 3),
)
FULL_CASES = (
    ("T=0.7", SamplingParams(temperature=0.7), 3),
    ("T=1.5", SamplingParams(temperature=1.5), 3),
    ("top-k=2", SamplingParams(temperature=1.0, top_k=2), 3),
    ("T=0.7 top-k=4", SamplingParams(temperature=0.7, top_k=4), 3),
    ("top-p=0.5", SamplingParams(temperature=1.0, top_p=0.5), 3),
    ("T=1.5 top-p=0.9", SamplingParams(temperature=1.5, top_p=0.9), 3),
    ("T=1 n=4", SamplingParams(temperature=1.0), 4),  # 13^3 inner nodes: head of the law
)
LARGE_CASES = (  # a 256-token model at depth 32 costs ~0.3 s per 3-token sample on a CPU
    ("T=1", SamplingParams(temperature=1.0), 3),
    ("T=0.7 top-k=4", SamplingParams(temperature=0.7, top_k=4), 3),
)
QUICK = CertifyPlan("quick", greedy_presets=("tiny-ouro", "tiny-raven"), greedy_prompts=2,
                    greedy_tokens=12,
             bitwise_prompts=2, bitwise_tokens=16, sampling_cases=QUICK_CASES, samples=400,
             large_model_cases=(), large_model_samples=0, mutant_samples=1000, blackbox_mutant_samples=200,
             false_alarm=None, theorem1_random_cases=1000, theorem1_search_examples=200, trace_prompts=4,
             trace_positions=48, speed_prompts=1, speed_tokens=16, speed_repeats=2)
FULL = CertifyPlan("full", greedy_presets=TINY_PRESETS, greedy_prompts=6, greedy_tokens=24,
            bitwise_prompts=4, bitwise_tokens=32, sampling_cases=FULL_CASES, samples=1500,
            large_model_cases=LARGE_CASES, large_model_samples=500, mutant_samples=3000,
            blackbox_mutant_samples=1000, false_alarm=(200, 500), theorem1_random_cases=20000,
            theorem1_search_examples=3000, trace_prompts=8, trace_positions=256, speed_prompts=2,
            speed_tokens=64, speed_repeats=3)
PLANS = {"quick": QUICK, "full": FULL}


def default_model_name() -> str:
    """"default" when the trained model is installed, else the tiny preset of its family."""
    try:
        refdec.load_model("default")
    except LoopcertError:
        return FALLBACK_MODEL
    return "default"


def certificate_stamp(model_name: str, decoder: str, device: str, dtype: torch.dtype, plan: CertifyPlan,
                      seed: int) -> dict:
    """proofs.stamp's fields, plus what a certificate adds: decoder, plan, base seed."""
    seeds = {"sampling": [seed, seed + max(plan.samples, plan.large_model_samples) - 1],
             "mutants": [seed, seed + plan.mutant_samples - 1], "theorem1_random": seed, "greedy": 0}
    return {**stamp(model_name, device, dtype, seeds), "mode": plan.mode, "decoder": decoder, "seed": seed}


def load(name: str, dtype: torch.dtype, device: str):
    return refdec.load_model(name, dtype=dtype).to(device)


def pick_prompt(oracle: Oracle, prompts) -> tuple[int, ...]:
    """The prompt whose next-token law (T=1) has the most entropy: the most informative test."""
    def entropy(p):
        law = oracle.law(p, oracle.R, SamplingParams(temperature=1.0))
        return float(-(law * law.clamp_min(1e-300).log()).sum())

    return max(prompts, key=entropy)


def _guard(name: str, fn: Callable[[], CheckResult], progress: Progress) -> CheckResult:
    """Run one check; any exception becomes a failed result naming it (never a crash that would
    leave no report: a check that cannot run has failed). Usage errors are all raised by
    `certify` before the first check starts, so none is swallowed here."""
    t0 = time.perf_counter()
    progress(f"[{name}] ...")
    try:
        result = fn()
    except Exception as e:  # noqa: BLE001 - reported as a failed check (usage errors were raised before)
        result = CheckResult(name, math.nan, math.nan, False, {"error": f"{type(e).__name__}: {e}"})
    seconds = time.perf_counter() - t0
    result = replace(result, details={**result.details, "seconds": seconds})
    progress(f"[{name}] {'pass' if result.passed else 'FAIL'} ({seconds:.1f}s)")
    return result


class CertifyRun:
    """What every check of one certify run shares: plan, models, oracle, candidates, progress."""

    def __init__(self, plan: CertifyPlan, model_name: str, user: Candidate | None, device: str,
                 dtype: torch.dtype, seed: int, say: Progress):
        self.plan, self.model_name, self.user, self.device, self.dtype = plan, model_name, user, device, dtype
        self.seed, self.say = seed, say
        self.model64 = load(model_name, torch.float64, device)
        self.oracle = Oracle(self.model64)
        self.R = self.model64.cfg.recurrence
        self.model_dt = None if dtype == torch.float64 else load(model_name, dtype, device)
        self.candidates = self.grid(self.R)
        self._setups: dict = {}

    def grid(self, R: int) -> list[Candidate]:
        return [self.user] if self.user else fastdec_grid(R, self.plan.mode == "full")

    def prompts(self, k: int) -> list[tuple[int, ...]]:
        return model_prompts(self.model64, self.model_name, k)

    # -- 1. greedy exactness ------------------------------------------------------------------
    def greedy_float64(self) -> CheckResult:
        """float64 over models x prompts x settings; the certified model must take every setting,
        a tiny preset that a user decoder cannot take is listed as skipped."""
        runs, skipped = [], []
        names = [self.model_name] + [p for p in self.plan.greedy_presets if p != self.model_name]
        for name in names:
            ours = name == self.model_name
            m = self.model64 if ours else load(name, torch.float64, self.device)
            o = self.oracle if ours else Oracle(m)
            for c in self.grid(m.cfg.recurrence):
                try:
                    runs.append((name, c.label, c.build(m), o, torch.float64))
                except Exception as e:  # noqa: BLE001
                    if ours:
                        raise
                    skipped.append(f"{c.label} on {name}: {type(e).__name__}: {e}")
        prompts = {id(r[3]): model_prompts(r[3].model, r[0], self.plan.greedy_prompts) for r in runs}
        result = check_greedy("greedy_float64", runs, lambda o: prompts[id(o)], self.plan.greedy_tokens,
                              self.say)
        return replace(result, details={**result.details, "skipped": skipped})

    def greedy_low(self, name: str) -> CheckResult:
        runs = [(self.model_name, c.label, c.build(self.model_dt), self.oracle, self.dtype)
                for c in self.candidates]
        prompts = self.prompts(self.plan.greedy_prompts)
        return check_greedy(name, runs, lambda _o: prompts, self.plan.greedy_tokens, self.say)

    # -- 2. bitwise -----------------------------------------------------------------------------
    def bitwise(self) -> CheckResult:
        m32 = self.model_dt
        if self.dtype != torch.float32:
            m32 = load(self.model_name, torch.float32, self.device)
        prompts = self.prompts(self.plan.bitwise_prompts)
        return check_bitwise("bitwise_fixed_width", self.candidates, m32, prompts, self.plan.bitwise_tokens,
                             progress=self.say)

    # -- 3. sampling ------------------------------------------------------------------------------
    def sampling_plan(self) -> list[tuple[str, tuple, int, list[Candidate], str]]:
        """(model, cases, N, settings, why) for each model the sampling check runs on."""
        p = self.plan
        if self.oracle.V <= 64:
            return [(self.model_name, p.sampling_cases, p.samples, self.candidates,
                     "the certified model (tiny vocabulary: the law is enumerated in full)")]
        if self.user is not None and self.user.own_model:
            return [(self.model_name, p.sampling_cases, p.samples, self.candidates,
                     "the certified model (the decoder serves only it): head of the law plus a pooled "
                     "remainder")]
        family = self.model64.cfg.family
        tiny = next(t for t in TINY_PRESETS if refdec.get_preset(t).family == family)
        out = [(tiny, p.sampling_cases, p.samples, self.grid(refdec.get_preset(tiny).recurrence),
                f"the tiny preset of {self.model_name}'s family ({family}): its law is enumerated in "
                "full and sampled in milliseconds")]
        if p.large_model_samples:
            grid = [self.user] if self.user else fastdec_grid(self.R, False)
            out.append((self.model_name, p.large_model_cases, p.large_model_samples, grid,
                        "the certified model: head of the law plus a pooled remainder"))
        return out

    def sampling_setup(self, name: str, plan_cases: tuple, n: int) -> dict:
        """Oracle, prompt, cases, exact laws and the model to sample, once per model (lazily, so
        that their cost and any failure belong to a check)."""
        key = ("sampling", name)
        if key not in self._setups:
            o = self.oracle if name == self.model_name else Oracle(load(name, torch.float64, "cpu"))
            prompt = pick_prompt(o, model_prompts(o.model, name, 6))
            cases = [Case(cn, sp, prompt, k) for cn, sp, k in plan_cases]
            run_dtype = torch.float64 if self.dtype == torch.float64 else torch.float32
            self._setups[key] = {"cases": cases, "laws": case_laws(o, cases, n),
                                 "model": load(name, run_dtype, self.device)}
        return self._setups[key]

    def sampling_checks(self) -> list[tuple[str, Callable[[], CheckResult]]]:
        """One check per (model, setting): Holm across the cases of each."""
        out = []
        for name, plan_cases, n, grid, why in self.sampling_plan():
            for c in grid:
                label = f"sampling[{name}: {c.label}]"

                def check(c=c, label=label, name=name, plan_cases=plan_cases, n=n, why=why) -> CheckResult:
                    s = self.sampling_setup(name, plan_cases, n)
                    r = check_distribution(label, c.build(s["model"]), s["cases"], s["laws"], n, self.seed,
                                           self.plan.alpha, self.say)
                    extra = {"model": name, "why_this_model": why}
                    if s["model"].cfg.vocab_size >= 256:  # byte-level: show the prompt as text too
                        extra["prompt_text"] = bytes(t for t in s["cases"][0].prompt if t < 256).decode(
                            "utf-8", errors="replace")
                    return replace(r, details={**r.details, **extra})

                out.append((label, check))
        return out

    # -- 3b. reproducibility ---------------------------------------------------------------------
    def reproducible(self) -> CheckResult:
        model = self.model_dt if self.model_dt is not None else self.model64
        prompt = self.prompts(1)[0]
        seeds = [self.seed + i for i in range(REPRO_SEEDS)]
        return check_reproducible("reproducibility", self.candidates, model, prompt, REPRO_TOKENS, seeds,
                                  self.say)

    # -- 4. mutants and false alarms -------------------------------------------------------------
    def mutation(self) -> CheckResult:
        names = self.plan.mutant_names
        lib = tuple(mt for mt in mutant_lib.LIBRARY if (mt.fastdec is None or _has_fastdec())
                    and (names is None or mt.name in names))
        return mutant_lib.check_mutants(self.plan.mutant_samples, self.seed, self.plan.alpha, lib,
                                        progress=self.say, blackbox_samples=self.plan.blackbox_mutant_samples)

    def false_alarm(self) -> CheckResult:
        reps, n = self.plan.false_alarm
        return check_false_alarm(reps, n, self.seed, progress=self.say)

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
        return check_speed("speed", self.candidates, baseline, model, self.prompts(self.plan.speed_prompts),
                           self.plan.speed_tokens, self.plan.speed_repeats, self.say)


def certify(model_name: str | None = None, decoder: str | None = None, device: str = "cpu",
            dtype="float32", mode: str = "quick", seed: int = 0,
            progress: Progress | None = None) -> dict:
    """Run every check of `mode` on the candidate; returns the certificate (JSON-able dict).

    Usage errors (bad mode, dtype, seed, device, --decoder spec, model) raise LoopcertError
    before any check runs."""
    say = progress or (lambda _msg: None)
    if mode not in PLANS:
        raise LoopcertError(f"mode must be one of {sorted(PLANS)}, got {mode!r}")
    plan = PLANS[mode]
    dtype = parse_dtype(dtype)
    check_int("seed", seed, 0)
    if not (device == "cpu" or device.startswith("cuda")):
        raise LoopcertError(f"--device must be cpu or cuda[:N], got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise LoopcertError(f"--device {device!r} requested but CUDA is not available")
    model_name = model_name or default_model_name()
    user = user_candidate(decoder) if decoder else None
    t_start = time.perf_counter()
    run = CertifyRun(plan, model_name, user, device, dtype, seed, say)
    dname = str(dtype).replace("torch.", "")
    say(f"certifying {decoder or 'fastdec'} on {model_name} (R={run.R}, V={run.oracle.V}), {plan.mode} plan, "
        f"{device}, {dname}, seed {seed}")
    say("settings: " + "; ".join(c.label for c in run.candidates))

    todo: list[tuple[str, Callable[[], CheckResult]]] = [("greedy_float64", run.greedy_float64)]
    if run.model_dt is not None:
        todo.append((f"greedy_{dname}", lambda: run.greedy_low(f"greedy_{dname}")))
    todo.append(("bitwise_fixed_width", run.bitwise))
    todo += run.sampling_checks()
    todo.append(("reproducibility", run.reproducible))
    todo.append(("mutation", run.mutation))
    if plan.false_alarm:
        todo.append(("false_alarm", run.false_alarm))
    todo += [("theorem1_random", run.theorem1_random), ("theorem1_search", run.theorem1_search),
             ("theorem1_traces", run.theorem1_traces),
             ("theorem2_traces", run.theorem2_traces), ("theorem2_published", check_theorem2_published),
             ("speed", run.speed)]
    checks = [_guard(name, fn, say) for name, fn in todo]

    failed = [c.name for c in checks if not c.passed]
    d1, d2 = default_depths(run.R)
    return {
        "verdict": verdict_of(failed),
        "passed": not failed,
        "failed": failed,
        "stamp": {**certificate_stamp(model_name, decoder or "fastdec", device, dtype, plan, seed),
                  "R": run.R, "vocab_size": run.oracle.V, "settings": [c.label for c in run.candidates],
                  "default_depths": [d1, d2], "alpha": plan.alpha, "samples": plan.samples,
                  "seconds": time.perf_counter() - t_start},
        "checks": [c.to_dict() for c in checks],
    }


def verdict_of(failed: list[str]) -> str:
    """PASS; NON-REPRODUCIBLE when the only failure is that a seed does not reproduce its tokens
    (the law may be right: proofs/reproducible.py); else FAIL."""
    if not failed:
        return "PASS"
    return NON_REPRODUCIBLE if failed == ["reproducibility"] else "FAIL"


def _has_fastdec() -> bool:
    try:
        import fastdec  # noqa: F401
    except ImportError:
        return False
    return True
