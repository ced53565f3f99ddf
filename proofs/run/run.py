"""What every check of one certify run shares (docs/design.md section 6): the models, the caches and
the dispatch to each check; the checks themselves live in proofs/checks/.

Which model each check runs on, and why:
- greedy (float64): the certified model plus tiny presets of the other architectures;
- greedy in the run's dtype and bitwise: the certified model;
- sampling: the certified model, at its own vocabulary (the law is binned from its head, never
  enumerated whole: proofs/stats/views.py); FULL adds the tiny preset of its family as extra
  evidence, never as a replacement. N per case comes from the plan's target TV
  (proofs/checks/distribution.py); a case that cannot reach it fails as "no power"
  (proofs/run/sampling_units.py runs those checks as work units). Every case is judged under
  the sampler convention the certified decoder declares (`sampler_order`); with --relative-to
  the same cases are drawn from both decoders for the engine-relative check
  (proofs/run/relative_units.py);
- mutation and false alarms: their own tiny preset (proofs/checks/mutation.py says why);
- Theorems 1/2 and speed: the certified model.

A decoder factory may decline a model it does not serve by raising
proofs.decoders.protocol.NotApplicable: that run is reported "not applicable" with the reason;
declining the certified model itself is a usage error before any check (proofs/run/certify.py
check_applies); any other error is a failure (a factory's error is named as the factory's:
proofs.decoders.candidates.DecoderFactoryError).

What a run builds once and keeps, the first time it is needed: the sampling setup of each sampled
model (when the work units are planned: their N comes from it), the decoder of each sampling
check (when its first unit samples: a shard builds only its own), the mutants' shared models and
laws and the depth traces (when their check runs, so that their cost and any failure belong to it).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace

import torch

import refdec
from analysis.traces import depth_pairs, traces
from fastdec.decoder import MAX_BATCH
from proofs.boundaries import Boundary
from proofs.boundaries import collect as collect_boundaries
from proofs.checks import mutation as mutant_lib
from proofs.checks.bitwise import check_bitwise
from proofs.checks.convention import check_convention
from proofs.checks.depth import check_depth, horizon_for, placements
from proofs.checks.false_alarm import check_false_alarm
from proofs.checks.greedy import check_greedy, float64_runs
from proofs.checks.positions import check_positions_of
from proofs.checks.reproducibility import SAMPLING as REPRO_SAMPLING
from proofs.checks.reproducibility import check_reproducible
from proofs.checks.seed_invariance import check_decoders as check_seed_invariance
from proofs.checks.speed import check_certified_speed
from proofs.checks.theorem1 import (
    check_theorem1_random,
    check_theorem1_search,
    check_theorem1_traces,
    not_applicable_traces,
    traces_not_applicable,
)
from proofs.checks.theorem2 import check_theorem2_traces
from proofs.cost.need import FIT_HINT, run_need, sampling_rows
from proofs.decoder_attributes import ALL_FIELDS, SamplingSupport, declared_sampler_order
from proofs.decoders.candidates import (
    Candidate,
    DecoderFactoryError,
    build_or_failure,
    factory_failure,
    fastdec_grid,
)
from proofs.decoders.declared import Declared, declared_by
from proofs.decoders.protocol import Decoder, NotApplicable
from proofs.prompts import long_prompt, model_folder, model_prompts
from proofs.result import CheckResult
from proofs.run.budget import SamplingPool
from proofs.run.cases import (
    SamplingSetup,
    boundary_positions,
    chosen_cases,
    declared_plan,
    planned_cases,
    planned_relative,
    recorded_order,
    relative_plan,
    setup_record,
)
from proofs.run.plan import REPRO_SEEDS, REPRO_TOKENS, SEED_NEIGHBOURS, CertifyPlan, sampling_preset
from proofs.run.probe import in_child
from proofs.stats.exact_laws import Oracle
from refdec.errors import LoopcertError
from refdec.files import read_config
from refdec.memory import check_fits
from refdec.model import LoopedLM
from refdec.progress import Progress
from refdec.sampling import TEMPERATURE_FIRST, SamplingParams


def load(name: str, dtype: torch.dtype, device: str) -> LoopedLM:
    return refdec.load_model(name, dtype=dtype).to(device)


@dataclass(frozen=True)
class RunModels:
    """The certified model as every check of a run reads it; safe to share between runs of one
    model, dtype and device (a prediction's probe run reuses them: proofs/cost/predict.py)."""

    model64: LoopedLM  # float64, on the run's device
    oracle: Oracle  # exact float64 laws of model64 (on the CPU)
    model_dt: LoopedLM | None  # in the run's dtype; None in a float64 run
    # the most seeds one sampling call decodes together, where the KV caches of fastdec's MAX_BATCH
    # would not fit (sampling_rows); None: the decoder's own limit. Samples do not depend on it.
    sampling_rows: int | None = None

    @classmethod
    def load(
        cls,
        name: str,
        dtype: torch.dtype,
        device: str,
        plan: CertifyPlan | None = None,
        fastdec_grid: bool = True,
    ) -> RunModels:
        """The models, after run_need(name, dtype, device, plan, fastdec_grid) is found to fit at
        the sampling rows that fit (sampling_rows)."""
        rows = sampling_rows(name, dtype, device, plan, fastdec_grid)
        need = run_need(name, dtype, device, plan, fastdec_grid, rows or MAX_BATCH)
        check_fits(
            need, f"certifying {name}" + (f" (sampling {rows} row(s) a call)" if rows else ""), FIT_HINT
        )
        model64 = load(name, torch.float64, device)
        oracle = Oracle.over(model64)  # on the CPU: the same float64 weights, not a second copy
        return cls(model64, oracle, None if dtype == torch.float64 else load(name, dtype, device), rows)

    def sampling_model(self, dtype: torch.dtype, device: str) -> LoopedLM | None:
        """The copy the sampling decoders take (float64 in a float64 run, else float32) when this
        run already holds it; None when it must be loaded (a bfloat16 run's float32 copy)."""
        if dtype == torch.float64:
            return self.model64
        if self.model_dt is not None and dtype_of(self.model_dt) == torch.float32:
            return self.model_dt
        return None


def raw_config(name: str) -> dict | None:
    """The model folder's config.json (the windows and lengths ModelConfig does not keep), or None."""
    folder = model_folder(name)
    if folder is None or not (folder / "config.json").is_file():
        return None
    try:
        return read_config(folder)
    except LoopcertError:
        return None


def dtype_of(model: LoopedLM) -> torch.dtype:
    return next(model.parameters()).dtype


class CertifyRun:
    """What every check of one certify run shares: plan, models, oracle, candidates, progress,
    the sampling setups and the sampling time pool. `models` and `sampling_setups` may come from
    another run of the same model, dtype, device and sampling plan (they are then not rebuilt)."""

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
        *,
        models: RunModels | None = None,
        sampling_setups: Mapping[str, SamplingSetup] | None = None,
        planned: Mapping[str, dict] | None = None,
        relative: Candidate | None = None,
        compile: bool = False,
        forks: bool = False,
    ):
        self.compile = compile  # fastdec's grid with compiled engine steps (certify --compile)
        # True: the run forks workers (--jobs N): a user decoder is then never built in this
        # process before they fork, only in a probe child (declared_of: proofs/run/probe.py)
        self.forks = forks
        self.plan, self.model_name, self.user, self.device, self.dtype = plan, model_name, user, device, dtype
        self.relative = relative  # --relative-to: the same engine's plain decoder (needs a user decoder)
        self.sampling_budget_s = plan.sampling_budget_s if time_budget is None else float(time_budget)
        self.budget_given = time_budget is not None  # --time-budget caps everything it samples
        self.seed, self.say = seed, say
        self.models = m = models or RunModels.load(model_name, dtype, device, plan, user is None)
        self.model64, self.oracle, self.model_dt = m.model64, m.oracle, m.model_dt
        if m.sampling_rows is not None:
            say(
                f"sampling {m.sampling_rows} sequence(s) a call: the KV caches of {MAX_BATCH} do not fit the "
                "memory free (the samples do not depend on it)"
            )
        self.R = self.model64.cfg.recurrence
        self.candidates = self.grid(self.R)
        self.sampling_setups: dict[str, SamplingSetup] = dict(sampling_setups or {})  # model name -> setup
        # model name -> the planning choices made elsewhere (proofs/run/cases.py setup_record: a
        # --plan file, merged shards); their sampling setups follow them, never rechoose
        self.planned: dict[str, dict] = dict(planned or {})
        # check label -> its decoder, or why the factory declined the model (a shard builds only
        # the decoders of the units it samples)
        self.sampling_decoders: dict[str, Decoder | NotApplicable] = {}
        self.pool: SamplingPool | None = None  # the sampling units' time (proofs/run/sampling_units.py)
        # refdec's float64 greedy tokens by (oracle, prompt, n): greedy_float64 and greedy_<dtype>
        # compare against the same reference decode, which at 1.4B parameters takes minutes
        self.greedy_references: dict[tuple, list[int]] = {}

    def with_plan(self, plan: CertifyPlan) -> CertifyRun:
        """A run of `plan` otherwise like this one, sharing its models and sampling setups; `plan`
        must choose and plan the same cases (a prediction's probe plan: proofs/cost/predict.py)."""
        same = ("sampling_cases", "case_cap", "target")
        changed = [f for f in same if getattr(plan, f) != getattr(self.plan, f)]
        if changed:
            raise ValueError(f"a run sharing sampling setups needs the same {', '.join(changed)}")
        return CertifyRun(
            plan,
            self.model_name,
            self.user,
            self.device,
            self.dtype,
            self.seed,
            self.say,
            self.sampling_budget_s,
            models=self.models,
            sampling_setups=self.sampling_setups,
            planned=self.planned,
            relative=self.relative,
            compile=self.compile,
            forks=self.forks,
        )

    @functools.cached_property
    def sampler_order(self) -> str:
        """The sampler convention every sampling case is judged under: the one the certified
        decoder declares (proofs.decoder_attributes.declared_sampler_order; fastdec's grid:
        temperature-first). A plan made elsewhere (a --plan file, merged or shipped setups) says
        it; else the candidate when it declares one without being built; else a decoder built on
        the certified model once. A factory that cannot build one leaves the default: the checks
        that build it then fail naming why."""
        if self.user is None:
            return TEMPERATURE_FIRST
        for record in self.planned.values():
            return recorded_order(record)
        for setup in self.sampling_setups.values():
            if setup.laws:
                return setup.laws[0].case.sampling.order
        if self.user.sampler_order is not None:
            return self.user.sampler_order
        return self.declared_of(self.user).sampler_order

    @functools.cached_property
    def sampling_support(self) -> SamplingSupport:
        """Which of the engines' other sampling parameters the certified decoder honours, and its
        conventions for them (proofs.decoder_attributes.declared_sampling; fastdec's grid: every
        one, vLLM's conventions). With --relative-to, only the fields both decoders declare, and
        the two must declare the same conventions."""
        if self.user is None:
            return ALL_FIELDS
        support = self.support_of(self.user)
        if self.relative is not None:
            other = self.support_of(self.relative)
            mine = dataclasses.replace(support, fields=other.fields)
            if mine != other:
                raise LoopcertError(
                    f"{self.user.label} and {self.relative.label} declare other sampling conventions "
                    f"({support} against {other}): the engine-relative check compares them under one"
                )
            support = dataclasses.replace(support, fields=support.fields & other.fields)
        return support

    def support_of(self, candidate: Candidate) -> SamplingSupport:
        """What one candidate declares: known without building it, else read from a decoder built on
        the certified model (a factory that cannot build one declares nothing: the checks that
        build it fail naming why)."""
        if candidate.sampling is not None:
            return candidate.sampling
        return self.declared_of(candidate).sampling

    def declared_of(self, candidate: Candidate) -> Declared:
        """What a user decoder declares, and whether its factory builds one on the certified model
        (proofs/decoders/declared.py): built once, in a probe child when the run forks workers (an
        engine started here would not survive the fork into them: proofs/run/probe.py)."""
        got = self.__dict__.setdefault("_declared", {})
        if candidate.label not in got:
            model = self.model_dt if self.model_dt is not None else self.model64

            def ask() -> Declared:
                return declared_by(candidate.build, model, candidate.label if candidate.probe else None)

            got[candidate.label] = (
                in_child(ask, f"reading what {candidate.label} declares") if self.forks else ask()
            )
        return got[candidate.label]

    @functools.cached_property
    def declared(self) -> tuple[CertifyPlan, tuple[str, ...]]:
        """(the plan's sampling cases that the decoder is sampled under, the cases left out as
        "<case> (<fields it does not declare>)"): proofs/run/cases.py declared_plan."""
        return declared_plan(self.plan, self.sampling_support)

    def grid(self, R: int) -> list[Candidate]:
        return [self.user] if self.user else fastdec_grid(R, self.plan.mode == "full", self.compile)

    def prompts(self, k: int) -> list[tuple[int, ...]]:
        return model_prompts(self.model64, self.model_name, k)

    # -- 1. greedy exactness ------------------------------------------------------------------
    def greedy_float64(self) -> CheckResult:
        """float64 over models x prompts x settings (proofs/checks/greedy.py float64_runs); keeps the
        certified model's reference decodes for greedy_<dtype>."""
        runs, not_applicable = float64_runs(
            self.model_name,
            self.model64,
            self.oracle,
            self.plan.greedy_presets,
            self.grid,
            lambda name: load(name, torch.float64, self.device),
        )
        prompts = {id(r[3]): model_prompts(r[3].model, r[0], self.plan.greedy_prompts) for r in runs}
        result = check_greedy(
            "greedy_float64",
            runs,
            lambda o: prompts[id(o)],
            self.plan.greedy_tokens,
            self.say,
            references=self.greedy_references,
        )
        # keep the certified model's only: the presets' oracles die here, and a key holds id(oracle)
        mine = id(self.oracle)
        self.greedy_references = {k: v for k, v in self.greedy_references.items() if k[0] == mine}
        return result.with_details(not_applicable=not_applicable)

    def greedy_low(self, name: str) -> CheckResult:
        runs = [
            (self.model_name, c.label, c.build(self.model_dt), self.oracle, self.dtype)
            for c in self.candidates
        ]
        prompts = self.prompts(self.plan.greedy_prompts)
        return check_greedy(
            name,
            runs,
            lambda _o: prompts,
            self.plan.greedy_tokens,
            self.say,
            references=self.greedy_references,
        )

    # -- 1b. greedy at depth and boundary coverage (proofs/boundaries.py, proofs/checks/depth.py)
    @functools.cached_property
    def depth_decoders(self) -> list[tuple[str, Decoder | DecoderFactoryError, torch.dtype]]:
        """(setting, decoder, dtype) of the certified model in the run's dtype, built once: the
        decoders the greedy-at-depth check runs and whose `boundaries` the run collects."""
        model = self.model_dt if self.model_dt is not None else self.model64
        out = []
        for c in self.candidates:
            try:
                dec = build_or_failure(c, model, self.model_name)
            except NotApplicable as e:  # checked before any check (check_applies): a failure here
                dec = DecoderFactoryError(factory_failure(self.model_name, e))
            out.append((c.label, dec, self.dtype))
        return out

    @functools.cached_property
    def boundaries(self) -> list[Boundary]:
        """Every boundary of the certified model and decoders (proofs/boundaries.py): the model's
        config (and its folder's config.json), each decoder's declaration and speculation widths,
        the ladder up to the horizon."""
        if self.user is not None:  # what it declares, read without starting its engine here
            decs = [d for d in (self.declared_of(self.user),) if d.built]
        else:
            decs = [d for _, d, _ in self.depth_decoders if not isinstance(d, DecoderFactoryError)]
        raw = raw_config(self.model_name)
        first = collect_boundaries(self.model64.cfg, decs, 2, raw_config=raw)
        h = self.depth_horizon(first)
        return collect_boundaries(self.model64.cfg, decs, h, raw_config=raw)

    def case_boundaries(self) -> list[Boundary]:
        """The boundaries the plan's exact-law cases are also placed at (proofs/run/cases.py
        boundary_positions), none when the plan asks for none."""
        if not self.plan.boundary_cases:
            return []
        return boundary_positions(
            self.boundaries, self.depth_horizon(), self.plan.boundary_cases, self.model64.cfg.max_seq_len
        )

    def depth_horizon(self, boundaries=None) -> int:
        return horizon_for(
            self.boundaries if boundaries is None else boundaries,
            self.plan.depth_context,
            self.plan.depth_cap,
            self.model64.cfg.max_seq_len,
        )

    def greedy_depth(self) -> CheckResult:
        h = self.depth_horizon()
        places = placements(self.boundaries, h, self.model64.cfg.max_seq_len)
        self.say(f"  greedy_depth: horizon {h}, {len(places)} placements, {len(self.boundaries)} boundaries")
        result = check_depth(
            "greedy_depth",
            self.model_name,
            self.depth_decoders,
            self.oracle,
            lambda n: long_prompt(self.model64, self.model_name, n),
            places,
            self.boundaries,
            h,
            self.say,
            self.greedy_references,
        )
        self.__dict__.pop("depth_decoders", None)  # their KV caches are not kept through the sampling
        return result

    # -- 2. bitwise -----------------------------------------------------------------------------
    def bitwise(self) -> CheckResult:
        m32 = self.float32_model()
        prompts = self.prompts(self.plan.bitwise_prompts)
        return check_bitwise(
            "bitwise_fixed_width",
            self.candidates,
            m32,
            prompts,
            self.plan.bitwise_tokens,
            progress=self.say,
            compile=self.compile,
        )

    def float32_model(self) -> LoopedLM:
        """The float32 weights of the bitwise check: the run's own copy (a float32 run), the copy
        a bfloat16 or float16 run samples with when its setup holds it (one float32 copy, as
        run_need counts), else a copy loaded for this check and dropped after it (a float64 run:
        run_need counts it beside the check's KV caches). The same weights whichever: the same
        figures."""
        if self.model_dt is not None and dtype_of(self.model_dt) == torch.float32:
            return self.model_dt
        setup = self.sampling_setups.get(self.model_name)
        if setup is not None and dtype_of(setup.model) == torch.float32:
            return setup.model
        return load(self.model_name, torch.float32, self.device)

    # -- 3. sampling (the checks themselves are work units: proofs/run/sampling_units.py) ---------------
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
        tiny = sampling_preset(self.plan, self.model_name, self.model64.cfg.family)
        if tiny is not None:
            family = self.model64.cfg.family
            out.append(
                (
                    tiny,
                    self.grid(refdec.get_preset(tiny).recurrence),
                    f"extra evidence: the tiny preset of {self.model_name}'s family ({family})",
                )
            )
        return out

    def sampling_setup(self, name: str) -> SamplingSetup:
        """The cases, their laws and N, and the model to sample, of model `name`: built once."""
        if name not in self.sampling_setups:
            o = self.oracle if name == self.model_name else Oracle(load(name, torch.float64, "cpu"))
            relative = None
            if name in self.planned:
                laws, samples = planned_cases(o, name, self.planned[name])
                relative = planned_relative(self.planned[name])
            else:
                at = self.case_boundaries() if name == self.model_name else ()
                laws, samples = chosen_cases(
                    o, name, self.declared[0], self.sampler_order, self.sampling_support, at
                )
            relative = relative or relative_plan(laws, self.plan)
            run_dtype = torch.float64 if self.dtype == torch.float64 else torch.float32
            held = self.models.sampling_model(run_dtype, self.device) if name == self.model_name else None
            model = held if held is not None else load(name, run_dtype, self.device)
            self.sampling_setups[name] = SamplingSetup(laws, samples, model, relative)
        return self.sampling_setups[name]

    @functools.cached_property
    def pool_budget_s(self) -> float:
        """The sampling time of the run's pool: the sampling budget; with --relative-to and the
        plan's budget (no --time-budget), that much more in proportion to the engine-relative
        units' draws, so that the sampling checks keep the time the plan gives them (a given
        --time-budget caps both)."""
        if self.relative is None or self.budget_given:
            return self.sampling_budget_s
        setups = [self.sampling_setup(name) for name, _, _ in self.sampling_plan()]
        one = sum(sum(s.samples) for s in setups)
        two = sum(2 * sum(s.relative) for s in setups)
        return self.sampling_budget_s * (one + two) / max(1, one)

    def sampling_record(self) -> dict[str, dict]:
        """{model: its planning choices (setup_record)} of every model this run samples; the
        engine-relative check's N too when the run has one."""
        setups = {name: self.sampling_setup(name) for name, _, _ in self.sampling_plan()}
        return {
            name: setup_record(s.laws, s.samples, s.relative if self.relative else ())
            for name, s in setups.items()
        }

    def sampling_decoder(self, label: str, candidate: Candidate, model: str) -> Decoder | NotApplicable:
        """The decoder of sampling check `label` (candidate on model), built once per process; a
        factory declining a model other than the certified one is kept as the NotApplicable."""
        if label not in self.sampling_decoders:
            try:
                decoder = candidate.build(self.sampling_setup(model).model)
            except NotApplicable as e:
                if model == self.model_name:
                    raise
                self.sampling_decoders[label] = NotApplicable(str(e) or "declined by the factory")
                return self.sampling_decoders[label]
            declared = declared_sampler_order(decoder)
            if declared != self.sampler_order:
                raise LoopcertError(
                    f"{candidate.label} declares sampler_order {declared!r}, but the run judges every "
                    f"case under {self.sampler_order!r} (the certified decoder's convention)"
                )
            self.sampling_decoders[label] = decoder
        return self.sampling_decoders[label]

    def sampler_convention(self) -> CheckResult:
        """How far the other convention's laws lie from the ones judged, on every sampled case
        (proofs/checks/convention.py): a finding, run when the decoder declares a convention
        other than temperature-first."""
        laws = {}
        for name, _, _ in self.sampling_plan():
            o = self.oracle if name == self.model_name else Oracle(load(name, torch.float64, "cpu"))
            laws[name] = (o, self.sampling_setup(name).laws)
        return check_convention("sampler_convention", laws)

    # -- 3c. the per-position test on long samples (proofs/checks/positions.py) ----------------------
    def positions_candidates(self) -> list[Candidate]:
        """The settings the per-position test samples: the user's decoder, or fastdec's grid (the
        quick plan: only its last setting, the most speculative)."""
        p = self.plan.positions
        if p is None:
            return []
        return self.candidates if self.user is not None or p.all_settings else self.candidates[-1:]

    def positions_cases(self) -> list[tuple[str, SamplingParams, float | None]]:
        """(case name, law, drift) of each law the per-position test samples at depth: the plan's
        own (T=1 without a filter; name ""), then, when the plan asks (`cases`), every sampling
        case of the certified model the decoder declares, as the sampling check resolved it (its
        logit bias on the model's own tokens), without its stop tokens: a long sample must run to
        its horizon (a stop inside an accepted block is the sampling check's and the mutants'). The
        cases the plan adds at boundaries are the first case again after other prompts: their
        positions are read by the long samples already."""
        p = self.plan.positions
        if p is None:
            return []
        out = [("", p.sampling, p.drift)]
        if p.cases:
            entries = len(self.declared[0].sampling_cases)  # the plan's own cases, not those at boundaries
            for law in self.sampling_setup(self.model_name).laws[:entries]:
                out.append((law.case.name, replace(law.case.sampling, stop_token_ids=()), p.case_drift))
        return out

    @staticmethod
    def positions_name(model: str, setting: str, case: str) -> str:
        return f"positions[{model}: {setting}{f' / {case}' if case else ''}]"

    def positions(self, candidate: Candidate, case: tuple[str, SamplingParams, float | None]) -> CheckResult:
        """The per-position test of one setting and one law on the certified model
        (proofs/checks/positions.py check_positions_of): its sampling check's decoder (built once),
        the run's sampler convention."""
        decoder = self.sampling_decoder(
            f"sampling[{self.model_name}: {candidate.label}]", candidate, self.model_name
        )
        return check_positions_of(
            self.positions_name(self.model_name, candidate.label, case[0]),
            decoder,
            self.model64,
            self.prompts(1)[0],
            self.plan.positions,
            self.sampler_order,
            raw_config(self.model_name),
            self.seed,
            self.model_name,
            candidate.label,
            self.models.sampling_rows,
            self.say,
            case if case[0] else None,
        )

    # -- end of the per-position block ------------------------------------------------------------

    # -- 3b. reproducibility ---------------------------------------------------------------------
    def reproducible(self) -> CheckResult:
        model = self.model_dt if self.model_dt is not None else self.model64
        prompt = self.prompts(1)[0]
        seeds = [self.seed + i for i in range(REPRO_SEEDS)]
        return check_reproducible(
            "reproducibility", self.candidates, model, prompt, REPRO_TOKENS, seeds, self.say
        )

    def seed_invariance(self) -> CheckResult:
        """Each setting's target (prompt, T=1, seed) decoded alone and beside the model's other
        prompts, first, middle and last of a generate_batch call (proofs/checks/seed_invariance.py)."""
        model = self.model_dt if self.model_dt is not None else self.model64
        prompts = self.prompts(1 + SEED_NEIGHBOURS)
        seeds = [self.seed + i for i in range(REPRO_SEEDS)]
        decoders = [(c.label, c.build(model)) for c in self.candidates]
        return check_seed_invariance(
            "seed_invariance",
            decoders,
            prompts[0],
            prompts[1:],
            REPRO_TOKENS,
            REPRO_SAMPLING,
            seeds,
            self.say,
        )

    # -- 4. mutants and false alarms -------------------------------------------------------------
    def mutant_library(self) -> tuple[mutant_lib.Mutant, ...]:
        ids = self.plan.mutant_ids
        return tuple(mt for mt in mutant_lib.LIBRARY if ids is None or mt.id in ids)

    @functools.cached_property
    def mutant_run(self) -> mutant_lib.MutantRun:
        """The models and exact laws the mutants share, built once per process."""
        return mutant_lib.MutantRun(
            self.plan.target,
            self.seed,
            progress=self.say,
            blackbox_samples=self.plan.blackbox_mutant_samples,
            require_all=self.plan.mode == "full",
            depth=(self.plan.depth_context, self.plan.depth_cap),
        )

    def mutant_unit(self, mt: mutant_lib.Mutant) -> dict:
        """One mutant's row (a work unit: `mutant/<id>`), or why it has none."""
        try:
            return self.mutant_run.row(mt)
        except Exception as e:  # noqa: BLE001 - the mutation check fails naming it
            return {"id": mt.id, "unit_error": f"{type(e).__name__}: {e}"}

    def mutation(self, rows: list[dict]) -> CheckResult:
        """The mutation check from every mutant's row (any shard's)."""
        err = next((r for r in rows if "unit_error" in r), None)
        if err is not None:
            raise RuntimeError(f"mutant {err['id']}: {err['unit_error']}")
        return self.mutant_run.result(rows)

    def false_alarm(self) -> CheckResult:
        return check_false_alarm(self.plan.false_alarm, self.plan.target, self.seed, progress=self.say)

    # -- 5. theorems -----------------------------------------------------------------------------
    def theorem1_random(self) -> CheckResult:
        return check_theorem1_random(self.plan.theorem1_random_cases, self.seed)

    def theorem1_search(self) -> CheckResult:
        return check_theorem1_search(self.plan.theorem1_search_examples, self.seed)

    @functools.cached_property
    def traces(self) -> tuple[torch.Tensor, list[tuple[int, int]]]:
        """(R, P, V) laws of the trace prompts at every depth, and the depth pairs (d1, d2) both
        trace checks read."""
        laws = traces(self.oracle.model, self.prompts(self.plan.trace_prompts), self.plan.trace_positions)
        return laws, depth_pairs(self.R, self.plan.mode == "full")

    def theorem1_traces(self) -> CheckResult:
        if na := self.traces_not_applicable():
            return not_applicable_traces("theorem1_traces", 2.0, "theorem1", na)
        return check_theorem1_traces(*self.traces, self.model_name)

    def theorem2_traces(self) -> CheckResult:
        if na := self.traces_not_applicable():
            return not_applicable_traces("theorem2_traces", 1.0, "theorem2_traces", na)
        return check_theorem2_traces(*self.traces, self.model_name)

    def traces_not_applicable(self) -> str | None:
        return traces_not_applicable(self.R, depth_pairs(self.R, self.plan.mode == "full"))

    # -- 6. speed --------------------------------------------------------------------------------
    def speed(self) -> CheckResult:
        model = self.model_dt if self.model_dt is not None else self.model64
        return check_certified_speed(
            "speed", self.candidates, model, self.model_name, self.plan.speed, self.say
        )
