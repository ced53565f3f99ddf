"""fastdec under the filters-first convention (refdec.sampling.SAMPLER_ORDERS): its laws come from
refdec.sampling.transform (a filters-first row is transformed alone: fastdec.engine.Readout), so
its speculative strategies sample the filters-first law like the temperature-first one."""

from __future__ import annotations

import pytest
import torch

import fastdec
import refdec
from fastdec.config import DecodeConfig
from fastdec.engine import Readout
from proofs.checks.distribution import Target, check_distribution
from proofs.prompts import model_prompts
from proofs.stats.exact_laws import Oracle
from proofs.stats.views import Case, case_law
from refdec.sampling import SamplingParams, transform

FF = SamplingParams(temperature=0.5, top_p=0.6, order="filters-first")  # TV 0.28 from temperature-first
TARGET = Target(0.15)  # every view detects a binned TV >= 0.15 with probability >= 0.99, Holm at 1e-3


def test_a_readout_row_is_the_filters_first_transform_bit_for_bit():
    x = torch.randn(6, 300, generator=torch.Generator().manual_seed(1)).float() * 3
    out = Readout(x)
    for params in (FF, SamplingParams(0.8, top_k=20, top_p=0.9, order="filters-first")):
        for i in (0, 3, 5):
            assert torch.equal(out.law(i, params), transform(x[i], params))
    # a temperature-first row differs (the control: the comparison can fail)
    assert not torch.equal(out.law(0, FF), transform(x[0], FF.with_order("temperature-first")))


@pytest.mark.tier2
@pytest.mark.parametrize(
    "config", [DecodeConfig("pipelined", draft_depth=1), DecodeConfig("draft-verify", draft_depth=1)]
)
def test_speculative_fastdec_samples_the_filters_first_law(config):
    """fastdec sampled at the filters-first top-p case (seed 0) passes the sampling check against
    refdec's filters-first law (false-alarm rate <= 1e-3, Holm) and fails against the
    temperature-first law of the same parameters (TV 0.28 on the first token, above the 0.15 the
    plan detects with probability >= 0.99)."""
    model = refdec.load_model("tiny-ouro")
    oracle = Oracle(model)
    prompt = (9, 9, 1)  # tiny-ouro's most informative prompt (proofs.run.cases.pick_prompt)
    assert prompt in model_prompts(model, "tiny-ouro", 6)
    dec = fastdec.Decoder(model, config)
    right = [case_law(oracle, Case("ff", FF, prompt, 3))]
    got = check_distribution("ff", dec, right, TARGET, 0)
    assert got.passed, got.details.cases[0].views
    wrong = [case_law(oracle, Case("tf", FF.with_order("temperature-first"), prompt, 3))]
    n = [got.details.cases[0].planned]

    class AsTemperatureFirst:  # hands fastdec the filters-first case, judged as temperature-first
        def generate(self, prompt, max_new_tokens, sampling, seed):
            return dec.generate(prompt, max_new_tokens, FF, seed)

    assert not check_distribution("tf", AsTemperatureFirst(), wrong, TARGET, 0, samples=n).passed
