"""No certify check skips for a missing package, and a skipped check is never silent."""

import re
import sys
from pathlib import Path

from certificates import stamp

from proofs.certificate import Certificate
from proofs.checks.theorem1 import check_theorem1_search
from proofs.result import CheckResult
from proofs.run.certify import skipped_of
from reports.render import render_certificate

ROOT = Path(__file__).resolve().parents[3]


def test_hypothesis_is_a_runtime_dependency():
    text = (ROOT / "pyproject.toml").read_text()
    runtime = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
    assert re.search(r'^\s*"hypothesis[^"]*"', runtime, re.M)
    assert re.search(r"^hypothesis==", (ROOT / "constraints.txt").read_text(), re.M)


def test_theorem1_search_without_hypothesis_fails_saying_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # import hypothesis -> ImportError
    r = check_theorem1_search(5, 0)
    assert not r.passed and r.kind == "theorem1" and "hypothesis" in r.error and r.skipped is None
    monkeypatch.undo()
    assert check_theorem1_search(5, 0).passed  # control: with hypothesis it runs and passes


def test_skips_are_named_in_the_certificate_and_its_verdict_line():
    checks = [
        CheckResult("greedy_float64", 0, 0, True, kind="greedy", skipped="tiny-ouro: cannot take it"),
        CheckResult("bitwise_fixed_width", 0, 0, True, kind="bitwise", skipped="no fixed-width mode"),
        CheckResult("speed", 1, 1, True, kind="speed"),
    ]
    skipped = skipped_of(checks)
    assert skipped == {
        "greedy_float64": "tiny-ouro: cannot take it",
        "bitwise_fixed_width": "no fixed-width mode",
    }
    cert = Certificate("PASS", (), skipped, stamp(decoder="d", model="m"), tuple(checks))
    head = render_certificate(cert).split("\n\n")[1]
    assert "skipped: bitwise_fixed_width (no fixed-width mode)" in head
    assert "skipped: greedy_float64 (tiny-ouro: cannot take it)" in head
