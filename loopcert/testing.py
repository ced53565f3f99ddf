"""Certify a decoder from its author's own test suite (docs/decoders.md "Certify from Python and
from your tests").

    from loopcert.testing import SMOKE_PLAN, assert_lossless

    def test_my_decoder_is_lossless():
        model = load_model("tiny-ouro")
        assert_lossless(MyDecoder(model), "tiny-ouro", plan=SMOKE_PLAN)

`assert_lossless` runs loopcert.api.certify and raises AssertionError unless the verdict is PASS;
the message names each failed check with the one-line reason `loopcert certify` prints
(reports/console.py), so the test's failure says what is wrong without opening a report.
"""

from __future__ import annotations

from proofs.certificate import Certificate
from proofs.run.certify import certify
from proofs.run.plan import SMOKE as SMOKE_PLAN
from proofs.run.plan import CertifyPlan
from reports.console import failure_line

__all__ = ["SMOKE_PLAN", "CertifyPlan", "assert_lossless"]


def assert_lossless(
    decoder, model: str | None = "tiny-ouro", plan: str | CertifyPlan = "quick", **options
) -> Certificate:
    """Certify `decoder` (a decoder object, a factory or a --decoder spec: loopcert.api.certify) on
    `model` under `plan` ("quick", "full", SMOKE_PLAN for seconds, or any CertifyPlan); `options`
    are certify's keywords (seed, dtype, device, label, time_budget, ...). -> the Certificate when
    it passes; else AssertionError whose message has the verdict and one line per failed check.
    A usage error (a bad spec, a decoder built for another model) is certify's LoopcertError."""
    cert = certify(model, decoder, plan=plan, **options)
    if not cert.passed:
        raise AssertionError(failure_message(cert))
    return cert


def failure_message(cert: Certificate) -> str:
    """The verdict and, per failed check, `name: reason`; the skipped checks after them."""
    s = cert.stamp
    lines = [f"{s.decoder} on {s.model} ({s.mode} plan, seed {s.seed}): {cert.verdict}"]
    lines += [f"  {c.name}: {failure_line(c)}" for c in cert.checks if not c.passed]
    lines += [f"  skipped {name}: {why}" for name, why in cert.skipped.items()]
    return "\n".join(lines)
