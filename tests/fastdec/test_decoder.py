"""fastdec.Decoder: sampling determinism, stats invariants, bad input, the CLI."""

import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fastdec import STRATEGIES, Decoder
from loopcert.cli import main
from refdec import LoopcertError, LoopedLM, SamplingParams
from refdec.config import TINY_PRESETS, get_preset
from refdec.load import load_model

_models: dict = {}


def model_for(name="tiny-raven", recurrence=None, seed=0):
    key = (name, recurrence, seed)
    if key not in _models:
        cfg = get_preset(name)
        _models[key] = LoopedLM(cfg.replace(recurrence=recurrence or cfg.recurrence)).init_weights(seed)
    return _models[key]


SAMPLING = SamplingParams(temperature=1.0, top_p=0.95)
SETTINGS = {
    "autoregressive": {},
    "draft-verify": {"draft_depth": 2, "draft_ahead": 3},
    "pipelined": {"draft_depth": 1, "second_depth": 3},
    "adaptive-verify": {"draft_depth": 1, "rewind_depth": 3},
}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_sampling_is_deterministic_per_seed(strategy):
    dec = Decoder(model_for(), strategy, **SETTINGS[strategy])
    runs = {
        seed: [dec.generate([1, 2, 3], 16, SAMPLING, seed=seed).tokens for _ in range(2)] for seed in range(3)
    }
    for a, b in runs.values():
        assert a == b
    assert len({tuple(r[0]) for r in runs.values()}) > 1  # different seeds differ


@pytest.mark.parametrize("strategy", ["draft-verify", "pipelined"])
def test_unfiltered_drafts_are_a_different_but_valid_run(strategy):
    """draft_filter=False drafts from the unfiltered law: other draws, same engine, still all
    tokens inside the target's top-k (acceptance uses the law each draft was drawn from)."""
    model = model_for("tiny-ouro")
    params = SamplingParams(temperature=1.0, top_k=2)
    kw = SETTINGS[strategy]
    a = Decoder(model, strategy, **kw).generate([1, 2], 24, params, seed=4, keep_logits=True)
    b = Decoder(model, strategy, draft_filter=False, **kw).generate(
        [1, 2], 24, params, seed=4, keep_logits=True
    )
    assert a.tokens != b.tokens
    for res in (a, b):
        for tok, logits in zip(res.tokens, res.target_logits):
            assert tok in torch.topk(logits, 2).indices.tolist()


@st.composite
def settings(draw):
    name = draw(st.sampled_from(TINY_PRESETS))
    r = draw(st.integers(2, 8))
    strategy = draw(st.sampled_from(STRATEGIES))
    kw = {"rewind_depth": draw(st.none() | st.integers(1, r))}
    if strategy != "autoregressive":
        kw["draft_depth"] = d1 = draw(st.integers(1, r - 1))
        kw["draft_ahead"] = draw(st.integers(1, 4))
    if strategy == "pipelined" and d1 + 1 < r:
        kw["second_depth"] = draw(st.none() | st.integers(d1 + 1, r - 1))
        kw["gate"] = draw(st.sampled_from([True, False, "inverted"]))
    if strategy == "adaptive-verify":
        if d1 + 1 >= r:
            strategy = "draft-verify"
        else:
            kw["rewind_depth"] = draw(st.integers(d1 + 1, r - 1))
    sampling = draw(st.sampled_from([SamplingParams(), SamplingParams(1.0), SamplingParams(0.8, top_k=4)]))
    return name, r, strategy, kw, sampling, draw(st.integers(0, 100)), draw(st.integers(1, 12))


@given(settings())
def test_stats_invariants(case):
    name, r, strategy, kw, sampling, seed, n_new = case
    res = Decoder(model_for(name, r), strategy, **kw).generate([1, 2, 3], n_new, sampling, seed=seed)
    s = res.stats
    assert s.tokens == len(res.tokens) == n_new
    assert s.from_first + s.from_second + s.from_restart == s.tokens  # sources sum to tokens
    assert 0 <= s.accepted <= s.proposals and s.rejections == s.proposals - s.accepted
    d1 = kw.get("draft_depth")
    if strategy == "autoregressive":
        assert s.gamma == 1.0 and s.proposals == 0 and s.peak_lanes <= 1
    else:
        assert s.gamma <= r / d1 + 1e-12
    assert s.from_first <= s.accepted  # accepted first proposals commit unless they end the run
    if kw.get("rewind_depth") is not None:
        assert s.rewind_hits <= s.rewind_checks == s.rejections
    else:
        assert s.rewind_checks == s.rewind_hits == 0
    assert s.gate_opens <= s.gate_checks
    if kw.get("second_depth") is None:
        assert s.gate_checks == 0 and s.from_second == 0
    assert s.peak_lanes >= s.mean_live_lanes >= (1 if s.steps else 0)
    assert sum(s.steps_per_width.values()) >= s.steps
    assert all(w & (w - 1) == 0 for w in s.steps_per_width)  # widths are powers of two
    d = s.as_dict()
    assert d["tokens"] == s.tokens and d["gamma"] == s.gamma


def converged(name="tiny-raven-llama", recurrence=8) -> LoopedLM:
    """A Raven model whose adapter ignores the state: every depth >= 1 gives the same logits."""
    model = LoopedLM(get_preset(name).replace(recurrence=recurrence)).init_weights(0)
    with torch.no_grad():
        model.adapter.weight[:, : model.cfg.d_model] = 0.0
    return model


def test_stats_when_every_draft_is_right():
    """Drafts always accepted: lanes overlap R/d1 deep, gamma = N*R/((N-1)*d1 + R) exactly."""
    model = converged()
    s = Decoder(model, "pipelined", draft_depth=2).generate([1, 2, 3], 12).stats
    assert s.acceptance_rate == 1.0 and (s.from_first, s.from_restart, s.rounds) == (11, 1, 1)
    assert s.peak_lanes == 4 and s.gamma == pytest.approx(12 * 8 / (11 * 2 + 8))
    assert s.steps == 8 + 10 * 2  # the first lane's R steps, then one token every d1 steps
    s = Decoder(model, "draft-verify", draft_depth=2, draft_ahead=4).generate([1, 2, 3], 12).stats
    assert s.acceptance_rate == 1.0 and s.mean_accepted_length == pytest.approx(11 / 3)
    # per round of k drafts: k*d1 sequential draft steps, then R - d1 batched deepening steps
    assert s.steps == (4 * 2 + 6) * 2 + (3 * 2 + 6)
    assert s.steps_per_width == {1: 22, 4: 18}  # the last round's 3 lanes pad to width 4


# -- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"strategy": "speculative"}, "speculative"),
        ({"strategy": "draft-verify", "draft_depth": 6}, "draft_depth=6"),
        ({"strategy": "pipelined", "draft_depth": 7, "depth": 5}, "draft_depth=7"),
        ({"strategy": "pipelined", "draft_depth": 0}, "draft_depth must be an integer >= 1, got 0"),
        ({"strategy": "pipelined", "draft_depth": 2, "second_depth": 2}, "second_depth=2"),
        ({"strategy": "pipelined", "draft_depth": 2, "second_depth": 6}, "second_depth=6"),
        ({"strategy": "draft-verify", "draft_depth": 2, "second_depth": 4}, "second_depth=4"),
        ({"strategy": "draft-verify", "draft_ahead": 0}, "draft_ahead must be an integer >= 1, got 0"),
        ({"strategy": "draft-verify", "draft_ahead": 2.5}, "2.5"),
        ({"rewind_depth": 7}, "rewind_depth=7"),
        ({"rewind_depth": 0}, "rewind_depth=0"),
        ({"strategy": "adaptive-verify", "draft_depth": 3}, "verify depth 6"),
        ({"strategy": "pipelined", "gate": "sometimes"}, "sometimes"),
        ({"fixed_width": 3}, "fixed_width"),
        ({"depth": 0}, "depth must be an integer >= 1, got 0"),
        ({"cuda_graphs": True}, "cuda_graphs"),
        ({"reads": "copy"}, "copy"),
        ({"dtype": "float8"}, "float8"),
    ],
)
def test_bad_settings_raise_one_clear_error(kw, match):
    with pytest.raises(LoopcertError, match=re.escape(match)):
        Decoder(model_for(), **kw)


@pytest.mark.parametrize(
    "args, match",
    [
        (([], 4), "non-empty"),
        (([1, 13], 4), "token id 13"),
        (([1, -1], 4), "token id -1"),
        (([1] * 120, 9), "max_seq_len=128"),  # context overflow
        (([1, 2], -1), "max_new_tokens"),
        (([1, 2], 4, SamplingParams(), -3), "seed"),
        (([1, 2], 4, "greedy"), "SamplingParams"),
    ],
)
def test_bad_generate_args_raise_and_write_nothing(args, match):
    dec = Decoder(model_for(), "pipelined", draft_depth=1, second_depth=3, fixed_width=4)
    want = dec.generate([4, 5, 6], 8, SAMPLING, seed=1, keep_logits=True)
    cache = dec.engine(3 + 8).cache
    snapshot = [t.clone() for tl in cache.timelines() for t in (tl.k, tl.v, tl.side_k, tl.side_v)]
    with pytest.raises(LoopcertError, match=re.escape(match)):
        dec.generate(*args)
    with pytest.raises(LoopcertError, match="eos_token_id=13"):
        dec.generate([1, 2], 4, eos_token_id=13)
    after = [t for tl in cache.timelines() for t in (tl.k, tl.v, tl.side_k, tl.side_v)]
    assert all(torch.equal(a, b) for a, b in zip(snapshot, after))  # nothing half-written
    again = dec.generate([4, 5, 6], 8, SAMPLING, seed=1, keep_logits=True)
    assert again.tokens == want.tokens


def test_max_new_tokens_zero_returns_nothing():
    res = Decoder(model_for(), "pipelined", draft_depth=1).generate([1, 2], 0)
    assert res.tokens == [] and res.stats.tokens == 0 and res.stats.steps == 0


def test_depth_beyond_r_and_dtype_conversion():
    model = model_for()
    dec = Decoder(model, "draft-verify", draft_depth=3, depth=9, dtype="float64")
    assert dec.model is not model and next(dec.model.parameters()).dtype == torch.float64
    assert next(model.parameters()).dtype == torch.float32  # the caller's model is untouched
    assert dec.readout_depths == [3, 9]
    assert len(dec.generate([1, 2], 5).tokens) == 5


# -- CLI -----------------------------------------------------------------------------------
SPECULATE = ["speculate", "tiny-raven", "--prompt-ids", "1", "2", "3"]  # the prompt [1, 2, 3]


def test_cli_speculate_prints_tokens_then_stats(capsys):
    rc = main(
        SPECULATE
        + ["--max-new-tokens", "6", "--draft-loops", "2", "--verify-loops", "6", "--draft-ahead", "4"]
        + ["--rewind-L", "4"]
    )
    out = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert len(out[0].split()) == 6 and all(t.isdigit() for t in out[0].split())
    stats = dict(line.split(": ", 1) for line in out[1:])
    assert stats["strategy"] == "draft-verify" and stats["tokens"] == "6" and stats["lossless"] == "True"
    assert int(stats["rewind_hits"]) <= int(stats["rewind_checks"]) == int(stats["rejections"])
    assert re.fullmatch(r"\d\.\d{3}", stats["rewind_hit_rate"])
    want = Decoder(model_for(), "draft-verify", draft_depth=2, depth=6).generate([1, 2, 3], 6).tokens
    assert out[0] == " ".join(map(str, want))


@pytest.mark.parametrize(
    "flags",
    [
        ["--draft-depth", "1", "--depth", "6", "--second-depth", "3", "--rewind-depth", "4"],
        # the seed's names, kept as aliases
        ["--draft-loops", "1", "--verify-loops", "6", "--second-loops", "3", "--rewind-L", "4"],
    ],
)
def test_cli_speculate_flags_are_named_like_the_api(capsys, flags):
    rc = main(SPECULATE + ["--max-new-tokens", "5", "--strategy", "pipelined", "--draft-ahead", "2", *flags])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0
    stats = dict(line.split(": ", 1) for line in out[1:])
    assert (stats["depth"], stats["draft_depth"], stats["second_depth"]) == ("6", "1", "3")
    assert int(stats["rewind_checks"]) == int(stats["rejections"])
    want = Decoder(model_for(), "pipelined", draft_depth=1, depth=6, second_depth=3).generate([1, 2, 3], 5)
    assert out[0] == " ".join(map(str, want.tokens))


def test_cli_speculate_decodes_several_prompts_as_one_batch(capsys, tmp_path):
    """--prompt repeated and --prompts-file: one batch, sequence i seeded --seed + i, each block
    equal to the same prompt decoded alone."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("class A:\n\nimport os\n")
    rc = main(
        [
            "speculate",
            "default",
            "--prompt",
            "def f",
            "--prompt",
            "x = ",
            "--prompts-file",
            str(prompts),
            "--strategy",
            "pipelined",
            "--depth",
            "4",
            "--draft-depth",
            "1",
            "--max-new-tokens",
            "5",
            "--temperature",
            "1",
            "--seed",
            "7",
            "--fixed-width",
            "8",
        ]
    )
    lines = capsys.readouterr().out.splitlines()
    heads = [k for k, line in enumerate(lines) if re.fullmatch(r"# \d+", line)]
    assert rc == 0 and [lines[k] for k in heads] == ["# 0", "# 1", "# 2", "# 3"]
    dec = Decoder(load_model("default"), "pipelined", depth=4, draft_depth=1, fixed_width=8)
    for i, text in enumerate(["def f", "x = ", "class A:", "import os"]):
        want = dec.generate(list(text.encode()), 5, SamplingParams(temperature=1.0), seed=7 + i).tokens
        tail = lines[heads[i] + 1 : heads[i + 1] if i + 1 < len(heads) else None]
        stats = dict(ln.split(": ", 1) for ln in tail if ": " in ln and ln.split(": ", 1)[0].isidentifier())
        assert stats["tokens"] == "5" and "\n".join(tail).startswith(bytes(want).decode(errors="replace"))
    assert main(["speculate", "tiny-raven", "--prompts-file", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt" in capsys.readouterr().err


def test_cli_speculate_pipelined_sampling_and_errors(capsys):
    rc = main(
        [
            "speculate",
            "tiny-ouro",
            "--prompt-ids",
            "1",
            "2",
            "--strategy",
            "pipelined",
            "--draft-loops",
            "1",
            "--second-loops",
            "2",
            "--gate",
            "off",
            "--temperature",
            "0.9",
            "--top-k",
            "5",
            "--seed",
            "3",
            "--fixed-width",
            "8",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "gate_checks: " in out and "steps_per_width: 8=" in out
    assert main(["speculate", "tiny-ouro", "--prompt-ids", "1", "--draft-loops", "4"]) == 2
    assert "draft_depth=4 must be < depth=4" in capsys.readouterr().err
