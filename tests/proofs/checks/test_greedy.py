"""proofs/checks/greedy.py and proofs/checks/bitwise.py: exactness against refdec, divergences classified
by margin, bitwise agreement with the engine's baseline; each with a negative control."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import refdec
from fastdec.config import DecodeConfig
from proofs.checks.bitwise import check_bitwise
from proofs.checks.greedy import TIE_TOLERANCE, check_greedy, judge, reference_scores
from proofs.decoders.candidates import Candidate, fastdec_candidate, fastdec_grid
from proofs.decoders.specref import Bugs, SpecRef
from proofs.stats.exact_laws import Oracle
from refdec.config import TINY_LOOPCODER, TINY_PRESETS, get_preset
from refdec.model import LoopedLM
from refdec.score import continuation_logits
from speed.settings import default_depths

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


def test_divergence_classified_by_the_dtype_tolerance(oracle):
    """A token off the argmax is a tie below the tolerance, a real bug above it; a tie no longer
    ends the evidence: the tokens after it are judged on the candidate's own prefix."""
    prompt = list(PROMPTS[0])
    ref = refdec.generate(oracle.model, prompt, 8)
    (scored, _) = reference_scores(oracle.model, prompt, ref)
    assert scored == []
    logits = continuation_logits(oracle.model, prompt, ref)
    runner_up = int(torch.topk(logits[2], 2).indices[1])
    gap = float(logits[2].max() - logits[2, runner_up])
    got = ref[:2] + [runner_up] + refdec.generate(oracle.model, prompt + ref[:2] + [runner_up], 5)
    tie = judge(oracle, prompt, got, 8, tol=gap * 2)
    assert [d["classified"] for d in tie] == ["numerical tie"] and tie[0]["position"] == 2
    assert tie[0]["candidate_gap"] == pytest.approx(gap) and tie[0]["reference"] == ref[2]
    bug = judge(oracle, prompt, got, 8, tol=gap / 2)
    assert [d["classified"] for d in bug] == ["real bug"]
    # after the tie, a wrong token is still found (refdec.generate's comparison stopped at the tie)
    worse = got[:5] + [(got[5] + 1) % oracle.V] + got[6:]
    found = judge(oracle, prompt, worse, 8, tol=gap * 2)
    assert [(d["position"], d["classified"]) for d in found] == [(2, "numerical tie"), (5, "real bug")]
    assert judge(oracle, prompt, ref[:7], 8, 1e-9)[0]["reference"] == ref[7]  # too short: named
    assert "outside the vocabulary" in judge(oracle, prompt, ref[:3] + [99] + ref[4:], 8, 1e-9)[0]["why"]


@settings(max_examples=15, deadline=None)
@given(
    name=st.sampled_from(TINY_PRESETS + (TINY_LOOPCODER,)),
    seed=st.integers(0, 2**16),
    p_len=st.integers(1, 24),
    n=st.integers(1, 14),
    flips=st.lists(st.integers(0, 13), max_size=2),
)
def test_one_teacher_forced_pass_equals_comparing_with_generate(name, seed, p_len, n, flips):
    """Property: on random models and prompts, judging by one teacher-forced pass gives what
    comparing token by token with refdec.generate gives: nothing when the tokens are refdec's,
    else its first divergence, with refdec's token there (float64: no tie at 1e-9)."""
    model = LoopedLM(get_preset(name)).init_weights(seed).to(torch.float64).eval()
    o = Oracle.over(model)
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, o.V, (p_len,), generator=g).tolist()
    ref = refdec.generate(model, prompt, n)
    got = list(ref)
    for t in flips:
        if t < n:
            got[t] = (got[t] + 1 + seed % (o.V - 1)) % o.V
    found = judge(o, prompt, got, n, TIE_TOLERANCE[torch.float64])
    first = next((t for t in range(n) if got[t] != ref[t]), None)
    if first is None:
        assert found == []
    else:
        assert [(d["position"], d["reference"], d["classified"]) for d in found] == [
            (first, ref[first], "real bug")
        ]


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

    from proofs.checks.greedy import TIE_TOLERANCE
    from proofs.decoder_attributes import declared_compute_dtype

    class Declares:
        compute_dtype = "float32"

    class Silent:
        pass

    class Fastdec:  # fastdec.Decoder's name for it
        dtype = torch.float32

    assert declared_compute_dtype(Declares()) is torch.float32
    assert declared_compute_dtype(Fastdec()) is torch.float32
    assert declared_compute_dtype(Silent()) is None  # check_greedy then takes the model's dtype
    assert TIE_TOLERANCE[torch.float32] > TIE_TOLERANCE[torch.float64]
