"""fastdec under the engines' sampling parameters (penalties, min_p, logit bias, stop tokens,
min_tokens, EOS): greedy token for token with refdec in every lossless strategy; sampling, the
autoregressive strategy exactly (one uniform a token, as refdec), the speculative ones by the exact
law of the first tokens (stopped sequences are shorter cells of it) with a chi-square at fixed
seeds, and a negative control (penalties that miss the tokens accepted in the same block) that the
same test rejects."""

import numpy as np
import pytest
import torch

from fastdec import Decoder
from fastdec.strategies import Sequence
from proofs.stats.chisquare import chisquare_gof
from refdec import LoopedLM, SamplingParams, generate
from refdec.config import TINY_PRESETS, get_preset
from refdec.sampling import Context, transform

_models: dict = {}


def model_for(name: str, recurrence: int = 6, seed: int = 0) -> LoopedLM:
    key = (name, recurrence, seed)
    if key not in _models:
        _models[key] = LoopedLM(get_preset(name).replace(recurrence=recurrence)).init_weights(seed).double()
    return _models[key]


PROMPT = [3, 3, 8, 1, 3, 3]
SETTINGS = {
    "draft-verify k=3": {"strategy": "draft-verify", "draft_depth": 1, "draft_ahead": 3},
    "draft-verify k=1": {"strategy": "draft-verify", "draft_depth": 2, "draft_ahead": 1},
    "pipelined d2": {"strategy": "pipelined", "draft_depth": 1, "second_depth": 3},
    "pipelined": {"strategy": "pipelined", "draft_depth": 2},
}
GREEDY = [
    SamplingParams(0.0, repetition_penalty=3.0, frequency_penalty=0.8),
    SamplingParams(0.0, logit_bias={5: 1.0, 9: -2.0}, presence_penalty=1.5, stop_token_ids=[7]),
    SamplingParams(0.0, repetition_penalty=2.0, penalty_scope="context", penalty_window=3, min_tokens=3),
]


@pytest.mark.parametrize("name", TINY_PRESETS)
@pytest.mark.parametrize("params", GREEDY, ids=lambda p: str(p.describe()))
def test_greedy_equals_refdec_in_every_strategy(name, params):
    model = model_for(name)
    for eos in (None, 2, 7):
        want = generate(model, PROMPT, 9, params, eos_token_id=eos)
        for label, kw in SETTINGS.items():
            got = Decoder(model, **kw).generate(PROMPT, 9, params, eos_token_id=eos).tokens
            assert got == want, f"{label} eos={eos}: {got} != refdec {want}"


SAMPLED = [
    SamplingParams(1.0, repetition_penalty=1.8, frequency_penalty=0.6, min_p=0.05),
    SamplingParams(0.9, logit_bias={4: 2.0}, stop_token_ids=[4], min_tokens=1, presence_penalty=1.0),
    SamplingParams(1.1, top_k=6, top_p=0.9, min_p=0.1, repetition_penalty=1.5, penalty_scope="context"),
]


@pytest.mark.parametrize("params", SAMPLED, ids=lambda p: str(p.describe()))
def test_autoregressive_sampling_equals_refdec(params):
    model = model_for(TINY_PRESETS[1])
    for seed in range(4):
        for eos in (None, 2):
            want = generate(model, PROMPT, 8, params, seed=seed, eos_token_id=eos)
            assert Decoder(model).generate(PROMPT, 8, params, seed=seed, eos_token_id=eos).tokens == want


def sequence_law(model, params, n, eos=None) -> dict[tuple[int, ...], float]:
    """The exact law of the first n tokens (a sequence ends at its first stop token), enumerated
    from refdec's laws given each prefix."""
    stops = params.stop_ids(eos)
    out, frontier = {}, [((), 1.0)]
    for _ in range(n):
        nxt = []
        for prefix, p in frontier:
            logits = model.depth_logits(PROMPT + list(prefix), [model.cfg.recurrence])[0, -1]
            law = transform(logits, params, Context.of(PROMPT, prefix, eos)).tolist()
            for t, q in enumerate(law):
                if q > 0:
                    (
                        out.__setitem__(prefix + (t,), p * q)
                        if t in stops
                        else nxt.append((prefix + (t,), p * q))
                    )
        frontier = nxt
    out.update(dict(frontier))
    return out


def gof(model, kw, params, n=3, samples=1500, eos=None) -> float:
    law = sequence_law(model, params, n, eos)
    cells = list(law)
    index = {c: i for i, c in enumerate(cells)}
    dec = Decoder(model, **kw)
    got = dec.generate_batch([PROMPT] * samples, n, params, list(range(samples)), eos_token_id=eos)
    counts = np.zeros(len(cells) + 1, dtype=np.int64)  # the last cell: outside the law's support
    for r in got:
        counts[index.get(tuple(r.tokens), len(cells))] += 1
    return chisquare_gof(counts, [law[c] for c in cells] + [0.0])["p_value"]


FAST = {("draft-verify k=3", 1), ("pipelined d2", 2)}  # the default suite's; the rest are slow
CASES = [
    pytest.param(label, p, marks=() if (label, i) in FAST else pytest.mark.slow, id=f"{label} {p.describe()}")
    for label in ("draft-verify k=3", "pipelined d2")
    for i, p in enumerate(SAMPLED)
]


@pytest.mark.parametrize("label, params", CASES)
def test_speculative_sampling_has_the_exact_law(label, params):
    """alpha 1e-4 a case (false alarm 1e-4 at fixed seeds); the negative control below shows power."""
    model = model_for(TINY_PRESETS[1])
    assert gof(model, SETTINGS[label], params) > 1e-4


def test_penalties_that_miss_the_block_are_rejected(monkeypatch):
    """Negative control (SGLang PR #33643's class): the target law of a drafted position counts the
    committed tokens up to the start of its block only, not those accepted before it in the block."""
    model = model_for(TINY_PRESETS[1])
    params = SamplingParams(1.0, repetition_penalty=3.0, frequency_penalty=1.0)
    kw = SETTINGS["draft-verify k=3"]
    assert gof(model, kw, params, samples=800) > 1e-4
    real = Sequence.context

    def stale(self, drafted=()):
        if drafted or not self.tokens:
            return real(self, drafted)
        block = getattr(self, "_block_start", None)
        ctx = real(self, drafted)
        return ctx if block is None else Context(ctx.prompt, ctx.output[:block], ctx.eos_token_id)

    def draft_round(self, pos):
        self._block_start = len(self.tokens)
        return (yield from real_round(self, pos))

    from fastdec.strategies import DraftVerify

    real_round = DraftVerify.draft_round
    monkeypatch.setattr(Sequence, "context", stale)
    monkeypatch.setattr(DraftVerify, "draft_round", draft_round)
    assert gof(model, kw, params, samples=800) < 1e-6


def test_a_stop_inside_an_accepted_block_ends_the_sequence():
    """A likely stop token is drafted and accepted mid-block: nothing after it is committed."""
    model = model_for(TINY_PRESETS[1])
    params = SamplingParams(1.0, stop_token_ids=[6], min_tokens=2)  # token 6 is this model's likely one
    dec = Decoder(model, **SETTINGS["draft-verify k=3"])
    got = dec.generate_batch([PROMPT] * 200, 8, params, list(range(200)))
    ended = [r for r in got if len(r.tokens) < 8]
    assert len(ended) > 150 and all(r.tokens[-1] == 6 and 6 not in r.tokens[:-1] for r in ended)
    assert any(r.stats.accepted > 0 and len(r.tokens) > 1 for r in ended)
    assert torch.tensor([len(r.tokens) for r in got]).float().mean() < 4
