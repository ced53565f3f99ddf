"""proofs/checks/depth.py: greedy at depth and boundary coverage, each with a negative control."""

import pytest
import torch

import fastdec
import refdec
from proofs import boundaries as bd
from proofs.checks.depth import CROSS, check_coverage, check_depth, coverage, horizon_for, placements
from proofs.decoders.edges import EdgeBugs, EdgeSpec
from proofs.prompts import long_prompt
from proofs.stats.exact_laws import Oracle


@pytest.fixture(scope="module")
def model():
    cfg = refdec.get_preset("tiny-loopcoder").replace(loop_window_size=16, max_seq_len=96)
    return refdec.LoopedLM(cfg).init_weights(0).to(torch.float64).eval()


def plan(model, dec, context=32, cap=64):
    h = horizon_for(bd.collect(model.cfg, dec, 2), context, cap, model.cfg.max_seq_len)
    bounds = bd.collect(model.cfg, dec, h)
    return bounds, h, placements(bounds, h, model.cfg.max_seq_len)


def run(model, dec, dtype=torch.float64):
    bounds, h, places = plan(model, dec)
    r = check_depth(
        "greedy_depth",
        "lc16",
        [("x", dec, dtype)],
        Oracle.over(model),
        lambda n: long_prompt(model, "lc16", n),
        places,
        bounds,
        h,
    )
    return r, bounds, h


def test_placements_cross_every_boundary_and_two_windows(model):
    dec = EdgeSpec(model, k=3, bugs=EdgeBugs(page=24))
    bounds, h, places = plan(model, dec)
    assert h == 2 * 16 + CROSS  # two windows (32 = the context asked) plus the crossing tokens
    got = {(p.prompt_len, p.tokens) for p in places}
    assert {(15, CROSS), (17, CROSS), (23, CROSS), (25, CROSS), (4, CROSS)} <= got  # window, page, k+1
    long = max(places, key=lambda p: p.tokens)
    assert long.prompt_len + long.tokens == h and long.tokens >= 2 * 16
    rows = coverage(bounds, h, [(p.prompt_len, p.tokens, 1) for p in places], [])
    assert all(r.status in ("covered", "beyond the horizon") for r in rows)
    assert check_coverage("coverage", "lc16", h, rows).passed


def test_a_declared_boundary_nobody_crossed_fails_as_no_coverage(model):
    """Negative control: the same boundaries with only short runs: the window and the page are
    declared, within the horizon, and not crossed."""
    dec = EdgeSpec(model, k=3, bugs=EdgeBugs(page=24))
    bounds, h, _ = plan(model, dec)
    rows = coverage(bounds, h, [(3, 4, 1)], [(3, 3, 100)])
    r = check_coverage("coverage", "lc16", h, rows)
    assert not r.passed and r.measured == sum(r.status == "NO COVERAGE" for r in rows) >= 2
    by = {(x.position, x.source): x for x in rows}
    assert by[(16, "model")].status == "NO COVERAGE" and by[(32, "ladder")].status == "not crossed (ladder)"
    assert by[(4, "ladder")].samples == 100 and by[(94, "model")].status == "beyond the horizon"


def test_fastdec_is_exact_at_depth(model):
    dec = fastdec.Decoder(model, "draft-verify", dtype=torch.float32, draft_ahead=3)  # a float32 copy
    r, _, _ = run(model, dec, torch.float32)
    assert r.passed, r.details.divergences
    assert r.details.runs[0].agree == len(r.details.placements)


def test_a_window_bug_is_named_relative_to_the_window(model):
    """Negative control: a rejected draft kept once the window wrapped."""
    r, _, _ = run(model, EdgeSpec(model, bugs=EdgeBugs(window_untrimmable=True)))
    assert not r.passed
    first = next(d for d in r.details.divergences if d.classified == "real bug")
    assert first.position > 16 and "window" in first.near and first.near.endswith(f"+ {first.position - 16}")


def test_sections_name_the_divergence_and_the_uncovered_boundary(model):
    from reports.coverage import coverage_section, depth_section

    r, bounds, h = run(model, EdgeSpec(model, bugs=EdgeBugs(window_untrimmable=True)))
    text = depth_section(r)
    assert "## Greedy at depth: **FAIL**" in text and "window cache of 16 wraps (position 16) +" in text
    rows = coverage(bounds, h, [(3, 4, 1)], [])
    text = coverage_section(check_coverage("coverage", "lc16", h, rows))
    assert "NO COVERAGE" in text and "loop_window_size 16 wraps" in text
