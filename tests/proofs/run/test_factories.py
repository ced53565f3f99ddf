"""What certify makes of a decoder factory (`--decoder module:make`) that declines a model or
fails on one: a decline written against the old `proofs.protocol.NotApplicable` is still a
decline (with a DeprecationWarning), and any other exception is the factory's failure, its own
failed run named "the decoder factory failed on MODEL: ...", never a divergence of tokens that
were not decoded."""

from __future__ import annotations

import uuid

import pytest
import torch
from plans import SMALL_PLAN

import proofs.run.plan as plan_mod
from loopcert.api import certify
from proofs.decoders.candidates import user_candidate
from proofs.moved import MovedWarning
from proofs.run.run import CertifyRun
from reports.exactness import greedy_section
from reports.render import status

# a factory as a user wrote it from the README of 2026-12-01: fastdec for tiny-ouro, declining the rest
OLD_FACTORY = """
import fastdec
from proofs.protocol import NotApplicable


def make(model):
    if model.cfg.name != "tiny-ouro":
        raise NotApplicable(f"serves only tiny-ouro, not {model.cfg.name}")
    return fastdec.Decoder(model, "autoregressive")
"""

# serves tiny-ouro; raises a plain error on every other model (or on all of them with FAIL_ALL)
FAILING_FACTORY = """
import fastdec

FAIL_ALL = {fail_all}


def make(model):
    if FAIL_ALL or model.cfg.name != "tiny-ouro":
        raise ValueError(f"no weights for {{model.cfg.name}}")
    return fastdec.Decoder(model, "autoregressive")
"""


def factory_module(tmp_path, monkeypatch, text: str) -> str:
    """Write `text` as an importable module of a fresh name; -> its --decoder spec."""
    name = f"factory_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:make"


def test_a_factory_written_against_proofs_protocol_still_certifies(tmp_path, monkeypatch):
    monkeypatch.setitem(plan_mod.PLANS, "quick", SMALL_PLAN)
    spec = factory_module(tmp_path, monkeypatch, OLD_FACTORY)
    warning = r"^proofs\.protocol\.NotApplicable is deprecated: import NotApplicable from loopcert\.api "
    with pytest.warns(MovedWarning, match=warning):
        cert = certify("tiny-ouro", spec)
    greedy = cert.check("greedy_float64")
    assert greedy.passed and greedy.details.not_applicable == (
        f"{spec} on tiny-raven: serves only tiny-ouro, not tiny-raven",
    )
    assert [r.model for r in greedy.details.runs] == ["tiny-ouro"]
    assert cert.verdict == "PASS", cert.failed


def greedy_of(tmp_path, monkeypatch, fail_all: bool):
    spec = factory_module(tmp_path, monkeypatch, FAILING_FACTORY.format(fail_all=fail_all))
    run = CertifyRun(SMALL_PLAN, "tiny-ouro", user_candidate(spec), "cpu", torch.float32, 0, lambda _m: None)
    return spec, run.greedy_float64()


def test_a_factory_that_raises_on_a_preset_is_the_factorys_failure(tmp_path, monkeypatch):
    spec, r = greedy_of(tmp_path, monkeypatch, fail_all=False)
    why = "the decoder factory failed on tiny-raven: ValueError: no weights for tiny-raven"
    d = r.details
    assert not r.passed and r.measured == 1 and r.error is None
    assert [(x.model, x.setting, x.agree, x.error) for x in d.runs] == [
        ("tiny-ouro", spec, SMALL_PLAN.greedy_prompts, None),
        ("tiny-raven", spec, 0, why),
    ]
    # not a divergence with refdec's token and no candidate: nothing was decoded
    assert d.divergences == () and d.real_bugs == 0 and d.not_applicable == ()
    section = greedy_section(r)
    assert f"- tiny-raven / {spec}: `{why}`" in section and "**no decoder**" in section
    assert "0 real bug(s), 0 numerical tie(s), 1 run(s) without a decoder (its factory failed)" in section
    assert status(r) == ("**FAIL**", f"{spec} on tiny-raven: {why}")


def test_a_factory_that_raises_on_the_certified_model_fails_its_run_the_same_way(tmp_path, monkeypatch):
    spec, r = greedy_of(tmp_path, monkeypatch, fail_all=True)
    assert not r.passed and r.measured == 2 and r.details.divergences == ()
    assert [x.error for x in r.details.runs] == [
        "the decoder factory failed on tiny-ouro: ValueError: no weights for tiny-ouro",
        "the decoder factory failed on tiny-raven: ValueError: no weights for tiny-raven",
    ]
