"""llama.cpp certified in process through xllamacpp (`tox -e llamacpp`; docs/decoders.md, "Certify
llama.cpp").

One tiny Nanbeige checkpoint (refdec writes it in the published layout: tiny-nanbeige, two loops,
a trained LM's activation scales), certified with the quick plan exactly as a user would
(`loopcert certify DIR --quick --decoder SPEC`, a subprocess); llama.cpp runs it from the GGUF the
decoder converts (f32 weights, its default f16 KV cache):

    plain        llama.cpp                                 must PASS, the engines' case included
    draft loops  llama.cpp:draft_loops=1                   FAILS only at the context's end (below)
                                                           (self-speculation: the draft is the same
                                                           weights run one loop)
    draft near   llama.cpp:draft=DRAFT,num_draft=3         FAILS only at the context's end (the
                                                           model's weights + 3% noise)
    ngram        llama.cpp:ngram=simple,num_draft=4        FAILS only at the context's end (prompt lookup)
    one loop     llama.cpp:config.num_loops=1              the negative control: must FAIL by greedy
    norm once    llama.cpp:config.skip_loop_final_norm=true  a mis-set flag: must FAIL, by sampling.
                                                           Greedy sees it diverge, but within the f16
                                                           KV cache's tie tolerance (the greedy check's
                                                           float16: 0.05 of the top logit), so those
                                                           divergences are classified numerical ties;
                                                           with kv=f32 greedy fails too (measured)

The context's end (a finding, xllamacpp 2026.10.11549): with a draft model, llama.cpp ends a
generation that reaches the model's context length (128 here: prompt + new tokens = 128) with
finish_reason "length" one to num_draft tokens early, where plain decoding reaches it; every
other check of those rows passes. N-gram decoding does too, less often: the per-position test's
T=0.7 top-k=4 samples (16 + 112 tokens), seed 6, come back 111 of 112 (the same with the chain
of before the engines' parameters, so not theirs). The quick plan reaches that end (the boundary
"max_seq_len 128: the last positions reached": greedy_depth's long continuation, the per-position
test's long samples), so the three speculative rows FAIL there and only there. When this test
fails because they passed, llama.cpp fixed it: move them back to PASSING.

Every row is sampled under the quick plan's engines' case (min-p, top-k, top-p, the three
penalties over the last 64 tokens, a logit bias, a stop token; without min_tokens, which llama.cpp
has no field for): assert_engines_case_sampled.

Each speculative row's draft statistics (llama.cpp's own timings.draft_n / draft_n_accepted) are
read in the engines-table test, to show drafting happened in each mode. Certificates and logs:
reports/out/llamacpp/<row>/; the rows' verdicts (rows.md) and the engines table (engines.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_certify import ROOT, EngineRows
from llamacpp_models import require_llamacpp
from nanbeige_models import DRAFT_NOISE, write_nanbeige

pytestmark = pytest.mark.llamacpp
require_llamacpp()

CERTIFY_TIMEOUT_S = 1200
BUDGET_S = 600  # a cap, not a target: the rows' times are in docs/measurements.md, "llama.cpp"
RUN = EngineRows(ROOT / "reports" / "out" / "llamacpp", "llama.cpp", CERTIFY_TIMEOUT_S)
ROWS, OUT, certify = RUN.rows, RUN.out, RUN.certify
PASSING = {
    "plain": "llama.cpp",
}
CONTEXT_END = {  # rows that fail only where a generation reaches the context's end (module docstring)
    "draft_loops": "llama.cpp:draft_loops=1",
    "draft_near": "llama.cpp:draft={draft},num_draft=3",
    "ngram": "llama.cpp:ngram=simple,num_draft=4",
}
SHORT = "finish_reason 'length'"  # what llama.cpp answers there, in every failed check's evidence
FAILING = {  # row -> (spec, the check that must fail)
    "one_loop": ("llama.cpp:config.num_loops=1", "greedy_float64"),
    "norm_once": ("llama.cpp:config.skip_loop_final_norm=true", "sampling["),
}
TIES_AT_F16 = {"norm_once"}  # rows whose greedy divergences all fall within f16's tie tolerance


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("llamacpp-certify")
    return write_nanbeige(root / "tiny-nanbeige"), write_nanbeige(root / "draft", noise=DRAFT_NOISE)


@pytest.mark.parametrize("name", PASSING)
def test_llamacpp_passes(folders, name):
    status, cert = certify(folders[0], PASSING[name].format(draft=folders[1]), name, BUDGET_S)
    assert status == 0 and cert["verdict"] == "PASS", (cert["failed"], ROWS[name]["why"])
    sampling = next(c for c in cert["checks"] if c["name"].startswith("sampling["))
    cases = sampling["details"]["cases"]
    assert any(k["top_p"] is not None for k in cases), "no top-p case: the sampler chain went unjudged"
    assert_engines_case_sampled(cert)


ENGINE_PARAMS = ("min_p", "repetition_penalty", "frequency_penalty", "presence_penalty", "logit_bias")


def assert_engines_case_sampled(cert: dict) -> None:
    """The quick plan's engines' case was sampled with every parameter llama.cpp declares (min-p,
    the three penalties over the declared window of 64, a bias, a stop), without min_tokens only,
    and its views have power."""
    sampling = next(c for c in cert["checks"] if c["name"].startswith("sampling["))
    case = next(k for k in sampling["details"]["cases"] if "penalties" in k["case"])
    params = case["params"]
    assert all(params.get(f) for f in ENGINE_PARAMS) and params["stop_token_ids"], params
    assert (params["penalty_scope"], params["penalty_window"]) == ("context", 64), params
    assert "min_tokens" not in params and case["samples"] > 0 and case["has_power"], case["case"]
    assert cert["stamp"]["not_declared"] == [
        "T=1.5 min-p top-k top-p penalties bias stop (sampled without min_tokens)"
    ]


@pytest.mark.parametrize("name", CONTEXT_END)
def test_draft_model_speculation_stops_short_at_the_context_end(folders, name):
    status, cert = certify(folders[0], CONTEXT_END[name].format(draft=folders[1]), name, BUDGET_S)
    assert status == 1 and cert["verdict"] == "FAIL"
    assert set(cert["failed"]) - {"greedy_depth"} and all(
        n == "greedy_depth" or n.startswith(("sampling[", "positions[")) for n in cert["failed"]
    ), cert["failed"]
    for c in cert["checks"]:
        if c["passed"] is False:
            assert SHORT in json.dumps(c["details"]), (c["name"], ROWS[name]["why"])
    assert_engines_case_sampled(cert)


@pytest.mark.parametrize("name", FAILING)
def test_a_wrong_model_fails(folders, name):
    """The negative controls: the same weights, one loop or normed once, must FAIL."""
    spec, check = FAILING[name]
    status, cert = certify(folders[0], spec, name, BUDGET_S)
    assert status == 1 and cert["verdict"] == "FAIL"
    assert any(n.startswith(check) for n in cert["failed"]), cert["failed"]
    if name in TIES_AT_F16:
        greedy = next(c for c in cert["checks"] if c["name"] == "greedy_float64")
        seen = {d["classified"] for d in greedy["details"]["divergences"]}
        assert seen == {"numerical tie"}, greedy["details"]["divergences"]


def test_rows_and_engines_table(folders):
    """rows.md (each row's verdict and evidence), then the engines table: fastdec beside llama.cpp
    plain and speculative at batch 1, with each speculative mode's draft statistics as llama.cpp
    reports them (drafts proposed, some accepted and some not, or the speculative rows prove less
    than they say)."""
    import refdec
    from proofs.decoders.llamacpp_decoder import decoder_for, llamacpp_versions
    from refdec.sampling import SamplingParams
    from speed.engines import decoder_greedy_rates, engines_table, fastdec_greedy_rates

    assert set(ROWS) == set(PASSING) | set(CONTEXT_END) | set(FAILING), "the certify tests above run first"
    (OUT / "rows.md").write_text(RUN.table({str(folders[1]): "DRAFT"}))

    model = refdec.load_model(str(folders[0]))
    V = model.cfg.vocab_size
    rows = fastdec_greedy_rates(model)
    drafted = {}
    for name, spec in {**PASSING, **CONTEXT_END}.items():  # the draft rows: speed, far from the end
        dec = decoder_for(spec.format(draft=folders[1]), model)
        rows[f"llama.cpp {name}"] = decoder_greedy_rates(dec, V)
        if dec.spec.speculative:
            greedy = (dec.stats.proposed, dec.stats.accepted)
            dec.stats = type(dec.stats)()
            for s in range(20):
                dec.generate(list(range(16)) * 2, 12, SamplingParams(0.7, top_k=4), s)
            drafted[name] = (greedy, (dec.stats.proposed, dec.stats.accepted))
    notes = (
        " llama.cpp's draft statistics (accepted / proposed; greedy on the table's prompts, then"
        " T=0.7 top-k=4 on a repeated 16-token prompt, 20 seeds): "
        + "; ".join(f"{k}: {g[1]}/{g[0]}, {s[1]}/{s[0]}" for k, (g, s) in drafted.items())
    )
    engines = f"llama.cpp {llamacpp_versions()} (f32 weights, f16 KV cache, 1 thread, in process)"
    (OUT / "engines.md").write_text(engines_table(rows, str(folders[0]), engines, notes))
    for name, ((proposed, accepted), _) in drafted.items():
        assert proposed > 0 and 0 < accepted < proposed, (name, proposed, accepted)
    for name, rates in rows.items():
        assert all(r > 0 for r in rates.values()), (name, rates)
