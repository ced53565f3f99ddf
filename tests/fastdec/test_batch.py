"""Decoder.generate_batch: many sequences through one engine, each exactly as if alone.

- Needle in a batch (fixed-width float32): a sequence decoded among any neighbours (other
  prompts, lengths, seeds, sampling, neighbours finishing early on EOS or max_new_tokens), at
  any position in the batch, is token for token and logit bit for bit the sequence decoded
  alone with the same seed. Hypothesis draws the batches.
- Law: in float64 every strategy's batched output for seed s is the output of generate(seed=s)
  alone, for every seed tried. Equal as functions of the seed, the two have the same law
  exactly (whatever the seed distribution): no statistical test needed for this step, and
  generate()'s own law is what certify checks against refdec.
- Greedy batches equal refdec (no cache, float64) for every strategy.
- Cache INVARIANT across sequences: poisoning every slot no live lane or committed position
  of any sequence owns (finished sequences' rows included) changes no bit; poisoning
  committed slots does (control).
- Bad input raises LoopcertError naming the value before any work.
"""

import re

import pytest
import torch
from batching import CONFIGS, SAMPLINGS, model_for, poisoner, same, setups
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fastdec import STRATEGIES, Decoder
from refdec import LoopcertError, SamplingParams, generate
from refdec.config import TINY_PRESETS

# -- needle in a batch -----------------------------------------------------------------------


@st.composite
def sequences(draw, vocab: int):
    prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=12))
    return prompt, draw(st.integers(0, 9)), draw(st.sampled_from(SAMPLINGS)), draw(st.integers(0, 2**64 - 1))


@st.composite
def batches(draw):
    name, vocab, strategy, width = draw(setups())
    needle = draw(sequences(vocab))
    others = draw(st.lists(sequences(vocab), min_size=1, max_size=5))
    at = draw(st.integers(0, len(others)))
    eos = draw(st.none() | st.integers(0, vocab - 1))
    return name, strategy, width, needle, others, at, eos


@settings(max_examples=12)
@given(batches())
@example(
    (
        "tiny-raven",
        "pipelined",
        8,
        ([1, 2, 3, 4], 9, SAMPLINGS[1], 5),
        [([7], 1, SAMPLINGS[0], 1), ([3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3], 9, SAMPLINGS[2], 2)],
        1,
        None,
    )
)
@example(
    (
        "tiny-ouro",
        "draft-verify",
        16,
        ([5, 6], 8, SAMPLINGS[2], 9),
        [([1, 1, 2], 0, SAMPLINGS[1], 4), ([2], 8, SAMPLINGS[1], 2**64 - 1)],
        2,
        3,
    )
)  # EOS, 0 new tokens
def test_needle_in_a_batch_is_bitwise_the_sequence_alone(case):
    name, strategy, width, needle, others, at, eos = case
    model = model_for(name)
    batch = others[:at] + [needle] + others[at:]
    prompts, news, samplings, seeds = (list(x) for x in zip(*batch))
    dec = Decoder(model, CONFIGS[strategy], fixed_width=width)
    got = dec.generate_batch(prompts, news, samplings, seeds, eos_token_id=eos, keep_logits=True)
    alone = Decoder(model, CONFIGS[strategy], fixed_width=width)
    for i, (prompt, n, sampling, seed) in enumerate(batch):
        want = alone.generate(prompt, n, sampling, seed, eos_token_id=eos, keep_logits=True)
        assert same(got[i], want), f"sequence {i} of {len(batch)}: {got[i].tokens} vs alone {want.tokens}"


def test_needle_control_a_different_seed_is_seen():
    """The needle comparison can fail: the same batch with the needle's seed changed differs."""
    model = model_for()
    dec = Decoder(model, CONFIGS["pipelined"], fixed_width=8)
    prompts, sp = [[1, 2, 3], [1, 2, 3]], SamplingParams(temperature=1.0)
    a = dec.generate_batch(prompts, 10, sp, [1, 2], keep_logits=True)
    b = dec.generate_batch(prompts, 10, sp, [1, 3], keep_logits=True)
    assert same(a[0], b[0]) and not same(a[1], b[1])


# -- law: batched == alone as functions of the seed (float64) --------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", ["tiny-raven", "tiny-ouro"])
def test_each_sequence_of_a_batch_is_generate_alone_for_every_seed(name, strategy):
    model = model_for(name, dtype=torch.float64)
    dec = Decoder(model, CONFIGS[strategy])  # normal mode: widths vary with the batch
    prompts = [[1, 2, 3], [4], [5, 6, 7, 8, 9, 10], [2, 2]]
    news = [6, 3, 6, 0]
    sampling = SamplingParams(temperature=1.0, top_k=6)
    seen = set()
    for base in range(0, 40, 4):
        seeds = [base, base + 1, base + 2, base + 3]
        got = dec.generate_batch(prompts, news, sampling, seeds)
        for p, n, s, res in zip(prompts, news, seeds, got):
            want = dec.generate(p, n, sampling, seed=s)
            assert res.tokens == want.tokens, (s, res.tokens, want.tokens)
            seen.add(tuple(res.tokens))
    assert len(seen) > 10  # the seeds really drive different outputs


# -- greedy == refdec ------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if CONFIGS[s].lossless])
@pytest.mark.parametrize("name", TINY_PRESETS)
def test_batched_greedy_equals_refdec_float64(name, strategy):
    model = model_for(name, dtype=torch.float64)
    prompts = [[1, 2, 3, 4, 5], [7], [3, 1, 4, 1, 5, 9, 2, 6], [8, 8]]
    news = [8, 5, 8, 2]
    got = Decoder(model, CONFIGS[strategy]).generate_batch(prompts, news, SamplingParams(), [0] * 4)
    for p, n, res in zip(prompts, news, got):
        assert res.tokens == generate(model, p, n)


# -- the cache INVARIANT with several sequences -------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", ["tiny-raven", "tiny-raven-olmo", "tiny-ouro"])
def test_garbage_in_every_unowned_slot_of_every_sequence_changes_nothing(name, strategy):
    model = model_for(name)
    prompts = [[1, 2, 3, 4], [5], [6, 7, 8, 9, 1, 2]]
    news = [10, 2, 7]  # the second finishes early: its row is garbage from then on
    sp = SamplingParams(temperature=1.0, top_k=8)
    want = Decoder(model, CONFIGS[strategy]).generate_batch(prompts, news, sp, [3, 4, 5], keep_logits=True)
    dirty = Decoder(model, CONFIGS[strategy])
    dirty._step_hook = poisoner(seed=2)
    got = dirty.generate_batch(prompts, news, sp, [3, 4, 5], keep_logits=True)
    assert all(same(a, b) for a, b in zip(got, want))


def test_poisoning_committed_slots_of_a_batch_is_detected():
    model = model_for("tiny-raven")
    prompts = [[1, 2, 3, 4], [5, 6]]
    want = Decoder(model, CONFIGS["pipelined"]).generate_batch(
        prompts, 8, SamplingParams(), [0, 0], keep_logits=True
    )
    dirty = Decoder(model, CONFIGS["pipelined"])
    dirty._step_hook = poisoner(seed=2, hit_committed=True)
    got = dirty.generate_batch(prompts, 8, SamplingParams(), [0, 0], keep_logits=True)
    assert not any(same(a, b) for a, b in zip(got, want))


# -- shape of a batch run ----------------------------------------------------------------------


def test_one_engine_call_advances_every_sequence():
    """Four autoregressive sequences in lockstep: every decode step is one call of width 4, and
    each sequence's stats are those of its own run (tokens, restarts)."""
    dec = Decoder(model_for(), "autoregressive")
    res = dec.generate_batch([[1], [2], [3], [4]], 5, SamplingParams(), [0, 1, 2, 3])
    for r in res:
        assert r.stats.tokens == 5 and r.stats.from_restart == 5
        assert r.stats.steps_per_width == {4: 4 * 5}  # R = 5 steps per token, 4 tokens after the prefill
    assert dec.generate([1], 5).tokens == res[0].tokens


def test_a_shared_prompt_is_prefilled_once_bit_for_bit():
    """Sequences with one prompt (certification samples one prompt thousands of times) copy the
    first one's prefill rows instead of recomputing them: the same bits as their own prefill."""
    model = model_for("tiny-raven-olmo")
    dec = Decoder(model, CONFIGS["pipelined"], fixed_width=8)
    first_step = []
    dec._step_hook = lambda engine, lanes, lengths: first_step.append(len(lanes)) if not first_step else None
    prompts = [[1, 2, 3, 4]] * 3 + [[5]]
    sp = SamplingParams(temperature=1.0)
    got = dec.generate_batch(prompts, 6, sp, [1, 2, 3, 4], keep_logits=True)
    assert first_step == [4 + 1]  # one prefill of the shared prompt, one of the other
    alone = Decoder(model, CONFIGS["pipelined"], fixed_width=8)
    for p, s, res in zip(prompts, [1, 2, 3, 4], got):
        assert same(res, alone.generate(p, 6, sp, s, keep_logits=True))


def test_batch_engines_run_wider_calls():
    """Up to 64 lanes per cache row, at most 1024: a batch's wavefronts share calls; past 64
    the widths grow by 1.5x and 2x alternately (less padding than powers of two)."""
    dec = Decoder(model_for(), "pipelined", draft_depth=1)
    assert dec.engine(10, 1).widths == (1, 2, 4, 8, 16, 32, 64)  # one sequence: the widths it always had
    assert dec.engine(10, 2).widths[-3:] == (64, 96, 128)
    assert dec.engine(10, 16).widths[-5:] == (256, 384, 512, 768, 1024)
    assert dec.engine(10, 64).widths[-1] == 1024
    assert dec.engine(10, 16).width(144) == 192 and dec.engine(10, 16).width(65) == 96


def test_rows_are_reused_across_calls_and_a_batch_of_one_is_generate():
    model = model_for()
    dec = Decoder(model, CONFIGS["pipelined"], fixed_width=8)
    dec.generate_batch([[9] * 11, [8] * 7, [1]], 12, SamplingParams(1.0), [1, 2, 3])  # stale rows everywhere
    got = dec.generate_batch([[1, 2, 3], [4, 5]], 9, SamplingParams(1.0), [7, 8], keep_logits=True)
    fresh = Decoder(model, CONFIGS["pipelined"], fixed_width=8)
    assert same(got[1], fresh.generate([4, 5], 9, SamplingParams(1.0), 8, keep_logits=True))
    one = fresh.generate_batch([[4, 5]], 9, SamplingParams(1.0), [8], keep_logits=True)[0]
    assert same(one, got[1])


# -- a queue: more sequences than rows ----------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_more_sequences_than_rows_queue_and_reuse_finished_rows(strategy):
    """11 sequences through 4 rows: the waiting ones take the rows of those that finish (other
    prompts, lengths, EOS, 0 new tokens, a shared prompt held in a reused row), and each is
    bit for bit the sequence decoded alone."""
    model = model_for("tiny-raven-olmo")
    prompts = [
        [1, 2, 3],
        [4],
        [1, 2, 3],
        [5, 6, 7, 8, 9],
        [1, 2, 3],
        [2, 2],
        [1, 2, 3],
        [7] * 10,
        [1, 2, 3],
        [3],
        [1, 2, 3],
    ]
    news = [6, 2, 9, 3, 0, 7, 1, 5, 8, 4, 6]
    sps = [SAMPLINGS[i % 3] for i in range(11)]
    seeds = list(range(100, 111))
    dec = Decoder(model, CONFIGS[strategy], fixed_width=16, max_batch=4)
    live = []
    dec._step_hook = lambda engine, lanes, lengths: live.append(len({ln.row for ln in lanes}))
    got = dec.generate_batch(prompts, news, sps, seeds, eos_token_id=5, keep_logits=True)
    assert dec.engine(20, 4).rows == 4 and max(live) == 4
    alone = Decoder(model, CONFIGS[strategy], fixed_width=16)
    for i, (p, n, sp, seed) in enumerate(zip(prompts, news, sps, seeds)):
        want = alone.generate(p, n, sp, seed, eos_token_id=5, keep_logits=True)
        assert same(got[i], want), f"sequence {i}: {got[i].tokens} vs alone {want.tokens}"


def test_queued_sequences_reuse_the_held_prefill_and_poisoning_finds_nothing():
    """A queued sequence whose row (or another) holds its prompt's prefill starts without one:
    one prefill for 9 samples of a prompt through 3 rows; garbage in every slot that neither a
    live lane, a committed position nor a held prefill owns changes no bit."""
    model = model_for("tiny-raven")
    sp = SamplingParams(temperature=1.0)
    prompts, seeds = [[1, 2, 3, 4]] * 9, list(range(9))
    want = Decoder(model, CONFIGS["pipelined"], max_batch=3).generate_batch(
        prompts, 4, sp, seeds, keep_logits=True
    )
    dirty = Decoder(model, CONFIGS["pipelined"], max_batch=3)
    dirty._step_hook = poisoner(seed=5)
    got = dirty.generate_batch(prompts, 4, sp, seeds, keep_logits=True)
    assert all(same(a, b) for a, b in zip(got, want))
    assert sum(r.stats.prefill_steps > 0 for r in got) <= 3  # the first row prefills, the others wait on it
    assert sum(r.stats.prefill_steps for r in got) == 5 * 3  # R = 5 steps, counted by the 3 first
    alone = Decoder(model, CONFIGS["pipelined"])
    assert [r.tokens for r in got] == [alone.generate(p, 4, sp, s).tokens for p, s in zip(prompts, seeds)]


@pytest.mark.parametrize("pieces", [0, 10**6])
def test_gathered_and_viewed_reads_are_the_same_bits(monkeypatch, pieces):
    """A fragmented call may read by index gather (engine.GATHER_PIECES, PIECE_ELEMS); forcing
    every call to gather (0) or to views (10**6) in a batch changes no bit of any sequence
    against alone."""
    import fastdec.engine

    model = model_for("tiny-raven-olmo")
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 1], [2], [3, 3]]
    news, sp = [9, 6, 8, 30], SAMPLINGS[2]
    alone = [
        Decoder(model, CONFIGS["pipelined"], fixed_width=8).generate(p, n, sp, 7 + i, keep_logits=True)
        for i, (p, n) in enumerate(zip(prompts, news))
    ]
    monkeypatch.setattr(fastdec.engine, "GATHER_PIECES", pieces)
    monkeypatch.setattr(fastdec.engine, "PIECE_ELEMS", 10**12)
    got = Decoder(model, CONFIGS["pipelined"], fixed_width=8).generate_batch(
        prompts, news, sp, [7, 8, 9, 10], keep_logits=True
    )
    assert all(same(a, b) for a, b in zip(got, alone))


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, match",
    [
        (([[1, 2], [3]], 4, SamplingParams(), [1]), "2 prompts but 1 seeds"),
        (([], 4, SamplingParams(), []), "empty batch"),
        (([[1, 2], [1] * 126], 4, SamplingParams(), [0, 1]), "sequence 1: prompt of 126 tokens"),
        (([[1, 2], [3, 13]], 4, SamplingParams(), [0, 1]), "token id 13"),
        (([[1], [2]], 4, SamplingParams(), [0, 2**64]), f"got {2**64}"),
        (([[1], [2]], 4, SamplingParams(), [0, -1]), "got -1"),
        (([[1], [2]], [4, 5, 6], SamplingParams(), [0, 1]), "2 prompts but 3 max_new_tokens"),
        (([[1], [2]], [4, -1], SamplingParams(), [0, 1]), "max_new_tokens must be an integer >= 0, got -1"),
        (([[1], [2]], 4, [SamplingParams(), "greedy"], [0, 1]), "'greedy'"),
        (([[1], [2]], 4, SamplingParams(), 7), "seeds must be"),
    ],
)
def test_bad_batches_raise_before_any_work(args, match):
    dec = Decoder(model_for(), CONFIGS["pipelined"], fixed_width=8, max_batch=4)
    want = dec.generate_batch([[4, 5, 6], [1]], 8, SamplingParams(1.0), [1, 2], keep_logits=True)
    cache = dec.engine(11, 2).cache
    snapshot = [t.clone() for tl in cache.timelines() for t in (tl.k, tl.v, tl.side_k, tl.side_v)]
    with pytest.raises(LoopcertError, match=re.escape(match)):
        dec.generate_batch(*args)
    after = [t for tl in cache.timelines() for t in (tl.k, tl.v, tl.side_k, tl.side_v)]
    assert all(torch.equal(a, b) for a, b in zip(snapshot, after))  # nothing half-written
    again = dec.generate_batch([[4, 5, 6], [1]], 8, SamplingParams(1.0), [1, 2], keep_logits=True)
    assert all(same(a, b) for a, b in zip(again, want))
