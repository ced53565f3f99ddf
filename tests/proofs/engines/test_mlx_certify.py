"""Apple's mlx-lm certified in process (`tox -e mlx`; docs/decoders.md, "Certify mlx-lm").

One tiny LoopCoder checkpoint (refdec writes it in the published layout; loop window 8, so every
quick-plan prompt (10-32 tokens) and the greedy check's 12 new tokens pass it), certified with the
quick plan exactly as a user would (`loopcert certify DIR --quick --decoder SPEC`, a subprocess):

    plain           mlx-lm                         must PASS (greedy, sampling judged filters-first,
                                                   mlx-lm's sampler convention)
    draft near      mlx-lm:draft=DRAFT,num_draft=3 FAIL by greedy: a real bug (the finding below)
                    (the model's weights + 3% noise: about half its greedy drafts accepted)
    draft self      mlx-lm:draft=self,num_draft=3  greedy exact (no rejection), FAIL by sampling:
                                                   tokens outside the top-k support of their prefix
    window 4        mlx-lm:config.loop_window_size=4 (the same weights with a loop window of 4:
                                                   the negative control) must FAIL by greedy

The finding (tests/proofs/engines/test_mlx_decoder.py pins it): mlx-lm 0.32.2's
speculative_generate_step rewinds rejected drafts with trim_prompt_cache, which trims nothing once
a loop-window cache (RotatingKVCache) holds a full window, so rejected tokens stay in context.
When mlx-lm fixes it, the speculative rows PASS and these tests fail: flip them.

The FAIL rows get a short --time-budget (their failures show in greedy or in the first few hundred
samples); plain gets a long one, because mlx-lm decodes one sequence per call and the quick plan
samples up to 3,000 a case (its rate: docs/measurements.md, "mlx-lm"). Certificates and logs:
reports/out/mlx/<row>/; the rows' verdicts (rows.md) and the engines table (engines.md) beside them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_certify import ROOT, EngineRows, checks, sampling_of
from mlx_models import DRAFT_NOISE, require_mlx, write_loopcoder

pytestmark = pytest.mark.mlx
require_mlx()

CERTIFY_TIMEOUT_S = 1500
PLAIN_BUDGET_S = 900  # a cap, not a target: the deadline only stops the draw early
FAIL_BUDGET_S = 45
RUN = EngineRows(ROOT / "reports" / "out" / "mlx", "mlx-lm", CERTIFY_TIMEOUT_S)
ROWS, OUT, certify = RUN.rows, RUN.out, RUN.certify


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("mlx-certify")
    return write_loopcoder(root / "tiny-loopcoder"), write_loopcoder(root / "draft", noise=DRAFT_NOISE)


def test_plain_mlx_lm_passes(folders):
    status, cert = certify(folders[0], "mlx-lm", "plain", PLAIN_BUDGET_S)
    assert status == 0 and cert["verdict"] == "PASS", (cert["failed"], ROWS["plain"]["why"])
    cases = {k["case"]: k for k in sampling_of(cert)["details"]["cases"]}
    assert any(k["top_p"] is not None for k in cases.values()), "no top-p case: the convention went unjudged"


def test_speculative_with_a_near_draft_fails_by_greedy(folders):
    spec = f"mlx-lm:draft={folders[1]},num_draft=3"
    status, cert = certify(folders[0], spec, "draft_near", FAIL_BUDGET_S)
    assert status == 1 and cert["verdict"] == "FAIL"
    greedy = checks(cert)["greedy_float32"]
    assert not greedy["passed"], ROWS["draft_near"]["why"]


def test_speculative_with_itself_as_draft_is_greedy_exact_and_fails_by_sampling(folders):
    status, cert = certify(folders[0], "mlx-lm:draft=self,num_draft=3", "draft_self", FAIL_BUDGET_S)
    ok = {name: c["passed"] for name, c in checks(cert).items()}
    assert ok["greedy_float64"] and ok["greedy_float32"], ROWS["draft_self"]["why"]
    assert status == 1 and cert["verdict"] == "FAIL", ok
    details = sampling_of(cert)["details"]
    assert details["rejected"] and sum(k["impossible"] for k in details["cases"]) > 0, ROWS["draft_self"][
        "why"
    ]


def test_a_loop_window_of_4_fails_by_greedy(folders):
    status, cert = certify(folders[0], "mlx-lm:config.loop_window_size=4", "window_4", FAIL_BUDGET_S)
    assert status == 1 and cert["verdict"] == "FAIL"
    assert any(name.startswith("greedy") for name in cert["failed"]), cert["failed"]


def test_rows_and_engines_table(folders):
    """rows.md (each row's verdict and evidence), then the engines table: fastdec beside mlx-lm
    plain and speculative at batch 1, with the drafts' acceptance rates (the near draft must be both
    accepted and rejected, or the speculative rows prove less than they say)."""
    import refdec
    from proofs.decoders.mlx_decoder import decoder_for, mlx_lm_version
    from refdec.sampling import SamplingParams
    from speed.engines import decoder_greedy_rates, engines_table, fastdec_greedy_rates

    assert set(ROWS) == {"plain", "draft_near", "draft_self", "window_4"}, "the certify tests above run first"
    (OUT / "rows.md").write_text(RUN.table({str(folders[1]): "DRAFT"}))

    model = refdec.load_model(str(folders[0]))
    V = model.cfg.vocab_size
    rows = fastdec_greedy_rates(model)
    accept = {}
    specs = {"mlx-lm": "mlx-lm", "mlx-lm draft near (3)": f"mlx-lm:draft={folders[1]},num_draft=3"}
    specs["mlx-lm draft self (3)"] = "mlx-lm:draft=self,num_draft=3"
    for label, spec in specs.items():
        dec = decoder_for(spec, model)
        rows[label] = decoder_greedy_rates(dec, V)
        if dec.draft_model is not None:
            greedy = dec.stats.acceptance_rate
            dec.stats = type(dec.stats)()
            for s in range(20):
                dec.generate(list(range(16)), 12, SamplingParams(0.7, top_k=4), s)
            accept[label] = (greedy, dec.stats.acceptance_rate)
    notes = " Draft acceptance (greedy on the table's prompts; T=0.7 top-k=4, 20 seeds): " + "; ".join(
        f"{k}: {g:.2f}, {s:.2f}" for k, (g, s) in accept.items()
    )
    table = engines_table(rows, str(folders[0]), f"mlx-lm {mlx_lm_version()} (float32, in process)", notes)
    (OUT / "engines.md").write_text(table)
    assert 0 < accept["mlx-lm draft near (3)"][0] < 1.0, "the near draft must be accepted and rejected"
    for name, rates in rows.items():
        assert all(r > 0 for r in rates.values()), (name, rates)
