"""`loopcert certify`: exit codes 0 / 1 / 2, the reports it writes, and atomic writing.

The runs use a reduced plan (a handful of samples, three library entries) so that the whole
command path runs in seconds; the real QUICK plan is what `tox -e certify` runs.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from certificates import stamp as certificate_stamp
from plans import SMALL_PLAN

import proofs.run.plan as plan_mod
import refdec
from loopcert.cli import main
from proofs.certificate import Certificate, read_certificate
from proofs.checks import mutation as mutant_lib
from proofs.checks.distribution import COUNT_MARGIN_SIGMAS, alpha_per_test
from proofs.cost import predict as predict_mod
from proofs.run.budget import SHARE_SLACK
from proofs.run.certify import certify, default_model_name
from proofs.run.plan import FULL, QUICK, case_options
from proofs.run.run import CertifyRun
from proofs.run.sampling_units import sampling_checks, sampling_result, sampling_unit_result
from proofs.stats.chisquare import detectable_tv
from proofs.stats.exact_laws import Oracle
from proofs.stats.views import Case, case_law
from refdec.sampling import SamplingParams, sample, transform

TEST_PLAN = SMALL_PLAN


class ShallowDecoder:
    """A wrong decoder: decides every token at depth 1 instead of R (greedy and sampling)."""

    def __init__(self, model):
        self.model = model

    def generate(self, prompt, max_new_tokens, sampling, seed):
        ids, gen = list(prompt), torch.Generator().manual_seed(seed)
        for _ in range(max_new_tokens):
            law = transform(self.model.depth_logits(ids, [1])[0, -1], sampling)
            ids.append(int(law.argmax()) if sampling.greedy else sample(law, gen))
        return ids[len(prompt) :]


def shallow_factory(model):
    return ShallowDecoder(model)


class ReferenceDecoder:
    """refdec itself, through the protocol: a user decoder that must pass."""

    def __init__(self, model):
        self.model = model

    def generate(self, prompt, max_new_tokens, sampling, seed):
        return refdec.generate(self.model, prompt, max_new_tokens, sampling, seed)


def reference_factory(model):
    return ReferenceDecoder(model)


@pytest.fixture
def small_plan(monkeypatch):
    monkeypatch.setitem(plan_mod.PLANS, "quick", TEST_PLAN)


@pytest.fixture(scope="module")
def passing_run(tmp_path_factory):
    """One passing run of the reduced plan on tiny-ouro (fastdec), shared by several tests."""
    mp = pytest.MonkeyPatch()
    mp.setitem(plan_mod.PLANS, "quick", TEST_PLAN)
    out = tmp_path_factory.mktemp("cert")
    try:
        rc = main(["certify", "tiny-ouro", "--out", str(out), "--seed", "3"])
    finally:
        mp.undo()
    return rc, out


def test_passing_run_exits_0_and_writes_both_reports(passing_run):
    rc, out = passing_run
    assert rc == 0
    cert = read_certificate(out / "certificate.json")
    md = (out / "certificate.md").read_text()
    assert cert.verdict == "PASS" and cert.failed == ()
    assert md.startswith("# loopcert certificate: PASS")
    assert (out / "certificate.md").stat().st_mode & 0o004  # readable, not mkstemp's 0600
    names = [c.name for c in cert.checks]
    for want in (
        "greedy_float64",
        "greedy_float32",
        "bitwise_fixed_width",
        "mutation",
        "theorem1_random",
        "theorem1_search",
        "theorem1_traces",
        "theorem2_traces",
        "theorem2_published",
        "speed",
    ):
        assert want in names
    assert sum(n.startswith("sampling[") for n in names) == 3  # one per fastdec setting
    assert sum(c.kind == "sampling" for c in cert.checks) == 3
    s = cert.stamp
    assert s.model == "tiny-ouro" and s.seed == 3 and s.dtype == "float32"
    assert s.command.startswith("loopcert certify tiny-ouro") and "--seed 3" in s.command
    for key in ("commit", "torch", "cuda", "device", "date", "seeds"):
        assert getattr(s, key)


def test_report_reads_as_markdown(passing_run):
    _, out = passing_run
    md = (out / "certificate.md").read_text()
    for heading in (
        "## Stamp",
        "## Summary",
        "## Greedy exactness",
        "## Distributional equality under sampling",
        "## Mutation power",
        "## Theorem 1",
        "## Theorem 2",
        "## Speed",
    ):
        assert heading in md
    assert "must detect a binned TV >= 0.3" in md  # the power statement
    sampling = [c for c in read_certificate(out / "certificate.json").checks if c.kind == "sampling"]
    for c in sampling:  # sampled on the certified model itself, at its own vocabulary, with power
        assert c.details.model == "tiny-ouro" and c.details.no_power == ()
        for case in c.details.cases:
            assert case.samples == case.planned > 0 and case.detectable_tv <= 0.3
    assert "| always-accept" in md and "(1.258, 8.845)" in md
    assert "\nnan" not in md and "None" not in md


@pytest.fixture
def importable_tests(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))


def test_failing_user_decoder_exits_1(small_plan, tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # importable whatever pytest's import mode
    rc = main(["certify", "tiny-ouro", "--decoder", "test_certify:shallow_factory", "--out", str(tmp_path)])
    assert rc == 1
    cert = read_certificate(tmp_path / "certificate.json")
    assert cert.verdict == "FAIL"
    assert "greedy_float64" in cert.failed
    assert "mutation" not in cert.failed  # the checks' own power is independent of the candidate
    assert "fixed-width" in cert.check("bitwise_fixed_width").skipped
    assert "FAIL" in capsys.readouterr().out


@pytest.mark.slow
def test_reference_as_user_decoder_exits_0(small_plan, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    rc = main(["certify", "tiny-ouro", "--decoder", "test_certify:reference_factory", "--out", str(tmp_path)])
    assert rc == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["--dtype", "float8"],
        ["--decoder", "nocolon"],
        ["--decoder", "no_such_module_q:f"],
        ["--device", "tpu"],
        ["--seed", "-1"],
        ["no-such-model-or-folder"],
        ["tiny-ouro", "--predict", "0"],
    ],
)
def test_usage_errors_exit_2(argv, tmp_path, capsys):
    assert main(["certify", *argv, "--out", str(tmp_path)]) == 2
    assert "loopcert certify: error:" in capsys.readouterr().err
    assert not (tmp_path / "certificate.md").exists()


def test_conflicting_plans_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["certify", "--quick", "--full"])
    assert e.value.code == 2


def _old_reports(tmp_path):
    (tmp_path / "certificate.md").write_text("old md\n")
    (tmp_path / "certificate.json").write_text('{"old": true}\n')


def test_a_crashed_run_leaves_the_last_report(tmp_path, monkeypatch):
    _old_reports(tmp_path)

    def crash(*a, **k):
        raise RuntimeError("interrupted halfway")

    monkeypatch.setattr("loopcert.commands.certify.run_certify", crash)
    with pytest.raises(RuntimeError):
        main(["certify", "tiny-ouro", "--out", str(tmp_path)])
    assert (tmp_path / "certificate.md").read_text() == "old md\n"
    assert (tmp_path / "certificate.json").read_text() == '{"old": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["certificate.json", "certificate.md"]


def test_a_render_failure_leaves_both_old_files(tmp_path, monkeypatch):
    _old_reports(tmp_path)
    monkeypatch.setattr(
        "loopcert.commands.certify.run_certify",
        lambda *a, **k: Certificate("PASS", (), {}, certificate_stamp(model="m", seconds=0.0)),
    )

    def broken(cert):
        raise KeyError("render")

    monkeypatch.setattr("loopcert.commands.certify.render_certificate", broken)
    with pytest.raises(KeyError):
        main(["certify", "tiny-ouro", "--out", str(tmp_path)])
    assert (tmp_path / "certificate.json").read_text() == '{"old": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["certificate.json", "certificate.md"]


def test_default_model_is_the_trained_one_when_installed():
    try:
        refdec.load_model("default")
    except refdec.LoopcertError:
        assert default_model_name() == "tiny-raven"
    else:
        assert default_model_name() == "default"


def test_a_time_budget_too_short_is_incomplete_naming_the_n_needed(small_plan, importable_tests, tmp_path):
    """The power rule under a budget: the lossless reference sampled for 0.01 s cannot reach the
    target, and the certificate must say INCOMPLETE (exit 3), never PASS, with the N it would need;
    never FAIL either: the budget is no evidence against the decoder (tests/proofs/run/test_incomplete.py)."""
    rc = main(
        [
            "certify",
            "tiny-ouro",
            "--decoder",
            "test_certify:reference_factory",
            "--out",
            str(tmp_path),
            "--time-budget",
            "0.01",
        ]
    )
    assert rc == 3
    cert = read_certificate(tmp_path / "certificate.json")
    s = next(c for c in cert.checks if c.kind == "sampling")
    assert cert.verdict == "INCOMPLETE" and not s.passed and s.details.incomplete == ("T=1",)
    case = s.details.cases[0]
    assert case.samples < case.planned and case.needed_n >= case.planned
    md = (tmp_path / "certificate.md").read_text()
    assert "incomplete, the time budget ran out" in md and "--time-budget 0.01" in md


def test_plans_target_detectable_tv():
    assert QUICK.tv == 0.05 and FULL.tv == 0.01
    assert QUICK.power == FULL.power == 0.99 and QUICK.alpha == FULL.alpha == 1e-3
    assert FULL.false_alarm >= 200


def test_quick_plan_covers_temperature_top_k_top_p_and_three_tokens():
    ps = [c[1] for c in QUICK.sampling_cases]
    assert min(sp.temperature for sp in ps) < 1 < max(sp.temperature for sp in ps)
    assert any(sp.top_k for sp in ps) and any(sp.top_p for sp in ps)
    assert all(c[2] >= 3 for c in QUICK.sampling_cases)


def test_sampling_time_is_pooled_across_settings():
    """What a fast setting leaves of its share goes to the settings after it: with three
    settings of one case each and a 600 s budget, the first is handed its proportional 200 s (the
    others' floors stay whole), uses about a second, and the second may use twice half of what is
    left (SHARE_SLACK) out of what leaves the third's 200 s floor whole: its own 200 s and the
    first's leftover; the third what is left. The pool only shrinks by the time sampled."""
    assert SHARE_SLACK == 2.0
    run = CertifyRun(TEST_PLAN, "tiny-ouro", None, "cpu", torch.float32, 0, lambda _m: None)
    checks = sampling_checks(run)
    assert [len(c.units) for c in checks] == [1, 1, 1]
    raws = [sampling_unit_result(run, c, c.units[0]) for c in checks]
    budgets = [r["budget_seconds"] for r in raws]
    assert budgets[0] == pytest.approx(200.0) and [c.units[0].budget_s for c in checks] == [200.0] * 3
    assert budgets[1] == pytest.approx(400.0 - raws[0]["seconds"], abs=1.0)
    assert 390.0 < budgets[1] < 400.0
    assert budgets[2] == pytest.approx(600.0 - raws[0]["seconds"] - raws[1]["seconds"], abs=1.0)
    sampled = sum(r["seconds"] for r in raws)
    assert sampled <= 600.0 - run.pool.seconds < sampled + 5.0
    assert all(sampling_result(run, c, [r]).passed for c, r in zip(checks, raws))


@pytest.mark.tier2
def test_predict_prints_n_samples_per_s_and_the_predicted_time(small_plan, tmp_path, capsys):
    """--predict certifies nothing: it samples a slice of each (setting, case), predicts the plan's
    sampling time as sum(N / samples/s), and every other check from a probe at ~1/8 of its size:
    the prediction covers every check of the certificate, and the wall time with --jobs."""
    assert main(["certify", "tiny-ouro", "--predict", "0.3", "--jobs", "2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "quick plan on tiny-ouro, predicted per check" in out and "with --jobs 2" in out
    # the layer-cut estimate first (tests/proofs/run/test_cut_estimate.py), then beside each part
    assert "quick plan on tiny-ouro, estimated from 1- and 2-layer cuts (n_core 2" in out
    assert out.index("estimated from 1- and 2-layer cuts") < out.index("predicted per check")
    assert "; cut estimate " in out and "stopped: " not in out
    assert not (tmp_path / "certificate.json").exists()
    got = predict_mod.predict("tiny-ouro", slice_seconds=0.2, jobs=2)
    assert not got.stopped and not got.estimate.warnings
    assert set(got.estimate.parts) >= {"load", "exact laws", "greedy_float64", "sampling", "speed"}
    assert len(got.units) == 3 and got.target_tv == TEST_PLAN.tv
    for r in got.units:
        assert r.planned > 0 and r.slice > 0 and r.samples_per_s > 0
        assert r.predicted_seconds == pytest.approx(r.planned / r.samples_per_s)
    assert got.sampling_seconds == pytest.approx(sum(r.predicted_seconds for r in got.units))
    checks = {c.check: c.predicted_seconds for c in got.checks}
    assert all(t > 0 for name, t in checks.items() if name not in ("theorem2_published", "coverage"))
    assert got.serial_seconds == pytest.approx(got.setup_seconds + sum(checks.values()))
    assert got.setup_seconds <= got.wall_seconds <= got.serial_seconds
    # every check a certify run of the same plan reports has its prediction, and nothing else
    cert = certify("tiny-ouro", plan="quick", time_budget=5)
    assert set(checks) == {c.name for c in cert.checks}


def test_makespan_hands_units_to_the_first_free_worker():
    assert predict_mod.makespan([4, 1, 1, 1, 1], 2) == 4  # the 1s fill the other worker
    assert predict_mod.makespan([1, 1, 1, 1, 4], 2) == 6  # the dear one last waits: order matters
    assert predict_mod.makespan([2, 3], 1) == 5


def test_probe_plan_cuts_each_check_and_scales_it_back():
    probe, scale = predict_mod.probe_plan(FULL, mutant_lib.LIBRARY)
    for check, field in predict_mod.PROBE_FIELDS.items():
        full, cut = getattr(FULL, field), getattr(probe, field)
        assert cut < full and scale[check][1] == pytest.approx(full / cut)
    assert probe.speed.repeats < FULL.speed.repeats
    assert 1 < len(probe.mutant_ids) < len(mutant_lib.LIBRARY)
    assert probe.sampling_cases == FULL.sampling_cases and probe.tv == FULL.tv  # sampling is measured


def test_a_probe_run_shares_models_and_sampling_setups_only_for_the_same_cases():
    """--predict's probe run reuses the full run's models and exact laws (CertifyRun.with_plan);
    a plan that samples other cases cannot, and says which field differs."""
    run = CertifyRun(TEST_PLAN, "tiny-ouro", None, "cpu", torch.float32, 0, lambda _m: None)
    setup = run.sampling_setup("tiny-ouro")
    probe, _ = predict_mod.probe_plan(TEST_PLAN, mutant_lib.LIBRARY)
    probe_run = run.with_plan(probe)
    assert probe_run.plan is probe and probe_run.models is run.models
    assert probe_run.sampling_setup("tiny-ouro") is setup
    assert [c.units for c in sampling_checks(probe_run)] == [c.units for c in sampling_checks(run)]
    with pytest.raises(ValueError, match="sampling_cases"):
        run.with_plan(replace(TEST_PLAN, sampling_cases=QUICK.sampling_cases))
    with pytest.raises(ValueError, match="target"):
        run.with_plan(replace(TEST_PLAN, tv=0.1))


def _full_plan_views(name):
    run = CertifyRun(FULL, name, None, "cpu", torch.float32, 0, lambda _m: None)
    s = run.sampling_setup(name)
    a = alpha_per_test(s.laws, FULL.target)
    return s, a


def _reached(view, n, a):
    """The detectable TV of one view when its case draws n samples: a conditional view counts
    the samples on its prefix, at worst COUNT_MARGIN_SIGMAS below their mean."""
    w = view.weight
    counted = n if w >= 1 else n * w - COUNT_MARGIN_SIGMAS * math.sqrt(n * w * (1 - w))
    return detectable_tv(max(1, int(counted)), view.probs, a, FULL.power)


@pytest.mark.parametrize("name", ["default", "tiny-raven"])
def test_every_full_plan_case_detects_tv_0_01_within_its_n(name):
    """Each full-plan case, on the certified model (default, else tiny-raven) and on the tiny preset
    of its family (extra evidence): bins from the exact law, N from the plan, and every view's
    detectable TV at that N <= 0.01 (the plan's target); N per setting stays small enough to fit
    an hour on two cores (README: the full plan). The old top-p=0.5 case left one token on both
    models (N = 0: no power): every case plans N > 0."""
    if name == "default" and default_model_name() != "default":
        pytest.skip("the default model is not installed")
    s, a = _full_plan_views(name)
    assert all(n > 0 for n in s.samples), [law.case.name for law in s.laws]
    # each path's first option is the one chosen here (choose_case passes over nothing)
    assert [law.case.name for law in s.laws] == [case_options(e)[0][0] for e in FULL.sampling_cases]
    assert all("passed over" not in law.chosen for law in s.laws)
    for law, n in zip(s.laws, s.samples, strict=True):
        assert law.views and all(v.bins >= 2 for v in law.views)
        for v in law.views:
            assert _reached(v, n, a) <= FULL.tv, (law.case.name, v.name, n)
    assert sum(s.samples) <= 90_000, s.samples  # per setting; x8 settings, 2 cores: an hour


def test_a_spread_case_at_the_full_plans_n_does_not_reach_tv_0_01():
    """Negative control of the test above: at the full plan's largest N a spread case (T=1.5,
    many balanced bins) detects only a larger TV, so the assertion can fail."""
    s, a = _full_plan_views("tiny-raven")
    o = Oracle(refdec.load_model("tiny-raven", dtype=torch.float64))
    law = case_law(o, Case("T=1.5", SamplingParams(temperature=1.5), s.laws[0].case.prompt))
    n = max(s.samples)
    assert max(_reached(v, n, a) for v in law.views) > FULL.tv
