"""Certify a decoder from its author's own test suite (docs/decoders.md "Certify from Python and
from your tests").

    from loopcert.testing import assert_lossless

    def test_my_decoder_is_lossless():
        model = load_model("tiny-ouro")
        assert_lossless(MyDecoder(model), "tiny-ouro")  # the smoke plan: seconds

The default plan is the smoke plan (SMOKE_PLAN, `loopcert certify --smoke`): every check cut down
to seconds on a tiny preset, long samples read at every position included; plan="quick" is what CI
certifies with.

`assert_lossless` runs loopcert.api.certify and raises AssertionError unless the verdict is PASS
and the engine refused no case (but those the caller allows by parameter: `allow_refused`); the
message names each failed check with the one-line reason `loopcert certify` prints
(reports/console.py), and the parameters the verdict does not cover (reports/scope.py), so the
test's failure says what is wrong without opening a report.
"""

from __future__ import annotations

from collections.abc import Sequence

from proofs.certificate import Certificate, Refusal
from proofs.details import SamplingDetails
from proofs.result import CheckResult
from proofs.run.certify import certify
from proofs.run.plan import SMOKE as SMOKE_PLAN
from proofs.run.plan import CertifyPlan
from refdec.errors import LoopcertError
from refdec.sampling import ENGINE_FIELDS
from reports.console import failure_line
from reports.scope import scope_parts

__all__ = ["SMOKE_PLAN", "CertifyPlan", "assert_lossless"]


CORE_FIELDS = ("temperature", "top_k", "top_p")  # what every sampling case sets


def assert_lossless(
    decoder,
    model: str | None = "tiny-ouro",
    plan: str | CertifyPlan = SMOKE_PLAN,
    *,
    allow_refused: Sequence[str] = (),
    **options,
) -> Certificate:
    """Certify `decoder` (a decoder object, a factory or a --decoder spec: loopcert.api.certify) on
    `model` under `plan` (SMOKE_PLAN, the default: seconds; "quick", "full", or any CertifyPlan); `options`
    are certify's keywords (seed, dtype, device, label, time_budget, ...). -> the Certificate when
    it passes (or fails only on refusals `allow_refused` excuses); else AssertionError whose
    message has the verdict, one line per failed check and the parameters the verdict does not
    cover (not declared, refused).

    A case the decoder's engine refused (proofs.decoders.protocol.Refused) raises too, unless every
    parameter it was refused for is in `allow_refused` (e.g. ("top_p",), or ("min_p",) for the
    engines' other parameters, refdec.sampling.ENGINE_FIELDS): a refused core parameter
    (temperature, top_k, top_p) fails its sampling check, and the allow-list excuses exactly that
    failure. A usage error (a bad spec, a decoder built for another model, a parameter
    allow_refused does not know) is a LoopcertError."""
    allowed = allowed_refusals(allow_refused)
    cert = certify(model, decoder, plan=plan, **options)
    refused = cert.scope.refused if cert.scope is not None else ()
    barred = [r for r in refused if not {p.split("=")[0] for p in r.parameters} <= allowed]
    excused = {r.check for r in refused if r.core and r not in barred}
    blocking = [c for c in cert.checks if not c.passed and not (c.name in excused and only_refused(c))]
    if blocking or barred:
        raise AssertionError(failure_message(cert, blocking, barred))
    return cert


def allowed_refusals(names: Sequence[str]) -> set[str]:
    """allow_refused checked: parameter names of SamplingParams (LoopcertError naming another)."""
    if isinstance(names, str):
        raise LoopcertError(f"allow_refused takes a sequence of parameter names, got the string {names!r}")
    known = (*CORE_FIELDS, *ENGINE_FIELDS)
    bad = [n for n in names if n not in known]
    if bad:
        raise LoopcertError(f"allow_refused names unknown parameter(s) {bad}; known: {', '.join(known)}")
    return set(names)


def only_refused(c: CheckResult) -> bool:
    """The check failed only because its engine refused core parameters (SamplingDetails.refused_core)."""
    d = c.details
    return (
        isinstance(d, SamplingDetails)
        and bool(d.refused_core)
        and c.error is None
        and not (d.rejected or d.no_power or d.failed_samples or d.incomplete)
    )


def failure_message(
    cert: Certificate, blocking: Sequence[CheckResult] | None = None, barred: Sequence[Refusal] = ()
) -> str:
    """The verdict and, per failed (or incomplete) check in `blocking` (default: every one not
    passed), `name: reason`; the skipped checks; what the verdict does not cover; the refusals
    allow_refused did not excuse (`barred`)."""
    s = cert.stamp
    blocking = [c for c in cert.checks if not c.passed] if blocking is None else blocking
    lines = [f"{s.decoder} on {s.model} ({s.mode} plan, seed {s.seed}): {cert.verdict}"]
    lines += [f"  {c.name}: {failure_line(c)}" for c in blocking]
    lines += [f"  skipped {name}: {why}" for name, why in cert.skipped.items()]
    lines += [f"  scope: {part}" for part in scope_parts(cert.scope)]
    if barred:
        named = dict.fromkeys(f"{', '.join(r.parameters)} ({r.case})" for r in barred)
        lines.append(f"  refused, not in allow_refused: {'; '.join(named)}")
    return "\n".join(lines)
