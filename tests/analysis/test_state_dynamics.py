"""analysis.state_dynamics on models whose dynamics are known by construction: an adapter that
ignores the state (gain 0, nothing remembered) and an identity iteration (gain 1, step 0)."""

import pytest
import torch

from analysis.state_dynamics import init_sensitivity, iteration_gain, step_sizes, summarize_steps
from refdec.config import get_preset
from refdec.errors import LoopcertError
from refdec.model import LoopedLM


def model(kind):
    m = LoopedLM(get_preset("tiny-raven-olmo")).init_weights(5).double().eval()
    d = m.cfg.d_model
    with torch.no_grad():
        if kind == "forgets":  # h(r) = B(adapter(e)) only: the state never matters
            m.adapter.weight[:, :d] = 0
        elif kind == "identity":  # adapter passes h, blocks add nothing: h(r) = h(r-1)
            m.adapter.weight.zero_()
            m.adapter.weight[:, :d] = torch.eye(d)
            for blk in m.core:
                for name, p in blk.named_parameters():
                    if name.endswith(("o_proj.weight", "down_proj.weight")):
                        p.zero_()
    return m


IDS = torch.randint(0, 13, (2, 10), generator=torch.Generator().manual_seed(0))


def test_a_state_blind_iteration_has_gain_zero_and_forgets_at_once():
    m = model("forgets")
    assert iteration_gain(m, IDS, 3) < 1e-8
    sens = init_sensitivity(m, IDS, [1, 2, 4])
    assert all(v < 1e-12 for d in sens.values() for v in d.values())
    assert max(step_sizes(m, IDS, 5)) < 1e-12  # h(1) = h(2) = ...


def test_an_identity_iteration_has_gain_one_and_remembers():
    m = model("identity")
    assert iteration_gain(m, IDS, 3) == pytest.approx(1.0, abs=1e-6)
    sens = init_sensitivity(m, IDS, [1, 4])
    assert all(v > 1e-3 for d in sens.values() for v in d.values())
    assert m.embed_tokens.weight.dtype == torch.float64  # untouched by the float64 copy


def test_a_trained_like_model_sits_between_and_bad_input():
    m = LoopedLM(get_preset("tiny-raven-olmo")).init_weights(5).eval()
    g = iteration_gain(m, IDS, 4)
    assert 0 < g < 10 and m.embed_tokens.weight.dtype == torch.float32
    st = step_sizes(m, IDS, 6)
    assert len(st) == 5 and all(s > 0 for s in st)
    assert set(summarize_steps(st)) == {"ratio_first_8", "ratio_tail"}
    geo = summarize_steps([1.0, 0.5, 0.25, 0.125] + [0.5**k for k in range(4, 12)] + [1e-7, 1e-7])
    assert geo["ratio_first_8"] == pytest.approx(0.5) and geo["ratio_tail"] == pytest.approx(0.5)
    with pytest.raises(LoopcertError, match="ids"):
        step_sizes(m, IDS[0], 3)
    with pytest.raises(LoopcertError, match="Raven"):
        step_sizes(LoopedLM(get_preset("tiny-ouro")).init_weights(0), IDS, 3)
    with pytest.raises(LoopcertError, match="depths"):
        init_sensitivity(m, IDS, [])
