"""The reduced certify plan the command-path tests share (tests/proofs/run/test_certify.py, test_shards.py,
test_certify_http.py): a handful of samples, small Theorem 1 searches, one speed prompt, so that a
whole `loopcert certify` run takes seconds. Each test file states only what it changes
(dataclasses.replace); the real plans are proofs.run.plan.QUICK / FULL."""

from __future__ import annotations

from dataclasses import replace

from proofs.run.plan import CertifyPlan
from refdec.sampling import SamplingParams
from speed.timing import Workload

SMALL_PLAN = CertifyPlan(
    "quick",
    greedy_presets=("tiny-raven",),
    greedy_prompts=1,
    greedy_tokens=6,
    bitwise_prompts=1,
    bitwise_tokens=6,
    sampling_cases=(("T=1", SamplingParams(temperature=1.0), 3),),
    tv=0.3,
    sampling_budget_s=600.0,
    sampling_presets=False,
    blackbox_mutant_samples=40,
    false_alarm=None,
    theorem1_random_cases=50,
    theorem1_search_examples=20,
    trace_prompts=2,
    trace_positions=16,
    speed=Workload(prompts=1, prompt_len=48, tokens=4, repeats=1),
    mutant_ids=("always-accept", "control-gate-inverted"),
    depth_context=24,  # greedy at depth to 28 tokens of context: seconds on a tiny preset
    depth_cap=32,
)

# the sharding and --jobs tests: two cases and two mutants, so that units split across shards
SHARD_PLAN = replace(
    SMALL_PLAN,
    sampling_cases=(
        ("T=1", SamplingParams(temperature=1.0), 3),
        ("top-k=2", SamplingParams(temperature=1.0, top_k=2), 3),
    ),
    mutant_ids=("always-accept", "greedy-near-miss"),
)
# certify --decoder http://...: each run in seconds (tests/proofs/decoders/test_http_decoder.py);
# HTTP_SERVE: the `loopcert serve` arguments of the server it certifies.
HTTP_PLAN = replace(
    SMALL_PLAN,
    greedy_prompts=2,
    greedy_tokens=8,
    sampling_cases=(("T=1 top-k=2", SamplingParams(temperature=1.0, top_k=2), 3),),
    tv=0.2,
    mutant_ids=("always-accept",),
)
HTTP_SERVE = ("tiny-ouro", "--draft-depth", "1")
TIMING_KEYS = {"seconds", "sampling_seconds", "samples_per_s", "date", "merged_from", "call_seconds"}


def untimed(x):
    """The certificate without what depends on the clock: timing keys, and the speed check's
    figures (speed is all timings)."""
    if isinstance(x, dict):
        if x.get("name") == "speed":
            return {"name": "speed", "passed": x["passed"]}
        return {k: untimed(v) for k, v in x.items() if k not in TIMING_KEYS}
    if isinstance(x, list):
        return [untimed(v) for v in x]
    return x


class FastdecWrapper:
    """A user's decoder as tests write it: fastdec's draft-verify behind the protocol, batched (its
    first call draws 64 seeds). Tests subclass it to declare attributes or to turn it lossy."""

    def __init__(self, model):
        from fastdec import Decoder

        self.inner = Decoder(model, "draft-verify")

    def generate_batch(self, prompts, max_new_tokens, sampling, seeds):
        return self.inner.generate_batch(prompts, max_new_tokens, sampling, seeds)

    def generate(self, prompt, max_new_tokens, sampling, seed):
        return self.generate_batch([prompt], max_new_tokens, sampling, [seed])[0]
