"""Scope in the verdict: a refused core parameter is not a PASS; the parameters a
decoder does not declare and the cases its engine refused are named in the verdict line, in
certificate.md's and in `cert.scope`; assert_lossless raises on any refusal unless its allow-list
names the parameter. The smoke plan with one more case (seconds on tiny-ouro)."""

from __future__ import annotations

import dataclasses

import pytest

import fastdec
from loopcert.api import LoopcertError, Refused, certify, render_certificate
from loopcert.commands.certify import publish
from loopcert.testing import SMOKE_PLAN, assert_lossless
from refdec.sampling import ENGINE_FIELDS, SamplingParams

TOP_P = ("T=1 top-p=0.8", SamplingParams(temperature=1.0, top_p=0.8), 3)
MIN_P = ("T=1 min-p=0.2", SamplingParams(temperature=1.0, min_p=0.2), 3)
NOT_DECLARED = "not declared, never sampled: " + ", ".join(ENGINE_FIELDS)


class Wrapper:
    """fastdec's draft-verify behind the protocol (declares none of the engines' other parameters)."""

    def __init__(self, model):
        self.model = model
        self.inner = fastdec.Decoder(model, fastdec.DecodeConfig("draft-verify", draft_depth=1))

    def generate_batch(self, prompts, max_new_tokens, sampling, seeds):
        return self.inner.generate_batch(prompts, max_new_tokens, sampling, seeds)

    def generate(self, prompt, max_new_tokens, sampling, seed):
        return self.generate_batch([prompt], max_new_tokens, sampling, [seed])[0]


class NoTopP(Wrapper):
    """Its engine refuses every request that sets top_p."""

    def generate_batch(self, prompts, max_new_tokens, sampling, seeds):
        if sampling.top_p is not None:
            raise Refused("top_p is not supported")
        return super().generate_batch(prompts, max_new_tokens, sampling, seeds)


class NoMinP(Wrapper):
    """Declares min_p, then its engine refuses it (as vLLM 0.32's ngram speculation does)."""

    sampling_fields = ("min_p",)

    def generate_batch(self, prompts, max_new_tokens, sampling, seeds):
        if sampling.min_p:
            raise Refused("min_p is not supported with speculative decoding")
        return super().generate_batch(prompts, max_new_tokens, sampling, seeds)


# the smoke plan's first case (T=1 top-k=4) alone and no long samples: the cases these tests add are
# then the only ones a refusal can come from
BASE = dataclasses.replace(SMOKE_PLAN, sampling_cases=SMOKE_PLAN.sampling_cases[:1], positions=None)


def plan_with(*cases):
    return dataclasses.replace(BASE, sampling_cases=(*BASE.sampling_cases, *cases))


@pytest.fixture(scope="module")
def no_top_p():
    """NoTopP's certificate under the smoke plan with a top-p case."""
    return certify("tiny-ouro", NoTopP, plan=plan_with(TOP_P), label="no-top-p")


def test_a_decoder_that_refuses_top_p_does_not_pass(no_top_p):
    cert = no_top_p
    s = cert.check("sampling[tiny-ouro: no-top-p]")
    assert cert.verdict == "FAIL" and not cert.passed and cert.failed == (s.name,)
    assert s.failed and s.details.refused_core == ("top_p=0.8 (T=1 top-p=0.8)",)
    assert s.details.no_power == () and s.details.rejected == ()
    (refusal,) = cert.scope.refused
    assert (refusal.check, refusal.case, refusal.parameters, refusal.core) == (
        s.name,
        "T=1 top-p=0.8",
        ("top_p=0.8",),
        True,
    )
    assert refusal.message == "top_p is not supported"
    md = render_certificate(cert)
    assert "refused core parameters (failed): top_p=0.8 (T=1 top-p=0.8)" in md.split("\n\n")[1]


def test_the_verdict_line_names_the_parameters_not_declared_and_the_refusals(no_top_p, tmp_path, capsys):
    assert publish(no_top_p, tmp_path, "") == 1
    first, *rest = capsys.readouterr().out.splitlines()
    assert first.startswith("FAIL: ") and f"; {NOT_DECLARED}; " in first
    assert first.endswith("; refused core parameters (failed): top_p=0.8 (T=1 top-p=0.8)")
    assert "failed: sampling[tiny-ouro: no-top-p]: refused core parameters: top_p=0.8 (T=1 top-p=0.8)" in rest
    scope = no_top_p.scope
    assert scope.declared == () and scope.not_declared == ENGINE_FIELDS and scope.not_sampled == ()


def test_a_decoder_declaring_no_engine_parameters_passes_with_them_named():
    """The plan's min-p case is not sampled; the PASS names the parameters and the case."""
    cert = certify("tiny-ouro", Wrapper, plan=plan_with(MIN_P), label="plain")
    assert cert.verdict == "PASS" and cert.scope.not_sampled == ("T=1 min-p=0.2 (min_p)",)
    head = render_certificate(cert).split("\n\n")[1]
    assert (
        head.startswith("**PASS**") and f"{NOT_DECLARED} (cases not sampled: T=1 min-p=0.2 (min_p))." in head
    )


def test_assert_lossless_names_and_raises_on_a_refused_core_parameter_unless_allowed():
    plan = plan_with(TOP_P)
    with pytest.raises(AssertionError) as e:
        assert_lossless(NoTopP, "tiny-ouro", plan=plan, label="no-top-p")
    lines = str(e.value).splitlines()
    assert lines[0] == "no-top-p on tiny-ouro (smoke plan, seed 0): FAIL"
    assert "  sampling[tiny-ouro: no-top-p]: refused core parameters: top_p=0.8 (T=1 top-p=0.8)" in lines
    assert f"  scope: {NOT_DECLARED}" in lines
    assert lines[-1] == "  refused, not in allow_refused: top_p=0.8 (T=1 top-p=0.8)"
    cert = assert_lossless(NoTopP, "tiny-ouro", plan=plan, allow_refused=("top_p",))
    assert cert.scope.refused_core[0].parameters == ("top_p=0.8",)
    with pytest.raises(LoopcertError, match=r"allow_refused names unknown parameter\(s\) \['topp'\]"):
        assert_lossless(NoTopP, "tiny-ouro", plan=plan, allow_refused=("topp",))


def test_assert_lossless_raises_on_an_engine_parameter_refusal_a_pass_allows_it_by_name():
    """The engine's refusal of min_p leaves the verdict PASS (not sampled, named), but a decoder
    author's test fails on it unless it allows min_p."""
    plan = plan_with(MIN_P)
    with pytest.raises(AssertionError) as e:
        assert_lossless(NoMinP, "tiny-ouro", plan=plan, label="no-min-p")
    lines = str(e.value).splitlines()
    assert lines[0] == "no-min-p on tiny-ouro (smoke plan, seed 0): PASS"
    assert "  scope: refused by the engine, not sampled: T=1 min-p=0.2 (min_p)" in lines
    assert lines[-1] == "  refused, not in allow_refused: min_p (T=1 min-p=0.2)"
    cert = assert_lossless(NoMinP, "tiny-ouro", plan=plan, allow_refused=("min_p",))
    assert cert.verdict == "PASS" and [r.core for r in cert.scope.refused] == [False]
