"""reports/render.py: render-only markdown of a typed certificate, sections chosen by kind,
failures and gaps included."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

import certificates as make
import pytest
from certificates import certificate, result

from proofs.details import KINDS, Details, GreedyRun, SamplingDetails, SpeedError
from reports.markdown import fmt
from reports.render import RENDERED, render_certificate, status


@dataclass(frozen=True)
class NovelDetails(Details):
    """A kind the renderer has no section for (a check added before its section)."""

    kind: ClassVar[str] = "novel"
    figure: float


def checks(failing: bool):
    greedy = result(
        make.greedy(
            runs=(GreedyRun("tiny-raven", "pipelined d1=1 d2=2", "float32", prompts=2, tokens=12, agree=1),),
            divergences=(
                make.divergence(
                    candidate_gap=0.8 if failing else 2e-5,
                    classified="real bug" if failing else "numerical tie",
                ),
            ),
            real_bugs=1 if failing else 0,
            numerical_ties=0 if failing else 1,
        ),
        "greedy_float32",
        1 if failing else 0,
        0,
        not failing,
        seconds=1.5,
    )
    bitwise = result("bitwise", "bitwise_fixed_width", skipped="the candidate has no fixed-width mode")
    view = make.view(p_value=0.0 if failing else 0.4, holm_rejected=failing)
    sampling = result(
        make.sampling(cases=(make.case(impossible=3 if failing else 0, views=(view,)),)),
        "sampling[tiny-raven: pipelined]",
        0.0 if failing else 0.4,
        1e-3 / 2,
        not failing,
        power="every view must detect a binned TV >= 0.05 with probability >= 0.99 at alpha 0.0005",
    )
    weak = make.view(has_power=False, detectable_tv=0.2, p_value=0.3)
    no_power = result(
        make.sampling(
            no_power=("T=0.7 top-k=4",),
            cases=(make.case(has_power=False, samples=200, detectable_tv=0.2, views=(weak,)),),
        ),
        "sampling[tiny-raven: autoregressive slow]",
        0.3,
        1e-3,
        False,
    )
    crashed = result(
        "sampling",
        "sampling[tiny-raven: autoregressive]",
        math.nan,
        math.nan,
        False,
        error="RuntimeError: boom",
    )
    repro = result(
        make.reproducibility(differences=(make.seed_difference(),) if failing else ()),
        "reproducibility",
        1 if failing else 0,
        0,
        not failing,
    )
    always = make.mutant(
        rejected_by=() if failing else ("sampling",),
        rejected=not failing,
        ok=not failing,
        p_value=0.3 if failing else 0.0,
    )
    mutation = result(
        make.mutation(
            rows=(always, make.control()),
            survivors=1 if failing else 0,
            wrong=("always-accept",) if failing else (),
        ),
        "mutation",
        1 if failing else 0,
        0,
        not failing,
    )
    alarms = result(make.false_alarm(), "false_alarm", 0.0, 1e-3)
    t1 = result(make.theorem1(), "theorem1_random", 1.99, 2.0)
    t2 = result(make.theorem2_traces(), "theorem2_traces", 0.6, 1.0)
    pub = result(make.theorem2_published(), "theorem2_published", 0.005, 0.01)
    errors = (SpeedError("draft-verify", "RuntimeError: x"),) if failing else ()
    speed = result(make.speed(errors=errors), "speed", 1.4, 1.0, not failing)
    other = result(NovelDetails(3.0), "something_new", 3.0, 4.0)
    return greedy, bitwise, sampling, no_power, crashed, repro, mutation, alarms, t1, t2, pub, speed, other


@pytest.mark.parametrize("failing", [False, True])
def test_verdict_line_first_and_every_section_rendered(failing):
    md = render_certificate(certificate(*checks(failing)))
    first = md.splitlines()[0]
    assert first == "# loopcert certificate: FAIL"  # the crashed sampling check always fails it
    assert md.splitlines()[2].startswith("**FAIL**: ")
    for heading in (
        "## Stamp",
        "## Summary",
        "## Greedy exactness",
        "### bitwise_fixed_width: skipped",
        "## Distributional equality under sampling",
        "## Reproducibility",
        "## Mutation power",
        "## False-alarm rate",
        "## Theorem 1",
        "## Theorem 2",
        "## Speed",
        "## something_new",
    ):
        assert heading in md, heading
    assert "|---" in md.replace(":", "")  # github tables
    assert "abc123" in md and "`loopcert certify tiny-raven --quick`" in md
    assert "must detect a binned TV >= 0.05" in md and "N drawn/planned" in md
    assert "RuntimeError: boom" in md
    assert "nan" not in md.replace("nanoGPT", "") and "None" not in md


def test_every_kind_has_its_section():
    """A kind of the schema without a section would fall back to the generic one."""
    assert set(KINDS) <= RENDERED and "novel" not in RENDERED


def test_failures_are_visible():
    md = render_certificate(certificate(*checks(True)))
    assert "real bug" in md and "**WRONG**" in md and "3 sample(s) of probability 0" in md
    assert "RuntimeError: x" in md and "(3, 4, 6)" in md  # the speed error, the seed that did not reproduce
    ok = render_certificate(certificate(*checks(False)))
    assert "numerical tie" in ok and "**WRONG**" not in ok and "(3, 4, 6)" not in ok


def test_render_does_not_compute_and_is_deterministic():
    cert = certificate(*checks(False))
    assert render_certificate(cert) == render_certificate(cert)


@pytest.mark.parametrize(
    "x,want",
    [
        (None, "—"),
        ("nan", "—"),
        (math.nan, "—"),
        ("inf", "∞"),
        (math.inf, "∞"),
        (-math.inf, "-∞"),
        (True, "yes"),
        (3, "3"),
        (0.123456, "0.1235"),
        (2.5e-7, "2.50e-07"),
        ([1, 2.5], "(1, 2.5)"),
        ((1, 2), "(1, 2)"),
        ("text", "text"),
    ],
)
def test_fmt(x, want):
    assert fmt(x) == want


def test_summary_never_hides_a_failure_behind_skipped_runs():
    """reports/render.py used to print "skipped" whenever a check had skipped runs, even when it
    had FAILED; a failure is FAIL, and skipped / not-applicable runs are listed with the reason."""
    failed = result(
        make.greedy(
            runs=(), real_bugs=4, tie_tolerance={}, not_applicable=("x on tiny-raven: own checkpoint only",)
        ),
        "greedy_float64",
        4,
        0,
        False,
    )
    skipped_but_failed = result("bitwise", "bitwise_fixed_width", 1, 0, False, skipped="x on tiny-ouro: y")
    na = result(
        SamplingDetails.unsampled("tiny-raven", "the certified model", 60.0),
        "sampling[tiny-raven: mine]",
        math.nan,
        math.nan,
        not_applicable="serves only /models/mine",
    )
    md = render_certificate(certificate(failed, skipped_but_failed, na, model="m", decoder="d"))
    summary = md[md.index("## Summary") : md.index("## Greedy")]
    row = next(line for line in summary.splitlines() if line.startswith("| greedy_float64"))
    assert "**FAIL**" in row and "skipped |" not in row
    assert "1 run(s) not applicable: x on tiny-raven: own checkpoint only" in row
    bit = [cell.strip() for cell in summary.split("| bitwise_fixed_width")[1].splitlines()[0].split("|")]
    assert bit[3] == "**FAIL**" and bit[4] == "skipped: x on tiny-ouro: y"  # (measured, bound, result, notes)
    na_row = next(line for line in summary.splitlines() if line.startswith("| sampling[tiny-raven: mine]"))
    assert "| not applicable" in na_row and "serves only /models/mine" in na_row
    # an unsampled check stays in its model's group, with why
    assert "- sampling[tiny-raven: mine]: not applicable: serves only /models/mine" in md


def test_a_real_bug_that_is_an_exception_shows_its_text_in_the_markdown():
    """The exception behind a greedy "real bug" was only in certificate.json; certificate.md
    names it beside the divergence (a reviewer reads the markdown)."""
    bug = make.divergence(
        candidate=None,
        top2_margin=None,
        candidate_gap=None,
        classified="real bug",
        why="RuntimeError: boom 42",
    )
    tie = make.divergence(prompt=(1, 2))
    c = result(
        make.greedy(divergences=(bug, tie), real_bugs=1, numerical_ties=1), "greedy_float64", 1, 0, False
    )
    md = render_certificate(certificate(c))
    assert "- tiny-raven / pipelined d1=1 d2=2, prompt (0, 5): `RuntimeError: boom 42`" in md
    assert "prompt (1, 2):" not in md  # a tie has no why: no line


def test_a_seed_that_does_not_pin_the_output_shows_the_flag_that_fixes_it():
    """A server that ignores seeds: the reproducibility section prints the check's power line, which
    carries the decoder's seed_hint (SGLang: --enable-deterministic-inference)."""
    d = make.reproducibility(differences=(make.seed_difference(),))
    hint = "3 seeds x 2 runs at T=1; http (sglang): start SGLang with --enable-deterministic-inference"
    c = result(d, "reproducibility", 1, 0, False, power=hint)
    assert f"Checked: {hint}." in render_certificate(certificate(c))
    ok = result(make.reproducibility(), "reproducibility", 0, 0, True, power=hint)
    assert "Checked:" not in render_certificate(certificate(ok))  # nothing to fix: no line


def cells(line: str) -> list[str]:
    """The cells of one markdown table row, unpadded."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


NO_PAIR = "R=2 leaves no depth pair d1 < d2 < R (Theorem 1's p_d1 and p_d2; Theorem 2's second proposal)"


def test_theorem_checks_that_do_not_apply_say_so_with_the_reason():
    """LoopCoder's R = 2 trace checks (proofs/run/run.py): their Theorem 1 row and Theorem 2 line
    say "not applicable" and why, as the summary does, never "pass"; the checks that ran beside
    them keep their figures."""
    t1 = make.not_applicable("theorem1", "theorem1_traces", NO_PAIR, 2.0)
    t2 = make.not_applicable("theorem2_traces", "theorem2_traces", NO_PAIR, 1.0)
    ran = result(make.theorem1(), "theorem1_random", 1.99, 2.0)
    pub = result(make.theorem2_published(), "theorem2_published", 0.005, 0.01)
    md = render_certificate(certificate(ran, t1, t2, pub))
    theorem1 = md.split("## Theorem 1")[1].split("## Theorem 2")[0]
    theorem2 = md.split("## Theorem 2")[1].split("\n## ")[0]
    rows = {r[0]: r[1:] for r in (cells(line) for line in theorem1.splitlines() if line.startswith("| "))}
    assert rows["theorem1_traces"][-1] == f"not applicable: {NO_PAIR}", rows
    assert rows["random + adversarial families (V=8, seed 0)"][-1] == "pass"  # ran beside it: figures
    assert f"theorem2_traces: not applicable: {NO_PAIR}" in theorem2
    assert "theorem2_traces: pass" not in md
    assert ["result", "pass"] in [cells(line) for line in theorem2.splitlines()]  # the published one ran
    assert status(t1) == ("not applicable", f"not applicable: {NO_PAIR}")


def test_a_failed_theorem_check_is_never_shown_as_not_applicable():
    # control: the reason does not hide a failure (as in the summary)
    bad = replace(make.not_applicable("theorem2_traces", "theorem2_traces", NO_PAIR), passed=False)
    md = render_certificate(certificate(bad))
    assert "theorem2_traces: **FAIL**" in md and "theorem2_traces: not applicable" not in md


def test_no_power_is_a_visible_failure():
    md = render_certificate(certificate(*checks(False)))
    assert "**FAIL** (no power)" in md and "no power: reached TV 0.2" in md and "needs N = 3800" in md


def test_the_summary_names_why_a_sampling_check_failed():
    """A case rejected on its samples is named as rejected (and for its impossible samples), not as
    "no power": the lossy server's certificate once headlined "no power" for a case Holm rejected."""
    lossy = make.sampling(rejected=("T=1.5 top-p=0.9",), failed_samples=("T=1.5 top-p=0.9",), no_power=())
    word, note = status(result(lossy, "sampling[default: lossy]", 0.0, 1e-4, False))
    assert word == "**FAIL**" and "rejected: T=1.5 top-p=0.9" in note and "no power" not in note
    assert "impossible samples or decoder errors: T=1.5 top-p=0.9" in note


def test_sampling_section_states_untested_views_and_how_each_case_was_chosen():
    md = render_certificate(certificate(*checks(False)))
    assert "Views not tested (by rule, from the law): T=0.7 top-k=4: token 2 | 3: the prefix has" in md
    assert (
        "Cases chosen from this model's law (proofs.run.cases.choose_case): T=0.7 top-k=4 (N 4,000): the"
        in md
    )
    assert "passed over T=0.3 top-k=4: no power" in md


def test_mutants_are_named_by_id_and_controls_marked():
    md = render_certificate(certificate(*checks(False)))
    mutants = md[md.index("## Mutation power") : md.index("## False-alarm rate")]
    assert "| always-accept " in mutants and "| control-gate-inverted " in mutants
    assert "1 wrong decoders and 1 lossless controls" in mutants


def test_a_check_that_does_not_apply_is_not_counted_as_passed_in_the_verdict_line():
    ok = result(make.greedy(), "greedy_float64")
    na = make.not_applicable("theorem1", "theorem1_traces", "R=2 leaves no depth pair d1 < d2 < R")
    md = render_certificate(certificate(ok, na))
    assert "**PASS**: 1/1 checks passed (1 not applicable) for" in md
    assert "**PASS**: 1/1 checks passed for" in render_certificate(certificate(ok))


@pytest.mark.parametrize(
    "kind, name, title",
    [
        ("greedy", "greedy_float64", "### greedy_float64"),
        ("reproducibility", "reproducibility", "## Reproducibility"),
        ("mutation", "mutation", "## Mutation power"),
        ("false_alarm", "false_alarm", "## False-alarm rate"),
        ("speed", "speed", "## Speed"),
    ],
)
def test_a_check_that_stopped_before_measuring_shows_its_heading_and_error(kind, name, title):
    """No details (the check raised before it measured): its section is the heading, FAIL, and
    the error, never a half-rendered table (reports.markdown.section)."""
    md = render_certificate(certificate(result(kind, name, math.nan, math.nan, False, error="OSError: gone")))
    assert f"{title}: **FAIL**\n\nThe check could not run: `OSError: gone`" in md


def test_a_budget_that_cut_sampling_short_says_the_budget_that_reaches_n():
    """A case the deadline stopped fails as no power; the section says what reaching every case's N
    takes at the measured rates (sum of N / rate, 4000/400 + 8000/20 = 410 s) and the budget to ask
    for (1.25 x, rounded up); a case that drew nothing has no rate: --predict is named instead."""
    cut = make.case(
        case="T=1.5 top-p=0.9", planned=8000, samples=300, samples_per_s=20.0, stopped_by_deadline=True
    )
    d = make.sampling(cases=(make.case(), cut), no_power=("T=1.5 top-p=0.9",))
    md = render_certificate(certificate(result(d, "sampling[tiny-raven: pipelined]", 0.2, 1e-4, False)))
    assert "stopped sampling short of N in 1 of 2 case(s)" in md
    assert "about 410 s" in md and "`--time-budget 513`" in md and "drew no sample" not in md
    nothing = replace(cut, samples=0, samples_per_s=None)
    d = make.sampling(cases=(make.case(), nothing), no_power=("T=1.5 top-p=0.9",))
    md = render_certificate(certificate(result(d, "sampling[tiny-raven: pipelined]", 0.2, 1e-4, False)))
    assert "1 case(s) drew no sample" in md and "--predict SECONDS" in md
    assert "stopped sampling short" not in render_certificate(certificate(*checks(True)))
