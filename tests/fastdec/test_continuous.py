"""fastdec.ContinuousBatch: sequences join and leave a running batch between engine steps.

- Needle (fixed-width float32): a sequence that joins a running batch at any step, among
  neighbours that join, finish, share its prompt (held or copied prefills, or one being
  prefilled right now) or are dropped, on rows other sequences used before, is token for token
  and logit bit for bit the sequence decoded alone with the same seed. Hypothesis draws the
  schedules.
- Law: in float64 every strategy's output for seed s, whenever it joined, is generate(seed=s)
  alone, for every seed tried (equal as functions of the seed: the same law exactly).
- Cache INVARIANT: garbage in every slot no live lane, committed position or held prefill
  owns changes no bit (reused rows included); poisoning committed slots does.
- Drops: a sequence dropped while it prefills a prompt another waits for leaves the other to
  prefill it itself; nothing of a dropped sequence is returned; bad input is refused before
  any change.
"""

import pytest
import torch
from batching import CONFIGS, SAMPLINGS, model_for, poisoner, same, setups
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fastdec import STRATEGIES, ContinuousBatch, Decoder
from refdec import LoopcertError, SamplingParams


def run_schedule(dec: Decoder, schedule, rows: int, n_positions: int = 32, drops=(), keep_logits=True):
    """schedule: [(join step, prompt, max_new, sampling, seed, eos)], joined in order once their
    step has come and a row is free; drops: {index: step}. -> {index: GenerateResult}."""
    batch = ContinuousBatch(dec, n_positions, rows=rows)
    handles, out, step, todo = {}, {}, 0, list(range(len(schedule)))
    while todo or len(batch):
        while todo and schedule[todo[0]][0] <= step and batch.room():
            i = todo.pop(0)
            _, prompt, n, sp, seed, eos = schedule[i]
            handles[batch.add(prompt, n, sp, seed, eos_token_id=eos, keep_logits=keep_logits)] = i
        for i, at in drops:
            if at == step:
                for h, j in handles.items():
                    if j == i:
                        batch.drop(h)
        live = batch.driver.active
        assert all(s.row == r for r, (s, _, _) in live.items()), f"step {step}: a sequence off its row"
        assert len({id(s) for s, _, _ in live.values()}) == len(live)
        for h, res in batch.step():
            out[handles[h]] = res
        step += 1
        assert step < 10_000
    return out


@st.composite
def schedules(draw):
    name, vocab, strategy, width = draw(setups())
    shared = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=6))
    seqs = []
    for _ in range(draw(st.integers(1, 7))):
        prompt = draw(st.just(shared) | st.lists(st.integers(0, vocab - 1), min_size=1, max_size=10))
        at, n, sp = draw(st.integers(0, 30)), draw(st.integers(1, 8)), draw(st.sampled_from(SAMPLINGS))
        seed, eos = draw(st.integers(0, 2**64 - 1)), draw(st.none() | st.integers(0, vocab - 1))
        seqs.append((at, prompt, n, sp, seed, eos))
    seqs.sort(key=lambda s: s[0])
    rows = draw(st.integers(1, 4))
    drops = draw(st.lists(st.tuples(st.integers(0, len(seqs) - 1), st.integers(0, 40)), max_size=2))
    return name, strategy, width, seqs, rows, drops


@settings(max_examples=12, deadline=None)
@given(schedules())
@example(
    (
        "tiny-raven",
        "pipelined",
        8,  # three on one prompt, joining late, on two reused rows
        [
            (0, [1, 2, 3], 6, SAMPLINGS[1], 5, None),
            (3, [1, 2, 3], 4, SAMPLINGS[2], 6, None),
            (4, [1, 2, 3], 5, SAMPLINGS[0], 7, None),
            (9, [4], 3, SAMPLINGS[1], 8, None),
        ],
        2,
        [],
    )
)
@example(
    (
        "tiny-ouro",
        "draft-verify",
        16,  # the leader is dropped while its follower waits
        [(0, [5, 6, 7], 8, SAMPLINGS[2], 9, None), (0, [5, 6, 7], 8, SAMPLINGS[1], 10, None)],
        3,
        [(0, 0)],
    )
)
def test_a_sequence_joining_a_running_batch_is_bitwise_the_sequence_alone(case):
    name, strategy, width, seqs, rows, drops = case
    model = model_for(name)
    got = run_schedule(Decoder(model, CONFIGS[strategy], fixed_width=width), seqs, rows, drops=drops)
    dropped = {i for i, _ in drops}
    alone = Decoder(model, CONFIGS[strategy], fixed_width=width)
    for i, (_, prompt, n, sp, seed, eos) in enumerate(seqs):
        if i in dropped and i not in got:
            continue
        want = alone.generate(prompt, n, sp, seed, eos_token_id=eos, keep_logits=True)
        assert same(got[i], want), f"sequence {i}: {got[i].tokens} vs alone {want.tokens}"
    assert len(got) >= len(seqs) - len(dropped)


def test_needle_control_a_different_seed_is_seen():
    model = model_for()
    sp = SamplingParams(temperature=1.0)
    sched = [(0, [1, 2, 3], 10, sp, 1, None), (2, [1, 2, 3], 10, sp, 2, None)]
    a = run_schedule(Decoder(model, CONFIGS["pipelined"], fixed_width=8), sched, 2)
    other = [sched[0], sched[1][:4] + (3, None)]
    b = run_schedule(Decoder(model, CONFIGS["pipelined"], fixed_width=8), other, 2)
    assert same(a[0], b[0]) and not same(a[1], b[1])


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", ["tiny-raven", "tiny-ouro"])
def test_each_sequence_joining_at_any_step_is_generate_alone_for_every_seed(name, strategy):
    model = model_for(name, dtype=torch.float64)
    dec = Decoder(model, CONFIGS[strategy], max_batch=4)  # normal mode: widths vary with the batch
    sp = SamplingParams(temperature=1.0, top_k=6)
    prompts = [[1, 2, 3], [4], [5, 6, 7, 8, 9, 10], [1, 2, 3]]
    sched = [(k, prompts[k % 4], 1 + k % 6, sp, k, None) for k in range(40)]
    got = run_schedule(dec, sched, rows=3, keep_logits=False)
    alone = Decoder(model, CONFIGS[strategy])
    for k, (_, p, n, s, seed, _eos) in enumerate(sched):
        assert got[k].tokens == alone.generate(p, n, s, seed=seed).tokens, k
    assert len({tuple(r.tokens) for r in got.values()}) > 10  # the seeds mattered


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_garbage_in_every_unowned_slot_changes_nothing(strategy):
    model = model_for("tiny-raven")
    sp = SamplingParams(temperature=1.0, top_k=8)
    sched = [
        (0, [1, 2, 3, 4], 10, sp, 3, None),
        (0, [1, 2, 3, 4], 1, sp, 4, None),  # ends at once: its row is reused
        (1, [1, 2, 3, 4], 6, sp, 5, None),
        (2, [6, 7, 8, 9, 1, 2], 7, sp, 6, None),
        (5, [5], 4, sp, 7, None),
    ]
    want = run_schedule(Decoder(model, CONFIGS[strategy]), sched, 3)
    dirty = Decoder(model, CONFIGS[strategy])
    dirty._step_hook = poisoner(seed=2)
    got = run_schedule(dirty, sched, 3)
    assert all(same(got[i], want[i]) for i in want)
    dirty._step_hook = poisoner(seed=2, hit_committed=True)  # control
    assert not all(same(a, want[i]) for i, a in run_schedule(dirty, sched, 3).items())


def test_a_sequence_dropped_mid_prefill_leaves_its_follower_to_prefill_alone():
    model = model_for()
    dec = Decoder(model, CONFIGS["pipelined"], fixed_width=8)
    batch = ContinuousBatch(dec, 32, rows=2)
    sp = SamplingParams(temperature=1.0)
    first = batch.add([1, 2, 3], 8, sp, 1, keep_logits=True)
    follow = batch.add([1, 2, 3], 8, sp, 2, keep_logits=True)  # waits for first's prefill
    batch.step()
    assert first.prefilling and follow.prefilling and len(batch.prefills.running) == 1
    batch.drop(first)
    assert not batch.prefills.running and len(batch) == 1 and batch.room() == 1
    results = []
    while len(batch):
        results += batch.step()
    assert [h for h, _ in results] == [follow]
    assert follow.stats.prefill_steps == 2 + 5  # two steps waiting, then R = 5 of its own prefill
    want = Decoder(model, CONFIGS["pipelined"], fixed_width=8).generate([1, 2, 3], 8, sp, 2, keep_logits=True)
    assert same(results[0][1], want)


def test_bad_input_is_refused_before_any_change():
    dec = Decoder(model_for(), "pipelined", max_batch=2)
    batch = ContinuousBatch(dec, 16)
    with pytest.raises(LoopcertError, match="capacity of 64"):
        batch.add([1] * 60, 10)
    with pytest.raises(LoopcertError, match="seed"):
        batch.add([1], 3, seed=-1)
    with pytest.raises(LoopcertError, match="max_batch=2"):
        ContinuousBatch(dec, 16, rows=3)
    batch.add([1], 3)
    batch.add([2], 3)
    with pytest.raises(LoopcertError, match="full"):
        batch.add([3], 3)
    assert len(batch) == 2 and batch.room() == 0
    with pytest.raises(LoopcertError, match="fastdec.Decoder"):
        ContinuousBatch(object(), 16)
