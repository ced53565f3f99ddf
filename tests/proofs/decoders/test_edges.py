"""proofs/decoders/edges.py: the boundary mutants' decoder is refdec's greedy without a bug, and
each bug changes tokens only where it lives."""

import pytest
import torch

import refdec
from proofs.decoders.edges import EdgeBugs, EdgeSpec, forward_at
from refdec.errors import LoopcertError

GREEDY = refdec.SamplingParams()


@pytest.fixture(scope="module")
def model():
    cfg = refdec.get_preset("tiny-loopcoder").replace(loop_window_size=16, max_seq_len=96)
    return refdec.LoopedLM(cfg).init_weights(0).to(torch.float64).eval()


def prompt(n, seed=0):
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_forward_at_its_own_positions_is_refdec(model):
    ids = prompt(20)
    assert torch.equal(forward_at(model, ids, range(20), [2])[0], model.depth_logits(ids, [2])[0])


@pytest.mark.parametrize("k", [1, 3])
def test_without_a_bug_it_is_refdec_greedy_past_the_window(model, k):
    p = prompt(10)
    assert EdgeSpec(model, k=k).generate(p, 30, GREEDY, 0) == refdec.generate(model, p, 30)


def test_each_bug_shows_only_where_it_lives(model):
    short = prompt(6)
    ref = refdec.generate(model, short, 6)
    for bugs in (EdgeBugs(window_untrimmable=True), EdgeBugs(page=64), EdgeBugs(lossy_after=40)):
        assert EdgeSpec(model, bugs=bugs).generate(short, 6, GREEDY, 0) == ref  # before its position
    k1 = prompt(4)  # exactly k + 1 tokens
    assert EdgeSpec(model, bugs=EdgeBugs(k1_prompt_verify=True)).generate(
        k1, 3, GREEDY, 0
    ) != refdec.generate(model, k1, 3)
    assert EdgeSpec(model, bugs=EdgeBugs(k1_prompt_verify=True)).generate(prompt(5), 3, GREEDY, 0) == (
        refdec.generate(model, prompt(5), 3)
    )


def test_declares_its_boundaries_but_not_the_lossy_position(model):
    dec = EdgeSpec(model, bugs=EdgeBugs(page=32, block=8, lossy_after=40))
    assert [p for p, _ in dec.boundaries] == [16, 32, 8] and dec.speculation_widths == (3,)
    with pytest.raises(LoopcertError, match="greedily"):
        dec.generate([1, 2], 3, refdec.SamplingParams(temperature=1.0), 0)
