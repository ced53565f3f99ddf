"""Speed benchmarks of fastdec on the default model, and the regression gate.

    pytest benchmarks                # what `tox -e bench` runs; not part of the default `pytest`

- test_decode: pytest-benchmark timings of the autoregressive baseline and every gated setting
  (speed.settings.gate_settings), greedy and sampling, on CPU, and on CUDA with graphs when
  CUDA is present (skipped otherwise). One round = generate() over the prompts. extra_info
  holds tokens/s, decode tokens/s (prefill excluded, from fastdec's Stats), the acceptance
  statistics and `speedup`: the baseline's median round time over this setting's, both from
  this session (the baseline's benchmark runs first in each device/mode).
- test_regression_gate: proofs.gates.baseline against benchmarks/baseline.json (written by
  `loopcert bench --quick --write-baseline`); fails naming every figure that moved. `tox -e gate` runs
  only the gate (`loopcert bench --quick --gate`, the CI job).
"""

from pathlib import Path

import pytest
import torch

from fastdec import Decoder
from proofs.decoders.naive_kv import NaiveKVDecoder
from proofs.gates import baseline as gates
from proofs.prompts import model_prompts
from refdec.load import load_model
from speed.settings import BASELINE, gate_settings
from speed.timing import GREEDY, MODES, Workload, aggregate

BASELINE_FILE = Path(__file__).parent / "baseline.json"
N_TOKENS = 32
DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
    ),
]
_baseline_round: dict = {}  # (device, mode) -> median seconds of the baseline's round


@pytest.fixture(scope="module")
def model():
    return load_model("default")


@pytest.fixture(scope="module")
def prompts(model):
    return [p[-48:] for p in model_prompts(model, "default", 2, max_len=4096)]


SETTINGS = gate_settings(32)  # the default model's R; the first is the baseline


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.label.replace(" ", "_"))
def test_decode(benchmark, model, prompts, setting, device, mode):
    if setting.draft_depth is not None and setting.draft_depth >= model.cfg.recurrence:
        pytest.skip(f"{setting.label} needs R > {setting.draft_depth}")
    dec = Decoder(model, setting, device=device)  # CUDA: graphs on by default
    sampling = MODES[mode]
    last = {}

    def run():
        stats = [dec.generate(list(p), N_TOKENS, sampling, seed=i).stats for i, p in enumerate(prompts)]
        last["stats"] = stats
        return stats

    run()  # warm-up (CUDA graph capture)
    benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=0)
    stats = last["stats"]
    agg = aggregate(stats)
    median = benchmark.stats.stats.median
    key = (device, mode)
    if setting.label == BASELINE:
        _baseline_round[key] = median
    base = _baseline_round.get(key)
    benchmark.extra_info.update(
        {
            "setting": setting.label,
            "device": device,
            "mode": mode,
            "tokens": agg["tokens"],
            "tokens_per_s": agg["tokens"] / median,
            "decode_tokens_per_s": agg["decode_tokens"] / sum(s.decode_seconds for s in stats),
            "speedup": base / median if base else None,
            "acceptance_rate": agg["acceptance_rate"],
            "gamma": agg["gamma"],
            "steps": agg["steps"],
            "cuda_graphs": dec.cuda_graphs,
        }
    )
    assert agg["tokens"] == N_TOKENS * len(prompts)


@pytest.mark.parametrize("mode", ["greedy"])
def test_naive_kv_reference(benchmark, model, prompts, mode):
    """proofs.decoders.naive_kv: the honest baseline the autoregressive strategy must be as fast as."""
    dec = NaiveKVDecoder(model)
    dec.generate(list(prompts[0]), 4, GREEDY, 0)

    def run():
        return [dec.generate(list(p), N_TOKENS, GREEDY, i) for i, p in enumerate(prompts)]

    benchmark.pedantic(run, rounds=3, iterations=1)
    median = benchmark.stats.stats.median
    base = _baseline_round.get(("cpu", mode))
    benchmark.extra_info.update(
        {
            "tokens_per_s": N_TOKENS * len(prompts) / median,
            "autoregressive_over_naive": median / base if base else None,
        }
    )


def test_regression_gate(model):
    """The gate (proofs.gates.baseline) against the committed baseline, its speed against the stored
    ratios (`loopcert bench --gate`, which tox -e bench runs next, pairs them); says which figure moved."""
    base = gates.read_baseline(BASELINE_FILE)
    prompts = model_prompts(model, "default", 16, max_len=4096)
    plan = Workload(**base["plan"])
    cur = gates.measure(model, "default", prompts, plan, naive=NaiveKVDecoder(model))
    bad = gates.failures(gates.compare(cur, base))
    assert not bad, "regression gate failed:\n" + "\n".join(bad)


def test_the_gate_can_fail(model):
    """Negative control: the same gate on a decoder with a deeper draft must fail."""
    base = gates.read_baseline(BASELINE_FILE)
    plan = Workload(**{**base["plan"], "repeats": 1})
    prompts = model_prompts(model, "default", 16, max_len=4096)

    def build(st, dtype):
        if st.strategy == "pipelined":
            deeper = {"draft_depth": st.draft_depth + 1, "second_depth": st.second_depth}
            return Decoder(model, "pipelined", dtype=dtype, **deeper)
        return Decoder(model, st, dtype=dtype)

    cur = gates.measure(model, "default", prompts, plan, build=build, modes=["greedy"])
    bad = gates.failures(
        gates.compare(cur, {**base, "plan": cur["plan"], "figures": {"greedy": base["figures"]["greedy"]}})
    )
    assert any("pipelined" in m and "(exact): baseline" in m for m in bad), bad
