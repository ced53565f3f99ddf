"""The certificate's section on the sampler conventions (kind sampler_convention): how far the
law the decoder claims lies from the other convention's on every case, a finding, not a test
(docs/certify.md#sampler-conventions)."""

from __future__ import annotations

from proofs.details import ConventionDetails
from proofs.result import CheckResult
from reports.markdown import fmt, stopped, table


def convention_section(c: CheckResult) -> str:
    d = c.details
    if not isinstance(d, ConventionDetails):
        return stopped(c, "## Sampler convention")
    rows = [
        [
            r.model,
            r.case,
            "yes (top-p)" if r.order_matters else "no: the same law",
            v.view,
            v.token_tv,
            v.binned_tv,
        ]
        for r in d.cases
        for v in r.views
    ]
    return "\n\n".join(
        [
            f"## Sampler convention: judged as {d.claimed} (reported)",
            d.how[0].upper() + d.how[1:] + ".",
            table(
                rows,
                [
                    "model",
                    "case",
                    "conventions differ",
                    "view",
                    f"TV of the token law vs {d.other}",
                    "binned TV (as the view sees it)",
                ],
            ),
            f"Largest binned TV: {fmt(c.measured)}.",
        ]
    )
