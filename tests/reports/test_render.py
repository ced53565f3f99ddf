"""reports/render.py: render-only markdown of a certificate, failures and gaps included."""

from __future__ import annotations

import math

import pytest

from proofs.result import CheckResult
from reports.render import fmt, render_certificate


def check(name, measured, bound, passed, details, power=None):
    return CheckResult(name, measured, bound, passed, details, power).to_dict()


def certificate(failing: bool) -> dict:
    greedy = check(
        "greedy_float32",
        1 if failing else 0,
        0,
        not failing,
        {
            "runs": [
                {
                    "model": "tiny-raven",
                    "setting": "pipelined d1=1 d2=2",
                    "dtype": "float32",
                    "prompts": 2,
                    "tokens": 12,
                    "agree": 1,
                }
            ],
            "divergences": [
                {
                    "model": "tiny-raven",
                    "setting": "pipelined d1=1 d2=2",
                    "prompt": [0, 5],
                    "dtype": "float32",
                    "position": 4,
                    "reference": 3,
                    "candidate": 7,
                    "top2_margin": 2e-5,
                    "candidate_gap": 2e-5 if not failing else 0.8,
                    "class": "real bug" if failing else "numerical tie",
                }
            ],
            "real_bugs": 1 if failing else 0,
            "numerical_ties": 0 if failing else 1,
            "tie_tolerance": {"float64": 1e-9, "float32": 1e-3},
            "tokens_per_prompt": 12,
            "seconds": 1.5,
        },
    )
    bitwise = check("bitwise_fixed_width", 0, 0, True, {"skipped": "the candidate has no fixed-width mode"})
    view = {
        "view": "token 1",
        "law": "law of token 1 over 13 tokens",
        "counted": 4000,
        "needed_n": 3800,
        "target_tv": 0.05,
        "bin_labels": ["token 3", "ranks 2..13"],
        "bin_probs": [0.5, 0.5],
        "counts": [2000, 2000],
        "bins": 2,
        "stat": 0.1,
        "p_value": 0.0 if failing else 0.4,
        "detectable_tv": 0.048,
        "empirical_tv": 0.01,
        "has_power": True,
        "case": "T=0.7 top-k=4",
        "holm_rejected": failing,
    }
    sampling = check(
        "sampling[tiny-raven: pipelined]",
        0.0 if failing else 0.4,
        1e-3 / 2,
        not failing,
        {
            "alpha": 1e-3,
            "alpha_test": 5e-4,
            "target_tv": 0.05,
            "power_level": 0.99,
            "detectable_tv": 0.048,
            "no_power": [],
            "samples": 4000,
            "sampling_seconds": 10.0,
            "samples_per_s": 400.0,
            "budget_s": 60.0,
            "model": "tiny-raven",
            "why_this_model": "the certified model, at its own vocabulary (V=13)",
            "cases": [
                {
                    "case": "T=0.7 top-k=4",
                    "temperature": 0.7,
                    "top_k": 4,
                    "top_p": None,
                    "prompt": [0, 5],
                    "tokens": 3,
                    "planned": 4000,
                    "samples": 4000,
                    "seconds": 10.0,
                    "samples_per_s": 400.0,
                    "batched": True,
                    "impossible": 3 if failing else 0,
                    "error": None,
                    "seeds": [0, 3999],
                    "stopped_by_deadline": False,
                    "detectable_tv": 0.048,
                    "needed_n": 3800,
                    "has_power": True,
                    "not_tested": ["token 2 | 3: the prefix has probability 0.1 < 0.2"],
                    "chosen": "the first of 2; passed over T=0.3 top-k=4: no power",
                    "views": [view],
                }
            ],
        },
        "every view must detect a binned TV >= 0.05 with probability >= 0.99 at alpha 0.0005",
    )
    no_power = check(
        "sampling[tiny-raven: autoregressive slow]",
        0.3,
        1e-3,
        False,
        {
            **sampling["details"],
            "no_power": ["T=0.7 top-k=4"],
            "cases": [
                {
                    **sampling["details"]["cases"][0],
                    "impossible": 0,
                    "has_power": False,
                    "samples": 200,
                    "detectable_tv": 0.2,
                    "views": [
                        {
                            **view,
                            "has_power": False,
                            "detectable_tv": 0.2,
                            "holm_rejected": False,
                            "p_value": 0.3,
                        }
                    ],
                }
            ],
        },
    )
    crashed = check(
        "sampling[tiny-raven: autoregressive]", math.nan, math.nan, False, {"error": "RuntimeError: boom"}
    )
    mutation = check(
        "mutation",
        1 if failing else 0,
        0,
        not failing,
        {
            "model": "tiny-ouro",
            "n_samples": 1000,
            "alpha": 1e-3,
            "survivors": 1 if failing else 0,
            "controls_flagged": 0,
            "greedy_prompts": [[1, 2, 3]],
            "greedy_tokens": 12,
            "wrong": [],
            "rows": [
                {
                    "name": "always-accept",
                    "bug": "u = 0",
                    "control": False,
                    "settings": "specref d1=1",
                    "cases": ["top-p=0.5"],
                    "rejected_by": [] if failing else ["sampling"],
                    "rejected": not failing,
                    "ok": not failing,
                    "p_value": 0.3 if failing else 0.0,
                    "alpha_case": 1e-3,
                    "tv": 0.58,
                    "binned_tv": 0.58,
                    "detectable_tv": 0.12,
                    "empirical_binned_tv": 0.59,
                },
                {
                    "name": "control: gate inverted",
                    "bug": "x",
                    "control": True,
                    "settings": "specref",
                    "cases": ["T=0.5"],
                    "rejected_by": [],
                    "rejected": False,
                    "ok": True,
                    "p_value": 0.8,
                    "alpha_case": 1e-3,
                    "tv": 1.6e-16,
                    "binned_tv": 1.6e-16,
                    "detectable_tv": 0.13,
                    "empirical_binned_tv": 0.05,
                },
            ],
        },
    )
    t1 = check(
        "theorem1_random",
        1.99,
        2.0,
        True,
        {"cases": 1000, "vocab": 8, "seed": 0, "max_ratio_ungated": 1.0, "max_lemma_ratio": 0.97},
    )
    t2 = check(
        "theorem2_traces",
        0.6,
        1.0,
        True,
        {
            "model": "tiny-raven",
            "R": 4,
            "positions": 18,
            "temperature": 1.0,
            "mean_tv": [0.4, 0.2, 0.1, 0.0],
            "alpha": 1.1,
            "beta": 0.45,
            "envelope": [0.45, 0.2, 0.13, 0.1],
            "d1_star": 1.2,
            "d2_star": 2.6,
            "bound_best_integer": [1, 2],
            "measured_best": [1, 2],
            "measured_best_cost": 2.4,
            "rounded_star": [1, 3],
            "rounded_star_cost": 2.6,
            "autoregressive_cost": 4,
            "measured": "exact E[C]",
            "grid": [
                {"d1": 1, "d2": 2, "p_x1_rejected": 0.4, "p_both_rejected": 0.1, "cost": 2.2, "bound": 3.0}
            ],
            "worst_pair": [1, 2],
        },
    )
    pub = check(
        "theorem2_published",
        0.005,
        0.01,
        True,
        {
            "alpha": 1.03,
            "beta": 0.175,
            "R": 32,
            "d1": 1.26,
            "d2": 8.85,
            "d1_closed_form": 1.2583,
            "d2_closed_form": 8.8451,
            "cost_closed_form": 5.0,
            "best_integer_depths": [1, 8],
            "measured_best": [2, 8],
        },
    )
    speed = check(
        "speed",
        1.4,
        1.0,
        True,
        {
            "rows": [
                {"setting": "autoregressive (baseline)", "tokens_per_s": 20.0, "speedup": 1.0},
                {
                    "setting": "pipelined",
                    "tokens_per_s": 28.0,
                    "speedup": 1.4,
                    "acceptance_rate": 0.6,
                    "gamma": 1.7,
                },
            ],
            "errors": [{"setting": "draft-verify", "error": "RuntimeError: x"}] if failing else [],
            "prompts": 1,
            "tokens_per_prompt": 16,
            "repeats": 2,
            "device": "cpu",
            "dtype": "float32",
            "baseline": "autoregressive",
            "informational": True,
        },
    )
    other = check("something_new", 3.0, 4.0, True, {})
    checks = [greedy, bitwise, sampling, no_power, crashed, mutation, t1, t2, pub, speed, other]
    failed = [c["name"] for c in checks if not c["passed"]]
    return {
        "verdict": "FAIL" if failed else "PASS",
        "passed": not failed,
        "failed": failed,
        "stamp": {
            "commit": "abc123",
            "date": "2026-01-01T00:00:00+00:00",
            "torch": "2.13",
            "cuda": "none",
            "device_name": "x86_64",
            "python": "3.11",
            "platform": "Linux",
            "threads": 1,
            "cpu_count": 2,
            "device": "cpu",
            "dtype": "float32",
            "mode": "quick",
            "model": "tiny-raven",
            "decoder": "fastdec",
            "seed": 0,
            "seeds": {"sampling": [0, 399], "mutants": [0, 999], "greedy": 0},
            "R": 6,
            "vocab_size": 13,
            "settings": ["pipelined"],
            "seconds": 12.0,
            "command": "loopcert certify tiny-raven --quick",
        },
        "checks": checks,
    }


@pytest.mark.parametrize("failing", [False, True])
def test_verdict_line_first_and_every_section_rendered(failing):
    md = render_certificate(certificate(failing))
    first = md.splitlines()[0]
    assert first == "# loopcert certificate: FAIL"  # the crashed sampling check always fails it
    assert md.splitlines()[2].startswith("**FAIL**: ")
    for heading in (
        "## Stamp",
        "## Summary",
        "## Greedy exactness",
        "### bitwise_fixed_width: skipped",
        "## Distributional equality under sampling",
        "## Mutation power",
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


def test_failures_are_visible():
    md = render_certificate(certificate(True))
    assert "real bug" in md and "**WRONG**" in md and "3 sample(s) of probability 0" in md
    assert "RuntimeError: x" in md
    ok = render_certificate(certificate(False))
    assert "numerical tie" in ok and "**WRONG**" not in ok


def test_render_does_not_compute_and_is_deterministic():
    cert = certificate(False)
    assert render_certificate(cert) == render_certificate(cert)


@pytest.mark.parametrize(
    "x,want",
    [
        (None, "—"),
        ("nan", "—"),
        (math.nan, "—"),
        ("inf", "∞"),
        (math.inf, "∞"),
        (True, "yes"),
        (3, "3"),
        (0.123456, "0.1235"),
        (2.5e-7, "2.50e-07"),
        ([1, 2.5], "(1, 2.5)"),
        ("text", "text"),
    ],
)
def test_fmt(x, want):
    assert fmt(x) == want


def test_summary_never_hides_a_failure_behind_skipped_runs():
    """reports/render.py used to print "skipped" whenever a check had skipped runs, even when it
    had FAILED; a failure is FAIL, and skipped / not-applicable runs are listed with the reason."""
    failed = check(
        "greedy_float64",
        4,
        0,
        False,
        {
            "runs": [],
            "divergences": [],
            "real_bugs": 4,
            "numerical_ties": 0,
            "tie_tolerance": {},
            "tokens_per_prompt": 6,
            "skipped": ["x on tiny-ouro: RuntimeError: y"],
            "not_applicable": ["x on tiny-raven: own checkpoint only"],
        },
    )
    na = check(
        "sampling[tiny-raven: mine]",
        math.nan,
        math.nan,
        True,
        {"not_applicable": "serves only /models/mine", "model": "tiny-raven"},
    )
    cert = {
        "verdict": "FAIL",
        "passed": False,
        "failed": ["greedy_float64"],
        "stamp": {"model": "m", "decoder": "d", "device": "cpu", "dtype": "float32", "seconds": 1.0},
        "checks": [failed, na],
    }
    md = render_certificate(cert)
    summary = md[md.index("## Summary") : md.index("## Greedy")]
    row = next(line for line in summary.splitlines() if line.startswith("| greedy_float64"))
    assert "**FAIL**" in row and "skipped |" not in row
    assert "1 run(s) not applicable: x on tiny-raven: own checkpoint only" in row
    assert "1 run(s) skipped: x on tiny-ouro" in row
    na_row = next(line for line in summary.splitlines() if line.startswith("| sampling[tiny-raven: mine]"))
    assert "| not applicable" in na_row and "serves only /models/mine" in na_row


def test_no_power_is_a_visible_failure():
    md = render_certificate(certificate(False))
    assert "**FAIL** (no power)" in md and "no power: reached TV 0.2" in md and "needs N = 3800" in md


def test_the_summary_names_why_a_sampling_check_failed():
    """A case rejected on its samples is named as rejected (and for its impossible samples), not as
    "no power": the lossy server's certificate once headlined "no power" for a case Holm rejected."""
    from reports.render import status

    result, note = status(
        {
            "name": "sampling[default: lossy]",
            "passed": False,
            "details": {
                "rejected": ["T=1.5 top-p=0.9"],
                "failed_samples": ["T=1.5 top-p=0.9"],
                "no_power": [],
            },
        }
    )
    assert result == "**FAIL**" and "rejected: T=1.5 top-p=0.9" in note and "no power" not in note
    assert "impossible samples or decoder errors: T=1.5 top-p=0.9" in note


def test_sampling_section_states_untested_views_and_how_each_case_was_chosen():
    md = render_certificate(certificate(False))
    assert "Views not tested (by rule, from the law): T=0.7 top-k=4: token 2 | 3: the prefix has" in md
    assert (
        "Cases chosen from this model's law (proofs.run.certify.choose_case): T=0.7 top-k=4 (N 4,000): the"
        in md
    )
    assert "passed over T=0.3 top-k=4: no power" in md
