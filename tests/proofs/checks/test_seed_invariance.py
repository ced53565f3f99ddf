"""proofs/checks/seed_invariance.py: fastdec's batch rows keep their seeds whatever sits beside them,
in every lossless strategy and under the engines' parameters; one stream per batch fails."""

import pytest
import torch

import refdec
from fastdec import Decoder
from proofs.checks.seed_invariance import SharedStream, check_seed_invariance
from refdec.config import TINY_PRESETS, get_preset
from refdec.model import LoopedLM
from refdec.sampling import SamplingParams

MODEL = LoopedLM(get_preset(TINY_PRESETS[1])).init_weights(0).to(torch.float64).eval()
PROMPT = [3, 1, 4, 1, 5]
NEIGHBOURS = [[2, 7, 1], [8, 2, 8, 1, 8, 2], [9], [6, 6, 6, 6]]
T1 = SamplingParams(1.0)
PENALISED = SamplingParams(1.0, repetition_penalty=1.5, presence_penalty=0.5, top_k=8, stop_token_ids=[6])


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"strategy": "draft-verify", "draft_depth": 1},
        {"strategy": "pipelined", "draft_depth": 1, "second_depth": 3},
    ],
)
@pytest.mark.parametrize("sampling", [T1, PENALISED], ids=["T=1", "penalties"])
def test_fastdec_rows_keep_their_seeds(kw, sampling):
    dec = Decoder(MODEL, **kw)
    r = check_seed_invariance("seed_invariance", dec, "fastdec", PROMPT, NEIGHBOURS, 6, sampling, range(3))
    assert r.passed, r.details.differences
    assert r.details.runs[0].seeds == 9 and r.details.seed_sensitive


def test_one_stream_per_batch_fails():
    """Negative control: alone it is refdec; beside others its rows share one stream."""
    dec = SharedStream(MODEL)
    assert dec.generate(PROMPT, 6, T1, seed=3) == refdec.generate(MODEL, PROMPT, 6, T1, seed=3)
    r = check_seed_invariance("seed_invariance", dec, "shared stream", PROMPT, NEIGHBOURS, 6, T1, range(4))
    assert not r.passed and r.measured >= 8


def test_no_seed_sensitivity_is_no_power():
    r = check_seed_invariance(
        "seed_invariance", Decoder(MODEL), "fastdec", PROMPT, NEIGHBOURS, 4, SamplingParams(), range(3)
    )
    assert not r.passed and "no power" in r.error


def test_the_certificate_row_over_fastdecs_grid_and_a_shared_stream():
    """certify's seed_invariance row: every setting of fastdec's grid keeps its seeds beside the
    model's other prompts; a --decoder drawing one stream per batch fails it, and the verdict is
    NON-REPRODUCIBLE (its law may be right), as a failure of reproducibility alone is."""
    from plans import SMALL_PLAN

    from proofs.decoders.candidates import Candidate
    from proofs.run.certify import verdict_of
    from proofs.run.run import CertifyRun
    from reports.exactness import seed_invariance_section
    from reports.render import render_certificate  # noqa: F401 - the section renders below

    grid = CertifyRun(SMALL_PLAN, "tiny-ouro", None, "cpu", torch.float32, 0, lambda _m: None)
    ok = grid.seed_invariance()
    assert ok.passed and ok.kind == "seed_invariance" and len(ok.details.runs) == len(grid.candidates)
    assert all(r.equal == r.seeds == 9 for r in ok.details.runs) and ok.details.neighbours == 4

    shared = Candidate("shared stream", SharedStream, {"decoder": "shared"})
    run = CertifyRun(SMALL_PLAN, "tiny-ouro", shared, "cpu", torch.float32, 0, lambda _m: None)
    bad = run.seed_invariance()
    assert not bad.passed and bad.measured >= 6
    assert "| shared stream (first of 5) |" in seed_invariance_section(bad).replace("  ", " ")
    assert verdict_of(["seed_invariance"]) == verdict_of(["reproducibility", "seed_invariance"])
    assert (
        verdict_of(["seed_invariance"]) == "NON-REPRODUCIBLE"
        and verdict_of(["seed_invariance", "speed"]) == "FAIL"
    )


def test_a_decoder_without_generate_batch_skips_the_row():
    from proofs.checks.seed_invariance import check_decoders

    class OneAtATime:
        def generate(self, prompt, max_new_tokens, sampling, seed):
            return refdec.generate(MODEL, prompt, max_new_tokens, sampling, seed=seed)

    r = check_decoders("seed_invariance", [("one", OneAtATime())], PROMPT, NEIGHBOURS, 4, T1, range(2))
    assert r.passed and "no setting has generate_batch (one)" in r.skipped
