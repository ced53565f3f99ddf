"""One line per failed check, for the console's last lines (loopcert certify / merge): the
certificate says everything; the console says which checks failed and why, so that a user reads
the cause without opening the report.

The line is the summary table's note (reports/render.py status) where it has one; else what the
check's kind states about its first failure; else its measured value against its bound.
"""

from __future__ import annotations

from proofs.details import (
    BitwiseDetails,
    DepthDetails,
    Divergence,
    GreedyDetails,
    MutationDetails,
    ReproducibilityDetails,
    SeedInvarianceDetails,
)
from proofs.result import CheckResult
from reports.markdown import DASH, fmt
from reports.render import status

MAX_CHARS = 300  # one terminal line or two: the certificate has the rest


def divergence_text(v: Divergence) -> str:
    """One greedy divergence in the user's terms: what generate() did at which new token."""
    if v.reference is None and v.candidate is None and v.why:  # nothing to compare: it raised
        return f"generate() raised {v.why}"
    if v.reference is None and v.candidate is None:
        return f"new token {v.position}: no token to compare"
    mine = "none" if v.candidate is None else v.candidate
    ref = "" if v.reference is None else f"the reference's {v.reference}, "
    return f"new token {v.position}: {ref}the decoder's {mine}" + (f" ({v.why})" if v.why else "")


def failure_line(c: CheckResult) -> str:
    """Why check `c` failed, on one line."""
    d = c.details
    _, note = status(c)
    if note != DASH:
        why = note
    elif isinstance(d, GreedyDetails) and d.divergences:
        v = next((v for v in d.divergences if v.classified == "real bug"), d.divergences[0])
        why = (
            f"{d.real_bugs} real bug(s) in {len(d.divergences)} divergence(s); first: {v.setting} on "
            f"{v.model} ({v.dtype}), prompt of {len(v.prompt)} token(s): {divergence_text(v)}"
        )
    elif isinstance(d, DepthDetails) and d.divergences:
        v = next((v for v in d.divergences if v.classified == "real bug"), d.divergences[0])
        ref = "no token" if v.reference is None else v.reference
        mine = "no token" if v.candidate is None else v.candidate
        why = (
            f"{d.real_bugs} real bug(s) in {len(d.divergences)} divergence(s) at depth; first: {v.setting} "
            f"({v.dtype}), prompt of {v.prompt_len} token(s) + {v.tokens}: position {v.position} "
            f"({v.near}): the reference's {ref}, the decoder's {mine}" + (f" ({v.why})" if v.why else "")
        )
    elif isinstance(d, DepthDetails) and any(r.error for r in d.runs):
        r = next(r for r in d.runs if r.error)
        why = f"{r.setting} ({r.dtype}) could not run: {r.error}"
    elif isinstance(d, BitwiseDetails) and d.mismatches:
        m = d.mismatches[0]
        at = f"an error: {m.error}" if m.first_difference is None else f"token {m.first_difference}"
        why = f"{len(d.mismatches)} run(s) differ from the engine's baseline; first: {m.setting} at {at}"
    elif isinstance(d, MutationDetails) and d.wrong:
        why = (
            f"judged wrongly: {', '.join(d.wrong)} ({d.survivors} mutant(s) survived, "
            f"{d.controls_flagged} control(s) flagged)"
        )
    elif isinstance(d, SeedInvarianceDetails) and d.differences:
        s = d.differences[0]
        why = (
            f"{len(d.differences)} decode(s) beside other prompts gave other tokens than alone; first: "
            f"{s.setting} seed {s.seed}"
        )
    elif isinstance(d, ReproducibilityDetails) and d.differences:
        s = d.differences[0]
        why = (
            f"{len(d.differences)} seed(s) gave other tokens on a second run; first: {s.setting} "
            f"seed {s.seed}"
        )
    else:
        why = f"measured {fmt(c.measured)} against bound {fmt(c.bound)}"
    why = " ".join(why.split())  # one line, whatever a reason held
    return why if len(why) <= MAX_CHARS else why[: MAX_CHARS - 3] + "..."
