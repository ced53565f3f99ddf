"""proofs/checks/greedy.py and proofs/checks/bitwise.py: exactness against refdec, divergences classified
by margin, bitwise agreement with the engine's baseline; each with a negative control."""

from __future__ import annotations

import pytest
import torch

import refdec
from fastdec.config import DecodeConfig
from proofs.checks.bitwise import check_bitwise
from proofs.checks.greedy import TIE_TOLERANCE, check_greedy, classify
from proofs.decoders.candidates import Candidate, default_depths, fastdec_candidate, fastdec_grid
from proofs.decoders.specref import Bugs, SpecRef
from proofs.stats.exact_laws import Oracle

PROMPTS = [(1, 2, 3), (4, 7, 11, 2), (0, 5), (12, 3, 8, 6, 9), (2,), (9, 9, 1)]


@pytest.fixture(scope="module")
def oracle():
    return Oracle(refdec.load_model("tiny-ouro", dtype=torch.float64))


def run(oracle, decoder, label="x", dtype=torch.float64, n=12):
    return check_greedy("greedy", [("tiny-ouro", label, decoder, oracle, dtype)], lambda _o: PROMPTS, n)


def test_reference_decoder_is_exact(oracle):
    r = run(oracle, SpecRef(oracle, d1=1, d2=2))
    assert r.kind == "greedy" and r.passed and r.measured == 0 and r.details.divergences == ()
    assert r.details.runs[0].agree == len(PROMPTS)


def test_near_miss_mutant_is_a_real_bug(oracle):
    """Negative control: accepting a draft within 0.25 nats of the max must fail."""
    r = run(oracle, SpecRef(oracle, d1=1, bugs=Bugs(greedy_near_miss=0.25)))
    assert not r.passed and r.measured >= 1
    d = r.details.divergences[0]
    assert d.classified == "real bug" and 0 < d.candidate_gap < 0.25
    assert d.top2_margin <= d.candidate_gap


def test_crash_and_wrong_length_are_real_bugs(oracle):
    class Crashes:
        def generate(self, *a):
            raise RuntimeError("boom")

    class Short:
        def generate(self, prompt, n, sampling, seed):
            return refdec.generate(oracle.model, list(prompt), n - 1)

    r = run(oracle, Crashes())
    assert not r.passed and "boom" in r.details.divergences[0].why
    r = run(oracle, Short())
    assert not r.passed and all(d.classified == "real bug" for d in r.details.divergences)


class FakeOracle:
    """Logits chosen by hand: token 0 leads token 1 by `gap`, the others far behind."""

    V = 4

    def __init__(self, gap):
        self.gap = gap

    def logits(self, context):
        row = torch.tensor([1.0, 1.0 - self.gap, -5.0, -6.0], dtype=torch.float64)
        return row.expand(2, 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_divergence_classified_by_the_dtype_tolerance(dtype):
    tol = TIE_TOLERANCE[dtype]
    tie = classify(FakeOracle(tol / 10), [0], [0, 0], [0, 1], tol)
    assert tie["classified"] == "numerical tie" and tie["position"] == 1
    assert tie["top2_margin"] == pytest.approx(tol / 10)
    bug = classify(FakeOracle(tol * 10), [0], [0, 0], [0, 1], tol)
    assert bug["classified"] == "real bug"
    far = classify(FakeOracle(tol / 10), [0], [0], [3], tol)  # a close top-2 does not excuse token 3
    assert far["classified"] == "real bug" and far["candidate_gap"] > 6
    assert classify(FakeOracle(1.0), [0], [0, 1], [0, 1], tol) is None


def test_fastdec_float32_has_no_real_bug(oracle):
    model32 = refdec.load_model("tiny-ouro")
    dec = fastdec_candidate(DecodeConfig("pipelined", draft_depth=1, second_depth=2)).build(model32)
    r = run(oracle, dec, dtype=torch.float32, n=8)
    assert r.passed and r.details.real_bugs == 0


# -- fastdec candidates ---------------------------------------------------------------------------


def test_fastdec_grid_depths_scale_with_R():
    assert default_depths(32) == (2, 8)
    assert default_depths(4) == (1, 2)
    quick, full = fastdec_grid(6, False), fastdec_grid(6, True)
    assert [c.settings["strategy"] for c in quick] == ["autoregressive", "draft-verify", "pipelined"]
    assert len(full) > len(quick) and all(c.lossless and c.fixed_width for c in full)


def test_fastdec_grid_is_greedy_exact_in_float64(oracle):
    runs = [
        ("tiny-ouro", c.label, c.build(oracle.model), oracle, torch.float64) for c in fastdec_grid(4, False)
    ]
    r = check_greedy("greedy", runs, lambda _o: PROMPTS[:2], 8)
    assert r.passed, r.details.divergences


def test_bitwise_fastdec_strategies_equal_baseline():
    model32 = refdec.load_model("tiny-ouro")
    r = check_bitwise("bitwise", fastdec_grid(4, False), model32, PROMPTS[:2], 8)
    assert r.kind == "bitwise" and r.passed, r.details.mismatches
    assert [row.equal for row in r.details.runs] == [2, 2, 2]


def test_bitwise_catches_a_decoder_off_by_one_token():
    """Negative control: a 'strategy' that changes one token must be a mismatch."""
    model32 = refdec.load_model("tiny-ouro")
    honest = fastdec_candidate(DecodeConfig("autoregressive"))

    class OffByOne:
        def __init__(self, inner):
            self.inner = inner

        def generate(self, prompt, n, sampling, seed):
            toks = list(self.inner.generate(prompt, n, sampling, seed).tokens)
            toks[-1] = (toks[-1] + 1) % 13
            return toks

    bad = Candidate(
        "off-by-one", lambda m, fixed_width=None: OffByOne(honest.build(m, fixed_width)), fixed_width=True
    )
    r = check_bitwise("bitwise", [bad], model32, PROMPTS[:2], 6)
    assert not r.passed and r.measured == 2
    assert r.details.mismatches[0].first_difference == 5


def test_bitwise_skips_a_decoder_without_fixed_width_mode():
    r = check_bitwise("bitwise", [Candidate("user", lambda m: None)], None, PROMPTS, 4)
    assert r.passed and r.kind == "bitwise" and r.details is None and "fixed-width" in r.skipped


def test_tie_tolerance_follows_the_decoders_compute_dtype():
    """A decoder handed float64 weights that declares float32 compute is judged with float32's tie
    tolerance; without a declaration, the dtype of the model it was given."""
    import torch

    from proofs.checks.greedy import TIE_TOLERANCE, compute_dtype

    class Declares:
        compute_dtype = "float32"

    class Silent:
        pass

    assert compute_dtype(Declares(), torch.float64) is torch.float32
    assert compute_dtype(Silent(), torch.float64) is torch.float64
    assert TIE_TOLERANCE[torch.float32] > TIE_TOLERANCE[torch.float64]
