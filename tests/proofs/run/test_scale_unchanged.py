"""The scale work's savings change no figure of a certificate (docs/scale.md): the oracle sharing
the run's float64 model instead of deep-copying it, the sampling decoders taking the run's float32
copy instead of loading a third, and greedy_float64 and greedy_<dtype> sharing refdec's reference
tokens. A run with all three undone must give the same certificate, timings aside."""

from __future__ import annotations

import json
import re

import pytest
import torch
from plans import SMALL_PLAN

import proofs.checks.greedy as greedy_module
import refdec
from proofs.run.certify import certify
from proofs.run.plan import PLANS
from proofs.run.run import CertifyRun, RunModels
from proofs.stats.exact_laws import Oracle

CLOCK = re.compile(r"seconds|per_s|date|elapsed|speedup|wall|tokens_per|^time")


def figures(x):
    """Everything a certificate states but its clocks (and the speed check, a clock itself)."""
    if isinstance(x, dict):
        if x.get("name") == "speed":
            return "speed"
        return {k: figures(v) for k, v in x.items() if not CLOCK.search(k)}
    if isinstance(x, list):
        return [figures(v) for v in x]
    return x


def cert_figures(model: str) -> dict:
    cert = certify(model, plan="quick", seed=3)
    data = json.loads(cert.dumps())
    data["stamp"] = {k: v for k, v in data["stamp"].items() if k in ("model", "R", "vocab_size", "settings")}
    return figures(data)


@pytest.fixture
def small_plan(monkeypatch):
    monkeypatch.setitem(PLANS, "quick", SMALL_PLAN)


def undo_savings(monkeypatch) -> list:
    """Each saving undone; returns the list the reference decodes are counted in."""
    monkeypatch.setattr(Oracle, "over", classmethod(lambda cls, m: cls(m)))  # a deep copy again
    monkeypatch.setattr(RunModels, "sampling_model", lambda self, dtype, device: None)  # load a copy
    calls = count_references(monkeypatch)
    original = CertifyRun.greedy_low

    def unshared(self, name):
        self.greedy_references = {}  # recompute the reference tokens
        return original(self, name)

    monkeypatch.setattr(CertifyRun, "greedy_low", unshared)
    return calls


def count_references(monkeypatch) -> list:
    calls = []
    real = greedy_module.reference_scores

    def counted(model, prompt, tokens, with_next=False):
        calls.append(tuple(prompt))
        return real(model, prompt, tokens, with_next)

    monkeypatch.setattr(greedy_module, "reference_scores", counted)
    return calls


@pytest.mark.slow  # two whole certify runs: ~30 s on an idle core, minutes on a loaded one
def test_certificate_figures_unchanged_by_the_savings(small_plan, monkeypatch):
    saved_calls = count_references(monkeypatch)
    saved = cert_figures("tiny-ouro")
    n_saved = len(saved_calls)
    with monkeypatch.context() as m:
        undone_calls = undo_savings(m)
        undone = cert_figures("tiny-ouro")
    assert saved == undone
    assert saved["verdict"] == "PASS"
    # the saving is real: greedy_float32 decoded the reference again only when undone
    assert len(undone_calls) > n_saved


def test_greedy_checks_share_the_reference_and_agree(monkeypatch):
    """greedy_float32 reads greedy_float64's reference tokens (no second decode) and its result
    is the one of a run that decodes them again."""
    run = CertifyRun(SMALL_PLAN, "tiny-ouro", None, "cpu", torch.float32, 0, lambda _m: None)
    calls = count_references(monkeypatch)
    run.greedy_float64()
    n64 = len(calls)
    shared = run.greedy_low("greedy_float32").to_dict()
    assert len(calls) == n64  # nothing decoded again
    run.greedy_references = {}
    again = run.greedy_low("greedy_float32").to_dict()
    assert len(calls) > n64
    assert figures(shared) == figures(again)
    assert shared["passed"] and shared["details"]["runs"]


def test_oracle_over_shares_only_a_float64_cpu_model():
    m64 = refdec.load_model("tiny-ouro", dtype=torch.float64)
    assert Oracle.over(m64).model is m64
    assert Oracle(m64).model is not m64  # the plain constructor still copies
    m32 = refdec.load_model("tiny-ouro")
    o = Oracle.over(m32)
    assert o.model is not m32 and next(o.model.parameters()).dtype == torch.float64
