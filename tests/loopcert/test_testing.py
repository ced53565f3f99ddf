"""A decoder author's own test suite, as a user writes it: a decoder object (or a factory) defined
in the test file, certified through loopcert.api.certify() and loopcert.testing.assert_lossless
under the smoke plan (seconds on tiny-ouro). The lossy decoders are the negative controls: each
must fail, and the AssertionError must name the check that caught it. docs/decoders.md's examples
run here too, as written."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from plans import untimed

import fastdec
from fastdec import DecodeConfig
from loopcert.api import CertifyPlan, LoopcertError, Prediction, certify, load_model, predict
from loopcert.testing import SMOKE_PLAN, assert_lossless
from refdec.sampling import SamplingParams

PLAIN = ("T=0.7", SamplingParams(temperature=0.7), 3)
# the smoke plan without its long samples: these tests are about the API, not the per-position test
# (tests/loopcert/test_smoke_plan.py runs assert_lossless's default whole)
FAST = dataclasses.replace(SMOKE_PLAN, positions=None)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "decoders.md"


class FastWrapper:
    """A user's decoder: fastdec's draft-verify behind the protocol, bound to its model."""

    def __init__(self, model, config=DecodeConfig("draft-verify", draft_depth=1)):
        self.model = model
        self.inner = fastdec.Decoder(model, config)
        self.compute_dtype = self.inner.compute_dtype

    def generate_batch(self, prompts, max_new_tokens, sampling, seeds):
        return self.inner.generate_batch(prompts, max_new_tokens, sampling, seeds)

    def generate(self, prompt, max_new_tokens, sampling, seed):
        return self.generate_batch([prompt], max_new_tokens, sampling, [seed])[0]


class Hot(FastWrapper):
    """Lossy: samples at 1.5x the temperature it is handed (greedy, T=0, is untouched)."""

    def generate_batch(self, prompts, max_new_tokens, sampling, seeds):
        hot = dataclasses.replace(sampling, temperature=sampling.temperature * 1.5)
        return super().generate_batch(prompts, max_new_tokens, hot, seeds)


def shallow(model):
    """Lossy factory: decides every token at depth R-1 instead of R."""
    return FastWrapper(model, DecodeConfig("draft-verify", draft_depth=1, depth=model.cfg.recurrence - 1))


@pytest.fixture(scope="module")
def ouro():
    return load_model("tiny-ouro")


@pytest.mark.tier2
def test_a_lossless_decoder_object_passes_and_its_certificate_is_returned(ouro):
    cert = assert_lossless(FastWrapper(ouro), "tiny-ouro", plan=FAST)
    s = cert.stamp
    assert cert.verdict == "PASS" and s.decoder == f"{__name__}.FastWrapper" and s.mode == "smoke"
    assert s.settings == (f"{__name__}.FastWrapper",)
    # bound to tiny-ouro: the greedy check ran it there, and nowhere else
    assert [r.model for r in cert.check("greedy_float64").details.runs] == ["tiny-ouro"]


@pytest.mark.tier2
def test_a_decoder_at_the_wrong_temperature_fails_naming_the_sampling_check(ouro):
    with pytest.raises(AssertionError) as e:
        assert_lossless(Hot(ouro), "tiny-ouro", plan=FAST, label="hot")
    lines = str(e.value).splitlines()
    assert lines[0] == "hot on tiny-ouro (smoke plan, seed 0): FAIL"
    assert any(
        line.startswith("  sampling[tiny-ouro: hot]: rejected: ") and "T=1 top-k=4" in line for line in lines
    )
    assert not any(line.startswith("  greedy") for line in lines)  # greedy does not see a temperature


def test_a_factory_deciding_at_a_shallower_depth_fails_naming_the_greedy_checks():
    with pytest.raises(AssertionError) as e:
        assert_lossless(shallow, "tiny-ouro", plan=FAST)
    message = str(e.value)
    assert message.startswith(f"{__name__}.shallow on tiny-ouro (smoke plan, seed 0): FAIL")
    assert re.search(r"^  greedy_float64: \d+ real bug\(s\)", message, re.M), message


@pytest.mark.tier2
def test_certify_takes_a_factory_class_and_runs_it_on_every_model():
    """A factory is called on each model, as --decoder module:make is: the plan's presets too."""
    plan = dataclasses.replace(FAST, greedy_presets=("tiny-raven",))
    cert = certify("tiny-ouro", FastWrapper, plan=plan)
    assert cert.passed and cert.stamp.decoder == f"{__name__}.FastWrapper"
    assert {r.model for r in cert.check("greedy_float64").details.runs} == {"tiny-ouro", "tiny-raven"}


def test_an_object_runs_on_its_own_model_only(ouro):
    plan = dataclasses.replace(FAST, greedy_presets=("tiny-raven",))
    cert = certify("tiny-ouro", FastWrapper(ouro), plan=plan)
    details = cert.check("greedy_float64").details
    assert cert.passed and [r.model for r in details.runs] == ["tiny-ouro"]
    assert details.not_applicable == (f"{__name__}.FastWrapper on tiny-raven: serves only its own model",)


@pytest.mark.tier2
def test_an_object_runs_in_forked_workers_to_the_same_certificate(ouro):
    """jobs=2: the workers fork this process, the object with it (a Ray worker could not)."""
    plan = dataclasses.replace(FAST, sampling_cases=(*SMOKE_PLAN.sampling_cases, PLAIN))
    serial, forked = (certify("tiny-ouro", FastWrapper(ouro), plan=plan, jobs=j) for j in (1, 2))
    assert serial.passed and serial.stamp.work_units > 2
    assert untimed(json.loads(forked.dumps())) == untimed(json.loads(serial.dumps()))


def test_an_object_built_for_another_model_is_a_usage_error():
    raven = FastWrapper(load_model("tiny-raven"))
    applies = r"does not apply to the certified model tiny-ouro: .*built for another model \(tiny-raven\)"
    with pytest.raises(LoopcertError, match=applies):
        certify("tiny-ouro", raven, plan=FAST)


@pytest.mark.tier2
def test_predict_costs_what_certify_would_run_with_the_same_arguments(ouro):
    """loopcert.api.predict(model, decoder, plan=...): certify()'s arguments, a decoder object and a
    CertifyPlan among them; certifies nothing; predicts every check the certificate then has, and
    samples the object's own decoder (no fastdec setting) at a positive rate."""
    plan = dataclasses.replace(FAST, sampling_cases=(*SMOKE_PLAN.sampling_cases, PLAIN))
    got = predict("tiny-ouro", FastWrapper(ouro), plan=plan, slice_seconds=0.2, measured=True)
    assert isinstance(got, Prediction) and not got.stopped
    assert (got.mode, got.model, got.target_tv) == ("smoke", "tiny-ouro", plan.tv)
    assert {u.setting for u in got.units} == {f"{__name__}.FastWrapper"} and len(got.units) == 3
    assert all(u.slice > 0 and u.samples_per_s > 0 for u in got.units)
    cert = certify("tiny-ouro", FastWrapper(ouro), plan=plan)
    assert {c.check for c in got.checks} == {c.name for c in cert.checks}
    with pytest.raises(LoopcertError, match="not with executor 'ray'"):
        predict("tiny-ouro", FastWrapper(ouro), plan=plan, executor="ray")
    with pytest.raises(LoopcertError, match="plan must be one of .* got 'nightly'"):
        predict("tiny-ouro", plan="nightly")


def test_usage_errors_name_the_bad_value(ouro):
    with pytest.raises(LoopcertError, match="decoder must be a spec string, a decoder .* got 'int'"):
        certify("tiny-ouro", 3, plan=FAST)
    with pytest.raises(LoopcertError, match="plan must be one of .* got 'nightly'"):
        certify("tiny-ouro", FastWrapper(ouro), plan="nightly")
    with pytest.raises(LoopcertError, match="label='x' names a decoder object or factory"):
        certify("tiny-ouro", "tests:make", label="x")
    with pytest.raises(LoopcertError, match="not with executor 'ray'"):
        certify("tiny-ouro", FastWrapper(ouro), executor="ray")
    with pytest.raises(LoopcertError, match="http= holds an http:// decoder's options"):
        from loopcert.api import HTTPOptions

        certify("tiny-ouro", "tests:make", http=HTTPOptions())
    with pytest.raises(TypeError, match="unexpected keyword argument.*: modle"):
        certify("tiny-ouro", modle="x")


def test_the_old_keywords_still_work_with_a_warning(monkeypatch):
    import proofs.run.plan as plan_mod

    monkeypatch.setitem(plan_mod.PLANS, "quick", FAST)
    with pytest.warns(DeprecationWarning, match=r"certify\(mode=...\) is deprecated: pass plan="):
        cert = certify("tiny-ouro", FastWrapper, mode="quick")
    assert cert.passed and cert.stamp.mode == "smoke" and isinstance(SMOKE_PLAN, CertifyPlan)


# -- docs/decoders.md's examples, run as written ----------------------------------------------------
def doc_examples() -> dict[str, str]:
    """The ```python block after each `<!-- example: NAME (run by ...) -->` marker."""
    text = DOCS.read_text()
    return dict(re.findall(r"<!-- example: ([^(]+?) \(run by [^)]*\) -->\n```python\n(.*?)```", text, re.S))


@pytest.mark.tier2
def test_the_docs_examples_run_as_written():
    examples = doc_examples()
    assert sorted(examples) == ["a decoder author's test", "certify from Python"]
    scope = {"__name__": "test_my_decoder"}
    exec(examples["certify from Python"], scope)  # noqa: S102 - the docs' own code
    exec(examples["a decoder author's test"], scope)  # noqa: S102
    scope["test_my_decoder_is_lossless"]()
    scope["test_a_hot_decoder_fails_the_sampling_check"]()
    # the message the docs show is the one the second test gets
    shown = re.search(r"The second test's message reads\n\n```\n(.*?)```", DOCS.read_text(), re.S)[1]
    with pytest.raises(AssertionError) as e:
        assert_lossless(scope["TooHot"](load_model("tiny-ouro")), "tiny-ouro", plan=SMOKE_PLAN)
    assert str(e.value) == shown.strip()
