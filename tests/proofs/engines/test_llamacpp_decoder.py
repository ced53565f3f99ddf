"""The llama.cpp decoder against refdec, token for token (`tox -e llamacpp`; docs/decoders.md,
"Certify llama.cpp"): the GGUF conversion (both readout conventions, the loop count), seeds, the
speculative modes' statistics, the levers of the negative control, and the engines' other
parameters: the law llama.cpp samples under each, exactly, and the conventions it pins."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from llamacpp_models import require_llamacpp
from nanbeige_models import DRAFT_NOISE, PROMPT, write_nanbeige

import refdec
from proofs.decoder_attributes import (
    SamplingSupport,
    declared_compute_dtype,
    declared_sampler_order,
    declared_sampling,
)
from proofs.decoders.protocol import NotApplicable
from refdec.errors import LoopcertError
from refdec.sampling import (
    CONTEXT_SCOPE,
    ENGINE_FIELDS,
    FILTERS_FIRST,
    MIN_P_LAST,
    Context,
    SamplingParams,
    transform,
)
from refdec.score import continuation_logits

pytestmark = pytest.mark.llamacpp
require_llamacpp()

from proofs.decoders.llamacpp_decoder import PENALTY_WINDOW, decoder_for, request  # noqa: E402 - after the skip

SHORT = (3, 1, 4)
N = 20
GREEDY = SamplingParams()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("llamacpp-nanbeige")
    return write_nanbeige(root / "model"), write_nanbeige(root / "draft", noise=DRAFT_NOISE)


@pytest.fixture(scope="module")
def model(folders):
    return refdec.load_model(folders[0], dtype=torch.float64)


@pytest.mark.parametrize("skip", [False, True], ids=["norm-each-loop", "norm-once"])
@pytest.mark.parametrize("kv", ["f16", "f32"])
def test_plain_greedy_is_refdecs(tmp_path, skip, kv):
    m = refdec.load_model(write_nanbeige(tmp_path / "m", skip_loop_final_norm=skip), dtype=torch.float64)
    dec = decoder_for(f"llama.cpp:kv={kv}", m)
    assert declared_sampler_order(dec) == FILTERS_FIRST
    assert declared_compute_dtype(dec) == {"f16": torch.float16, "f32": torch.float32}[kv]
    for p in (PROMPT, SHORT):
        assert dec.generate(p, N, GREEDY, 0) == refdec.generate(m, p, N), p


def test_more_loops_than_two_are_converted(tmp_path):
    """num_loops is read by llama.cpp from the GGUF: R = 3 decodes refdec's depth 3."""
    m = refdec.load_model(write_nanbeige(tmp_path / "m", recurrence=3), dtype=torch.float64)
    assert decoder_for("llama.cpp:kv=f32", m).generate(PROMPT, N, GREEDY, 0) == refdec.generate(m, PROMPT, N)


def test_other_families_are_declined():
    with pytest.raises(NotApplicable, match="tiny-ouro is ouro"):
        decoder_for("llama.cpp", refdec.load_model("tiny-ouro"))


def test_the_seed_decides_the_sample(model):
    dec = decoder_for("llama.cpp", model)
    sp = SamplingParams(1.0)
    runs = [dec.generate(PROMPT, 8, sp, s) for s in (5, 6, 5)]
    assert runs[0] == runs[2] and runs[0] != runs[1]
    assert len(runs[0]) == 8 and dec.generate(PROMPT, 0, sp, 5) == []


@pytest.mark.parametrize("override", ["config.num_loops=1", "config.skip_loop_final_norm=true"])
def test_a_config_override_changes_what_llamacpp_computes(model, override):
    """The negative control's levers: the same weights run one loop, or normed once."""
    wrong = decoder_for(f"llama.cpp:{override}", model)
    assert wrong.generate(PROMPT, N, GREEDY, 0) != refdec.generate(model, PROMPT, N)


def test_one_loop_gguf_is_refdecs_depth_one(model):
    """What draft_loops=1 drafts from: llama.cpp's one-loop file is refdec's depth-1 readout."""
    dec = decoder_for("llama.cpp:config.num_loops=1,kv=f32", model)
    assert dec.generate(PROMPT, N, GREEDY, 0) == refdec.generate(model, PROMPT, N, depth=1)


@pytest.mark.parametrize(
    "spec",
    ["llama.cpp:draft_loops=1", "llama.cpp:draft={draft},num_draft=3", "llama.cpp:ngram=simple,num_draft=4"],
)
def test_speculative_greedy_is_refdecs_and_drafting_happened(folders, model, spec):
    dec = decoder_for(spec.format(draft=folders[1]), model)
    for p in (PROMPT, SHORT, PROMPT * 2):
        assert dec.generate(p, N, GREEDY, 0) == refdec.generate(model, p, N), p
    s = dec.stats
    assert s.requests == 3 and s.tokens == 3 * N
    assert s.proposed > 0 and 0 < s.accepted < s.proposed, s  # drafts proposed, some accepted, some not


def test_speculative_sampling_keeps_the_seed(model):
    dec = decoder_for("llama.cpp:draft_loops=1", model)
    sp = SamplingParams(1.0)
    a, b = dec.generate(PROMPT, 12, sp, 3), dec.generate(PROMPT, 12, sp, 3)
    assert a == b and dec.stats.proposed > 0


# -- the engines' other parameters: what llama.cpp's request carries, under its conventions --
# LONG (34 tokens) repeats tokens (frequency counts) and is past a window of 20: its first 14 tokens
# are counted by a penalty over the whole context, not by one over the last 20.
LONG = tuple(b"def f(x):\n    return x * x\n\ny = f(")
W = 20
# |log-prob| llama.cpp (float32, f32 KV cache) vs refdec (float64) over the kept tokens: measured
# at most 0.006 (0.0018 with no parameter: the forward's own rounding, in the tail's tiny laws)
LP_TOL = 0.01


def lc(temperature=1.0, window=W, **kw) -> SamplingParams:
    """SamplingParams under llama.cpp's conventions with a penalty window of `window`."""
    return SamplingParams(
        temperature, order=FILTERS_FIRST, penalty_scope=CONTEXT_SCOPE, penalty_window=window, **kw
    )


def test_the_declaration_is_what_llamacpp_honours(model):
    """Every engine field but min_tokens, penalties over the last 64 tokens of prompt + output: the
    server's default repeat_last_n, and its default chain opens with the penalties."""
    import xllamacpp

    sampling = xllamacpp.CommonParams().sampling
    assert sampling.penalty_last_n == PENALTY_WINDOW == 64 and sampling.samplers.startswith("penalties;")
    want = SamplingSupport(
        frozenset(ENGINE_FIELDS) - {"min_tokens"}, penalty_scope=CONTEXT_SCOPE, penalty_window=64
    )
    dec = decoder_for("llama.cpp", model)
    assert declared_sampling(dec) == want
    every = lc(
        min_p=0.05,
        repetition_penalty=1.2,
        frequency_penalty=0.1,
        presence_penalty=0.1,
        logit_bias={3: 1.0},
        stop_token_ids=(5,),
        ignore_eos=True,
    )
    assert set(every.engine_fields()) == want.fields
    assert 1 <= len(dec.generate(SHORT, 3, every, 0)) <= 3  # every declared field is taken
    with pytest.raises(LoopcertError, match=r"min_tokens=2: llama\.cpp's completion request has no such"):
        dec.generate(SHORT, 3, replace(every, min_tokens=2), 0)


def sampled_laws(dec, prompt, n, sampling, seed) -> tuple[list[int], torch.Tensor]:
    """The decoder's request with every probability asked back: its tokens, and the (n, V) law
    llama.cpp sampled each from (`post_sampling_probs`: the candidates after the whole chain).
    Plain decoding only: a token accepted from a draft comes back with no probabilities."""
    V = dec.vocab_size
    body = request(prompt, n, sampling, seed, V, dec.model.cfg.max_seq_len)
    body.update(logprobs=V, post_sampling_probs=True)
    r = dec.server.handle_completions(body)
    content = r["choices"][0]["logprobs"]["content"]
    law = torch.zeros(len(content), V, dtype=torch.float64)
    for i, e in enumerate(content):
        for c in e["top_probs"]:
            law[i, c["id"]] = c["prob"]
    return [e["id"] for e in content], law


def refdec_laws(model, prompt, tokens, sampling) -> torch.Tensor:
    """(n, V) refdec's law at each position of `tokens` (transform with the context before it)."""
    logits = continuation_logits(model, prompt, tokens)
    return torch.stack(
        [transform(logits[i], sampling, Context.of(prompt, tokens[:i])) for i in range(len(tokens))]
    )


def log_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |log got - log want| over the kept tokens; inf when the kept sets differ."""
    if not torch.equal(got > 0, want > 0):
        return math.inf
    kept = got > 0
    return float((got[kept].log() - want[kept].log()).abs().max())


ENGINES = dict(  # the quick plan's engines' case (proofs/run/plan.py), its bias on token 1
    top_k=8, top_p=0.9, min_p=0.05, repetition_penalty=1.3, frequency_penalty=0.4, presence_penalty=0.3
)
# (what is checked, the decoder's parameters, n tokens, the other conventions that must not match)
LAW_CASES = [
    ("logit bias", lc(logit_bias={32: 2.5, 120: -4.0, 200: 1.0}), 24, {"no bias": lc()}),
    (
        "repetition penalty",
        lc(repetition_penalty=1.8),
        24,
        {
            "the whole context": lc(repetition_penalty=1.8, window=None),
            "the last 19": lc(repetition_penalty=1.8, window=19),
            "the last 21": lc(repetition_penalty=1.8, window=21),
        },
    ),
    (
        "presence penalty",
        lc(presence_penalty=1.5),
        24,
        {
            "split scope": SamplingParams(1.0, order=FILTERS_FIRST, presence_penalty=1.5),
            "the whole context": lc(presence_penalty=1.5, window=None),
            "frequency instead": lc(frequency_penalty=1.5),
        },
    ),
    (
        "frequency penalty",
        lc(frequency_penalty=0.9),
        24,
        {
            "split scope": SamplingParams(1.0, order=FILTERS_FIRST, frequency_penalty=0.9),
            "the whole context": lc(frequency_penalty=0.9, window=None),
            "presence instead": lc(presence_penalty=0.9),
        },
    ),
    (
        "bias, then the penalty",  # every token of LONG biased: (l + b) / r, not l / r + b
        lc(repetition_penalty=3.0, logit_bias={t: 3.0 for t in set(LONG)}),
        24,
        {"no bias": lc(repetition_penalty=3.0)},
    ),
    (
        "min-p on the temperature-1 law",
        lc(1.5, min_p=0.05),
        24,
        {"on the tempered law": SamplingParams(1.5, min_p=0.05, min_p_order=MIN_P_LAST)},
    ),
    (
        "the engines' case, the declared window",  # 34 + 40 tokens: the window of 64 binds at the end
        lc(1.5, window=PENALTY_WINDOW, logit_bias={1: 1.5}, **ENGINES),
        40,
        {
            "the whole context": lc(1.5, window=None, logit_bias={1: 1.5}, **ENGINES),
            "split scope": SamplingParams(1.5, order=FILTERS_FIRST, logit_bias={1: 1.5}, **ENGINES),
        },
    ),
]


@pytest.mark.parametrize("what, sampling, n, controls", LAW_CASES, ids=[c[0] for c in LAW_CASES])
def test_the_sampled_law_is_refdecs_under_llamacpps_conventions(model, what, sampling, n, controls):
    """Exact: at each of n positions sampled past LONG (plain decoding, f32 KV cache), the law
    llama.cpp sampled from equals refdec's transform under the declared conventions (the same kept
    tokens, log-probabilities within LP_TOL), and each other convention's law is off by far more
    (the check can fail). Together they pin llama.cpp's conventions: logit_bias first, then the
    penalties, counting the last repeat_last_n tokens of prompt + output (the prompt is accepted
    into the sampler before the first token), min-p on the temperature-1 law."""
    dec = decoder_for("llama.cpp:kv=f32", model)
    tokens, got = sampled_laws(dec, LONG, n, sampling, 7)
    assert len(tokens) == n
    err = log_error(got, refdec_laws(model, LONG, tokens, sampling))
    assert err < LP_TOL, (what, err)
    for name, other in controls.items():
        off = log_error(got, refdec_laws(model, LONG, tokens, other))
        assert off > 50 * LP_TOL, (what, name, off)


SPECULATIVE = ["llama.cpp:kv=f32,draft_loops=1", "llama.cpp:kv=f32,draft={draft},num_draft=3"]
SPECULATIVE += ["llama.cpp:kv=f32,ngram=simple,num_draft=4"]


@pytest.mark.parametrize("spec", SPECULATIVE)
def test_speculative_greedy_under_penalties_is_refdecs(folders, model, spec):
    """Greedy is the argmax of the processed logits: after a rejected draft the penalties must
    count the tokens kept, not the ones drafted. Token for token refdec's, under the engines' case's
    penalties and under mild ones (the n-gram drafter finds repeats only under those), some drafts
    accepted and some rejected."""
    dec = decoder_for(spec.format(draft=folders[1]), model)
    strong = {k: v for k, v in ENGINES.items() if "penalty" in k}
    mild = dict(repetition_penalty=1.05, frequency_penalty=0.02)
    for penalties in (strong, mild):
        sp = lc(0.0, window=PENALTY_WINDOW, logit_bias={32: 2.5}, **penalties)
        for p in (LONG, PROMPT * 2):
            got = dec.generate(p, 40, sp, 0)
            assert got == refdec.generate(model, p, 40, sp), (p, penalties)
            assert got != refdec.generate(model, p, 40), p  # the penalties bind
    assert dec.stats.proposed > dec.stats.accepted > 0, dec.stats


@pytest.mark.parametrize(
    "spec", ["llama.cpp", "llama.cpp:draft_loops=1", "llama.cpp:ngram=simple,num_draft=4"]
)
def test_a_stop_token_ends_the_sequence_and_is_its_last(model, spec):
    """llama.cpp's string `stop` at the token's piece: the same seed's tokens, cut after the first
    occurrence of the stop token (finish_reason "stop"), in each mode."""
    dec = decoder_for(spec, model)
    sp = lc(1.0, window=PENALTY_WINDOW, **ENGINES)
    full = dec.generate(PROMPT * 2, N, sp, 3)
    stop = full[6]
    cut = full[: full.index(stop) + 1]
    assert len(cut) < N
    assert dec.generate(PROMPT * 2, N, replace(sp, stop_token_ids=(stop, 255)), 3) == cut
