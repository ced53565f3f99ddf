"""A certify run as data a worker on another machine rebuilds it from (docs/design.md section 8).

A forked worker inherits the parent's run (proofs/run/jobs.py); a worker in another process tree
(a Ray task: proofs/run/ray_executor.py) gets a `RunSpec` instead: what the run was asked
(plan, model, decoder and --relative-to, device, dtype, seed, time budget) and what the parent
computed once and ships with it: the models and their exact laws (RunModels) and every sampled model's
SamplingSetup (the chosen cases, their views' bins and N). The worker builds its CertifyRun on
these, so it never plans: a worker whose float64 kernels round otherwise (other SIMD) samples the
parent's cases with the parent's N and bins, and a unit's raw result depends on the plan, the
seed and its id alone. Only the decoders are built in the worker, once per worker and spec. An
HTTP decoder's flags (--server, --http-timeout, --api-key, --decoder-dtype, --served-model) ride
in the spec too (the candidate's options): a forked worker inherits the parent's candidates, a Ray
worker rebuilds them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from proofs.decoders.candidates import user_candidate
from proofs.decoders.http_decoder import HTTPOptions
from proofs.run.cases import SamplingSetup
from proofs.run.plan import CertifyPlan
from proofs.run.run import CertifyRun, RunModels
from proofs.run.units import plan_units
from refdec.errors import LoopcertError
from refdec.files import parse_dtype
from refdec.progress import Progress
from refdec.values import dtype_name


@dataclass(frozen=True)
class RunSpec:
    plan: CertifyPlan
    model_name: str
    decoder: str | None  # --decoder MODULE:FACTORY (importable where the worker runs); None: fastdec
    device: str
    dtype: str  # by name: "float32", ...
    seed: int
    time_budget: float  # the run's sampling budget, seconds
    models: RunModels  # the parent's models and exact laws
    sampling_setups: Mapping[str, SamplingSetup]  # the parent's plan of every sampled model
    units: tuple[str, ...]  # the ids of the units the parent hands out
    http_options: HTTPOptions | None = None  # the parent's HTTP flags for an http:// decoder
    relative_to: str | None = None  # --relative-to SPEC2 (the engine-relative check's reference)
    relative_http_options: HTTPOptions | None = None  # its HTTP flags, when it is a server
    compile: bool = False  # certify --compile: fastdec's grid with compiled engine steps

    @classmethod
    def of(cls, run: CertifyRun, units) -> RunSpec:
        """The spec of a run whose units are planned (plan_units built its sampling setups)."""
        return cls(
            run.plan,
            run.model_name,
            run.user.label if run.user else None,  # a user candidate's label is its --decoder spec
            run.device,
            dtype_name(run.dtype),
            run.seed,
            run.pool_budget_s,  # the pool's (what a worker's own pool would hand out)
            run.models,
            dict(run.sampling_setups),
            tuple(uid for uid, _ in units),
            run.user.options if run.user else None,
            run.relative.label if run.relative else None,
            run.relative.options if run.relative else None,
            run.compile,
        )

    def build(self, say: Progress) -> tuple[CertifyRun, dict[str, Callable[..., dict]]]:
        """(the run, {unit id: run it(share)}) in this process, on the shipped models and plan."""
        user = user_candidate(self.decoder, http=self.http_options) if self.decoder else None
        relative = (
            user_candidate(self.relative_to, http=self.relative_http_options) if self.relative_to else None
        )
        run = CertifyRun(
            self.plan,
            self.model_name,
            user,
            self.device,
            parse_dtype(self.dtype),
            self.seed,
            say,
            self.time_budget,
            models=self.models,
            sampling_setups=self.sampling_setups,
            relative=relative,
            compile=self.compile,
        )
        units = dict(plan_units(run, self.dtype)[0])
        lost = [uid for uid in self.units if uid not in units]
        if lost:  # cannot happen with the shipped setups; a worker never runs another plan
            raise LoopcertError(f"a worker planned other work units than its parent: no {lost[0]}")
        return run, units


class WorkerRuns:
    """One worker process's runs, rebuilt once per spec (a worker runs many units of one run)."""

    def __init__(self):
        self.key: str | None = None
        self.units: dict[str, Callable[..., dict]] = {}
        self.said: list[str] = []  # the progress lines of the unit being run, sent back with it

    def run(self, key: str, load_spec: Callable[[], RunSpec], uid: str, share: float | None) -> dict:
        """{"result": the unit's raw result, "said": its progress lines}; `load_spec` is called
        only when this worker has not built the run of `key` yet."""
        if self.key != key:
            self.units.clear()
            spec = load_spec()
            if spec.device == "cpu":
                torch.set_num_threads(1)  # one core per task (num_cpus=1)
            _, self.units = spec.build(self.said.append)
            self.key = key
        self.said.clear()
        result = self.units[uid](share)
        return {"result": result, "said": list(self.said)}
