"""A decoder declares which of the engines' other sampling parameters it honours, and how
(proofs.decoder_attributes.declared_sampling); certify samples it only under the plan's cases whose
parameters it declares, under its conventions, lists the others in the stamp, and reports a case
its engine refuses (protocol.Refused) as refused: neither a pass nor a failure."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from plans import SMALL_PLAN, FastdecWrapper

from proofs.decoder_attributes import ALL_FIELDS, SamplingSupport, declared_sampling
from proofs.decoders.candidates import Candidate, user_candidate
from proofs.decoders.protocol import Refused
from proofs.run.cases import declared_plan, entry_fields, resolve_case
from proofs.run.certify import sampling_stamp
from proofs.run.plan import ENGINE_CASES, QUICK
from proofs.run.run import CertifyRun, load
from proofs.run.sampling_units import sampling_checks, sampling_result, sampling_unit_result
from proofs.stats.exact_laws import Oracle
from refdec.errors import LoopcertError
from refdec.sampling import CONTEXT_SCOPE, ENGINE_FIELDS, MIN_P_LAST, SamplingParams
from reports.render import render_certificate

PLAIN = ("T=1", SamplingParams(temperature=1.0), 3)
MIN_P = ("T=1 min-p=0.2", SamplingParams(temperature=1.0, min_p=0.2), 3)
PLAN = replace(SMALL_PLAN, sampling_cases=(PLAIN, MIN_P))


class FastWrapper(FastdecWrapper):
    """fastdec behind the protocol, declaring what its subclasses say."""


class Undeclared(FastWrapper):
    """Declares nothing: it is handed temperature, top-k and top-p only."""


class MinP(FastWrapper):
    sampling_fields = ("min_p",)


class Refusing(MinP):
    """Declares min_p, but its engine refuses it at run time (as vLLM 0.32's ngram mode does)."""

    def generate_batch(self, prompts, max_new_tokens, sampling, seeds):
        if sampling.engine_fields():
            raise Refused("HTTP 400: min_p is not supported with speculative decoding")
        return super().generate_batch(prompts, max_new_tokens, sampling, seeds)


class RefusingAll(MinP):
    def generate_batch(self, prompts, max_new_tokens, sampling, seeds):
        raise Refused("HTTP 400: nothing is supported")


def run_with(cls, plan=PLAN) -> CertifyRun:
    candidate = Candidate(
        cls.__name__, cls, {"decoder": cls.__name__}, sampling=declared_sampling(cls, only_if_declared=True)
    )
    return CertifyRun(plan, "tiny-ouro", candidate, "cpu", torch.float32, 0, lambda _m: None)


def sampled(run: CertifyRun):
    (check,) = sampling_checks(run)
    return sampling_result(run, check, [sampling_unit_result(run, check, u) for u in check.units])


# -- the declaration ----------------------------------------------------------------------------
def test_what_a_decoder_declares_is_read_and_checked():
    assert declared_sampling(Undeclared) == SamplingSupport()
    assert declared_sampling(MinP).fields == {"min_p"}

    class All:
        sampling_fields = "all"
        penalty_scope = CONTEXT_SCOPE
        penalty_window = 20
        min_p_order = MIN_P_LAST

    s = declared_sampling(All)
    assert s.fields == set(ENGINE_FIELDS) and (s.penalty_scope, s.penalty_window) == ("context", 20)
    assert s.apply(SamplingParams(1.0, repetition_penalty=1.2)).penalty_window == 20

    class Typo:
        sampling_fields = ("min-p",)

    with pytest.raises(LoopcertError, match="Typo.sampling_fields names min-p: not among min_p"):
        declared_sampling(Typo)

    class BadScope:
        sampling_fields = ("repetition_penalty",)
        penalty_scope = "prompt"

    with pytest.raises(LoopcertError, match="BadScope declares a bad sampling convention: penalty_scope"):
        declared_sampling(BadScope)


def test_the_plan_keeps_only_the_cases_whose_parameters_are_declared():
    """The quick plan's engine case sets min_p, the penalties, a bias, stops and min_tokens (its
    Picks too): a decoder that declares none of them, or only some, is not handed it."""
    (engine,) = ENGINE_CASES
    assert set(entry_fields(engine)) == set(ENGINE_FIELDS) - {"ignore_eos"}
    assert declared_plan(QUICK, ALL_FIELDS) == (QUICK, ())
    kept, left = declared_plan(QUICK, SamplingSupport(frozenset({"min_p", "logit_bias"})))
    assert engine not in kept.sampling_cases and len(kept.sampling_cases) == len(QUICK.sampling_cases) - 1
    (said,) = left
    assert said.startswith(engine[0]) and "repetition_penalty" in said and "min_p," not in said


def test_a_case_missing_only_min_tokens_is_sampled_without_it():
    """mlx-lm has no min_tokens: the quick plan's engine case is sampled without it (its law then
    lets the stop end a sample at the first token), named and stated as such; a decoder missing
    another field of it is not handed it at all."""
    (engine,) = ENGINE_CASES
    but_min_tokens = SamplingSupport(frozenset(ENGINE_FIELDS) - {"min_tokens"})
    kept, left = declared_plan(QUICK, but_min_tokens)
    case = kept.sampling_cases[-1]
    assert case[0] == engine[0] + " without min_tokens" and case[3] == engine[3]
    assert case[1] == replace(engine[1], min_tokens=0) and left == (
        f"{engine[0]} (sampled without min_tokens)",
    )
    kept, left = declared_plan(QUICK, SamplingSupport(frozenset(ENGINE_FIELDS) - {"min_tokens", "min_p"}))
    assert engine[0] not in " ".join(c[0] for c in kept.sampling_cases) and "min_p" in left[0]


def test_a_case_missing_a_bias_or_stops_is_sampled_without_them_and_their_picks():
    """OpenVINO GenAI has no logit bias: the engine case is sampled without it (its Pick of a bias
    token dropped too, else resolving the case would set the bias again), so the penalties and min-p
    GenAI offers are still sampled; the same for stops."""
    (engine,) = ENGINE_CASES
    no_bias = SamplingSupport(frozenset(ENGINE_FIELDS) - {"logit_bias"})
    kept, left = declared_plan(QUICK, no_bias)
    case = kept.sampling_cases[-1]
    assert case[0] == engine[0] + " without logit_bias" and left == (
        f"{engine[0]} (sampled without logit_bias)",
    )
    assert case[1] == engine[1] and [p.field for p in case[3]] == ["stop_token_ids"]
    neither = SamplingSupport(frozenset(ENGINE_FIELDS) - {"logit_bias", "stop_token_ids", "min_tokens"})
    kept, left = declared_plan(QUICK, neither)
    case = kept.sampling_cases[-1]
    assert case[0] == engine[0] + " without logit_bias, stop_token_ids, min_tokens" and case[3] == ()
    assert case[1] == replace(engine[1], min_tokens=0) and case[1].repetition_penalty == 1.3


def test_a_case_is_resolved_under_the_decoders_conventions():
    oracle = Oracle(load("tiny-ouro", torch.float64, "cpu"))
    mlx_like = SamplingSupport(frozenset(ENGINE_FIELDS), penalty_scope=CONTEXT_SCOPE, penalty_window=20)
    _, sp, _ = resolve_case(oracle, (1, 2, 3), ENGINE_CASES[0], "filters-first", mlx_like)
    assert (sp.penalty_scope, sp.penalty_window, sp.order) == ("context", 20, "filters-first")
    _, plain, _ = resolve_case(oracle, (1, 2, 3), PLAIN, "temperature-first", mlx_like)
    assert plain == PLAIN[1]  # a case without penalties or min-p is left as it is


def test_user_candidates_read_class_declarations_and_http_reads_its_instance():
    assert user_candidate("test_declared_sampling:MinP").sampling.fields == {"min_p"}
    assert user_candidate("test_declared_sampling:Undeclared").sampling is None  # read once built
    from proofs.decoders.http_decoder import HTTPDecoder

    assert declared_sampling(HTTPDecoder, only_if_declared=True) is None  # its dialect decides


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))


# -- certify ------------------------------------------------------------------------------------
def test_an_undeclared_case_is_not_sampled_and_the_stamp_says_so():
    run = run_with(Undeclared)
    result = sampled(run)
    assert [c.case for c in result.details.cases] == ["T=1"] and result.passed
    stamp = sampling_stamp(run)
    assert stamp["sampling_fields"] == () and stamp["not_declared"] == ("T=1 min-p=0.2 (min_p)",)


def test_a_declared_case_is_sampled():
    run = run_with(MinP)
    result = sampled(run)
    assert [c.case for c in result.details.cases] == ["T=1", "T=1 min-p=0.2"] and result.passed
    assert result.details.cases[1].params["min_p"] == 0.2
    assert sampling_stamp(run)["not_declared"] == ()


def test_a_refused_case_is_neither_a_pass_nor_a_failure_and_is_said(tmp_path):
    """The check passes on the case the engine took, states the refusal with the engine's message,
    and the summary names it; a decoder whose engine refuses every case has no evidence: no power."""
    result = sampled(run_with(Refusing))
    plain, refused = result.details.cases
    assert result.passed and refused.refused.startswith("HTTP 400: min_p is not supported")
    assert refused.samples == 0 and refused.views == () and plain.has_power
    assert result.details.no_power == () and result.details.failed_samples == ()
    from reports.sampling_checks import case_rows_and_notes, summary_notes

    assert summary_notes(result.details) == ["refused by the engine: T=1 min-p=0.2"]
    _, notes = case_rows_and_notes(result.name, refused)
    assert notes == [f"- {result.name} T=1 min-p=0.2: refused by the engine: `{refused.refused}`"]

    nothing = sampled(run_with(RefusingAll, replace(PLAN, sampling_cases=(MIN_P,))))
    assert not nothing.passed and nothing.details.no_power == ("T=1 min-p=0.2",)


def test_a_refusal_after_samples_is_a_failure():
    """An engine that took a case's parameters and then refuses them is not refusing the case: the
    case fails as the decoder's error (a negative control of the refused verdict)."""

    class Fickle(MinP):
        calls = 0

        def generate_batch(self, prompts, max_new_tokens, sampling, seeds):
            Fickle.calls += 1
            if Fickle.calls > 1 and sampling.engine_fields():
                raise Refused("HTTP 400: changed its mind")
            return super().generate_batch(prompts, max_new_tokens, sampling, seeds)

    result = sampled(run_with(Fickle, replace(PLAN, sampling_cases=(MIN_P,))))
    assert not result.passed and result.details.failed_samples == ("T=1 min-p=0.2",)
    assert "refused after" in result.details.cases[0].error


def test_the_certificate_renders_the_declaration(tmp_path):
    import proofs.run.plan as plan_mod
    from loopcert.cli import main
    from proofs.certificate import read_certificate

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(plan_mod.PLANS, "quick", PLAN)
        rc = main(
            ["certify", "tiny-ouro", "--decoder", "test_declared_sampling:Undeclared", "--out", str(tmp_path)]
        )
    cert = read_certificate(tmp_path / "certificate.json")
    assert rc == 0, cert.failed
    assert cert.stamp.not_declared == ("T=1 min-p=0.2 (min_p)",) and cert.stamp.sampling_fields == ()
    md = render_certificate(cert)
    rows = {
        line.split("|")[1].strip(): line.split("|")[2].strip()
        for line in md.splitlines()
        if line.count("|") == 3
    }
    assert rows["other sampling parameters"] == "none declared"
    assert rows["cases it does not declare"] == "T=1 min-p=0.2 (min_p)"


# -- an engine is never started in a process that forks workers ---------------------------------


class Recording(MinP):
    """Writes the pid of every process that builds it to $LOOPCERT_TEST_PIDS (a file): an engine
    whose runtime threads would not survive a fork (llama.cpp's server, mlx's scheduler)."""

    def __init__(self, model):
        import os

        with open(os.environ["LOOPCERT_TEST_PIDS"], "a") as f:
            f.write(f"{os.getpid()}\n")
        super().__init__(model)


@pytest.mark.parametrize("jobs", [2, 1])
def test_with_workers_the_parent_never_builds_the_decoder(jobs, tmp_path, monkeypatch):
    """--jobs 2: the decoder is built in a probe child (what it declares, whether it applies) and in
    the workers, never in the parent, so no worker inherits an engine its parent started (the hang
    of tox -e llamacpp's certify rows). The control, --jobs 1: the parent builds it itself."""
    import os

    import proofs.run.plan as plan_mod
    from proofs.run.certify import certify

    pids = tmp_path / "pids"
    monkeypatch.setenv("LOOPCERT_TEST_PIDS", str(pids))
    monkeypatch.setitem(plan_mod.PLANS, "quick", replace(PLAN, mutant_ids=("always-accept",)))
    cert = certify("tiny-ouro", "test_declared_sampling:Recording", jobs=jobs, progress=lambda _m: None)
    assert cert.verdict == "PASS", cert.failed
    built = [int(p) for p in pids.read_text().split()]
    assert (os.getpid() in built) == (jobs == 1) and len(set(built)) >= (3 if jobs == 2 else 1)


def test_a_probe_answers_or_raises_as_the_function_did():
    from proofs.run.probe import in_child

    assert in_child(lambda: {"a": (1, 2)}, "a question") == {"a": (1, 2)}
    with pytest.raises(LoopcertError, match="named value"):
        in_child(lambda: (_ for _ in ()).throw(LoopcertError("named value")), "a question")
