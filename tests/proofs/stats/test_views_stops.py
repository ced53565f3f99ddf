"""The sampling views under the engines' parameters: laws that follow the prefix (penalties), and
sequences that end at a stop token (shorter samples of the law, never extended past the stop)."""

import numpy as np
import torch

from fastdec import Decoder
from proofs.stats.chisquare import chisquare_gof
from proofs.stats.exact_laws import IMPOSSIBLE, Oracle, exact_law
from proofs.stats.views import Case, case_law
from refdec.config import TINY_PRESETS, get_preset
from refdec.model import LoopedLM
from refdec.sampling import SamplingParams

MODEL = LoopedLM(get_preset(TINY_PRESETS[1])).init_weights(0).to(torch.float64).eval()
ORACLE = Oracle(MODEL)
PROMPT = (3, 3, 8, 1, 3, 3)
STOP = 6  # this model's most likely token after PROMPT + (10,): sequences often stop inside 3 tokens
STOPPING = SamplingParams(1.0, stop_token_ids=[STOP], repetition_penalty=1.3)


def samples(params, n, count, mutate=None):
    """refdec's law's samples: fastdec's autoregressive strategy, token for token refdec.generate's
    (tests/fastdec/test_sampling_params.py), batched."""
    got = Decoder(MODEL).generate_batch([list(PROMPT)] * count, n, params, list(range(count)))
    return [mutate(r.tokens) if mutate else r.tokens for r in got]


def test_stopped_samples_are_shorter_cells_and_lossless_samples_pass():
    case = Case("stops", STOPPING, PROMPT, 3)
    law = case_law(ORACLE, case)
    got = samples(STOPPING, 3, 600)
    assert any(len(s) < 3 for s in got) and any(len(s) == 3 for s in got)
    tally = law.tally(got)
    assert tally["impossible"] == 0
    assert law.views, law.not_tested
    for view, counts in zip(law.views, tally["counts"], strict=True):
        assert chisquare_gof(np.asarray(counts), view.probs)["p_value"] > 1e-4, view.name
    joint = next(v for v in law.views if v.seq_bins is not None)
    assert any(len(s) < 3 for s in joint.seq_bins)  # a stopped sequence is one of the likeliest
    assert joint.probs.sum() == __import__("pytest").approx(1.0)


def test_tokens_after_a_stop_are_impossible():
    """The bug class of transformers #47912 / sglang #31599: a block accepted past its stop."""
    law = case_law(ORACLE, Case("stops", STOPPING, PROMPT, 3))

    def go_on(s):
        return s + [0] * (3 - len(s)) if len(s) < 3 else s

    got = samples(STOPPING, 3, 200, go_on)
    stopped_early = sum(STOP in s[:-1] for s in got)
    assert stopped_early > 0 and law.tally(got)["impossible"] == stopped_early
    ex = exact_law(ORACLE, PROMPT, 3, STOPPING, n_samples=1000)
    assert ex.classify((STOP, 0, 0)) == IMPOSSIBLE and ex.classify((STOP,)) >= 0
    assert ex.probs.sum() + ex.remainder == __import__("pytest").approx(1.0)


def test_a_penalty_law_rejects_samples_drawn_without_it():
    """Negative control: samples of the unpenalised law against the penalised law's views."""
    params = SamplingParams(1.0, repetition_penalty=4.0, frequency_penalty=1.0)
    law = case_law(ORACLE, Case("penalties", params, PROMPT, 3))
    lossless = law.tally(samples(params, 3, 500))
    wrong = law.tally(samples(SamplingParams(1.0), 3, 500))

    def smallest_p(tally):
        return min(
            chisquare_gof(np.asarray(c), v.probs)["p_value"]
            for v, c in zip(law.views, tally["counts"], strict=True)
        )

    assert smallest_p(lossless) > 1e-4
    assert smallest_p(wrong) < 1e-6 or wrong["impossible"] > 0
