"""What a verdict covers, in words (proofs.certificate.Scope): the parts the verdict line of
`loopcert certify`, certificate.md and loopcert.testing.assert_lossless's message add after the
verdict, so that a PASS never reads as covering parameters the decoder was not sampled under.
"""

from __future__ import annotations

from proofs.certificate import Scope


def scope_parts(scope: Scope | None) -> list[str]:
    """One part per kind of gap: the engines' parameters the decoder does not declare (and the
    plan's cases left out for them), the cases its engine refused, each named once whatever checks
    met it; none when it covers everything (or the certificate predates the scope)."""
    if scope is None:
        return []
    parts = []
    if scope.not_declared:
        left = f" (cases not sampled: {'; '.join(scope.not_sampled)})" if scope.not_sampled else ""
        parts.append(f"not declared, never sampled: {', '.join(scope.not_declared)}{left}")
    if scope.refused_core:
        named = "; ".join(dict.fromkeys(f"{', '.join(r.parameters)} ({r.case})" for r in scope.refused_core))
        parts.append(f"refused core parameters (failed): {named}")
    engine = [r for r in scope.refused if not r.core]
    if engine:
        named = "; ".join(dict.fromkeys(f"{r.case} ({', '.join(r.parameters)})" for r in engine))
        parts.append(f"refused by the engine, not sampled: {named}")
    return parts
