"""proofs.speed.gates: the regression gates pass on the decoder that wrote the baseline and fail, naming
the figure, on a deliberately slowed decoder (busy work at every engine step) and on a less
accepting one (a shallower draft under the same label); a baseline of other weights is refused."""

import json
import time

import pytest
import torch

from fastdec import DecodeConfig, Decoder
from proofs.speed import gates
from proofs.speed.timing import Workload
from refdec import LoopedLM
from refdec.config import get_preset
from refdec.errors import LoopcertError

PROMPTS = [(1, 2, 3, 4, 5, 6), (7, 3, 9, 1, 4)]
PLAN = Workload(prompts=2, prompt_len=8, tokens=12, repeats=5)
R = 8
SETTINGS = [
    DecodeConfig("autoregressive"),
    DecodeConfig("pipelined", draft_depth=3),
    DecodeConfig("pipelined", draft_depth=3, second_depth=5),
]


def damped_model(seed=2):
    m = LoopedLM(get_preset("tiny-raven").replace(recurrence=R)).init_weights(seed)
    with torch.no_grad():  # depths agree, as a trained looped model's do
        m.adapter.weight[:, : m.cfg.d_model] *= 0.3
    return m.eval()


@pytest.fixture(scope="module")
def model():
    return damped_model()


@pytest.fixture(scope="module")
def baseline(model):
    return gates.measure(model, "tiny", PROMPTS, PLAN, settings=SETTINGS)


def messages(results):
    return gates.failures(results)


def greedy_only(baseline):
    """The greedy half of the baseline: the failing variants are timed greedy only (fast tests)."""
    return {**baseline, "figures": {"greedy": baseline["figures"]["greedy"]}}


# Timing-dependent (speed figures within the gate's tolerance): nightly, and in `tox -e bench`
# (benchmarks/test_bench.py), never in the default run: the team rule is no timed assertions
# in tests that gate every change.
@pytest.mark.slow
def test_the_baseline_passes_its_own_gate(model, baseline):
    again = gates.measure(model, "tiny", PROMPTS, PLAN, settings=SETTINGS)
    results = gates.compare(again, baseline)
    assert not messages(results), messages(results)
    kinds = [r.details.get("kind") for r in results]
    assert kinds.count("speed") == 2 * 2 and kinds.count("exact") == 2 * 3 * len(gates.EXACT)
    # the exact figures really are exact: a second run reproduces every one
    assert all(r.measured == r.bound for r in results if r.details.get("kind") == "exact")


def busy(seconds):
    def hook(engine, lanes):  # CPU work, not a sleep: the gate's clock is process time
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    return hook


@pytest.mark.slow
def test_a_slowed_decoder_fails_on_speed_only(model, baseline):
    def build(st):
        dec = Decoder(model, st)
        if st.strategy == "pipelined" and st.second_depth is not None:
            dec._step_hook = busy(2e-3)  # ~a few times this tiny model's step
        return dec

    cur = gates.measure(model, "tiny", PROMPTS, PLAN, build=build, settings=SETTINGS, modes=["greedy"])
    bad = messages(gates.compare(cur, greedy_only(baseline)))
    culprit = "greedy / pipelined d1=3 d2=5: speedup over autoregressive fell"
    assert len(bad) == 1 and bad[0].startswith(culprit), bad


def test_a_less_accepting_decoder_fails_on_exact_figures(model, baseline):
    def build(st):  # the same label, a shallower draft
        if st.label == "pipelined d1=3 d2=5":
            return Decoder(model, DecodeConfig("pipelined", draft_depth=1, second_depth=5))
        return Decoder(model, st)

    cur = gates.measure(model, "tiny", PROMPTS, PLAN, build=build, settings=SETTINGS, modes=["greedy"])
    was, now = (f["figures"]["greedy"]["pipelined d1=3 d2=5"]["exact"] for f in (baseline, cur))
    assert now["accepted"] / now["proposals"] < was["accepted"] / was["proposals"]  # really less accepting
    bad = messages(gates.compare(cur, greedy_only(baseline)))
    assert any("greedy / pipelined d1=3 d2=5: accepted moved" in m for m in bad), bad
    assert any("greedy / pipelined d1=3 d2=5: from_first moved" in m for m in bad), bad
    # only the culprit's exact figures moved (speed figures are timing, not asserted here)
    assert not any(("/ autoregressive" in m or "pipelined d1=3:" in m) and "moved" in m for m in bad)


def test_a_baseline_of_other_weights_is_refused(baseline, tmp_path):
    other = gates.measure(
        damped_model(seed=3),
        "tiny",
        PROMPTS,
        Workload(prompts=1, prompt_len=4, tokens=4, repeats=1),
        settings=SETTINGS,
    )
    results = gates.compare(other, baseline)
    assert len(results) == 1 and not results[0].passed
    assert "model_fingerprint" in results[0].details["moved"] and "--write-baseline" in messages(results)[0]
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(baseline))
    assert gates.read_baseline(path) == baseline
    with pytest.raises(LoopcertError, match="write-baseline"):
        gates.read_baseline(tmp_path / "missing.json")


def test_cli_writes_a_baseline_and_gates_against_it(tmp_path, capsys):
    from loopcert.cli import main

    base = tmp_path / "baseline.json"
    common = ["tiny-raven", "--baseline", str(base), "--out", str(tmp_path / "out")]
    assert main(["bench", *common, "--write-baseline", "--tokens", "8", "--repeats", "2"]) == 0
    data = json.loads(base.read_text())
    assert data["model"] == "tiny-raven" and data["settings"][0] == "autoregressive"
    assert (data["plan"]["tokens"], data["plan"]["repeats"]) == (8, 2)  # --gate reuses the baseline's plan
    data["figures"]["greedy"]["pipelined d1=2"]["exact"]["accepted"] += 1  # pretend it used to accept more
    base.write_text(json.dumps(data))
    assert main(["bench", *common, "--gate"]) == 1
    out = capsys.readouterr().out
    assert "FAIL greedy / pipelined d1=2: accepted moved" in out
    assert json.loads((tmp_path / "out" / "gate.json").read_text())["failures"]
    assert main(["bench", *common, "--threads", "0"]) == 2  # a usage error
