"""The field's newer bug classes as mutants (proofs/checks/mutation.py). Each dies
in the quick plan's mutation check by the check named here, on the model where its class lives,
and its lossless twin (the control, or the same decoder with the bug off) passes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from pytest import approx

from proofs.checks.mutation import CASES, LIBRARY, PROMPT, MutantRun
from proofs.checks.seed_invariance import check_seed_invariance
from proofs.decoders.batch_stream import BatchStreams
from proofs.decoders.penalty_rollback import PenaltyRollback
from proofs.decoders.specref import SpecRef
from proofs.run.plan import QUICK
from proofs.stats.chisquare import chisquare_gof
from proofs.stats.exact_laws import Oracle
from refdec import load_model
from refdec.sampling import SamplingParams

BY_ID = {m.id: m for m in LIBRARY}
KILLED_BY = {  # mutant -> (the check that must reject it, its lossless twin in the library or None)
    "window-trimmed-per-token": ({"greedy_depth"}, "control-edge-spec"),
    "penalty-counts-rejected-drafts": ({"sampling"}, "control-penalty-state-rolled-back"),
    "one-stream-for-the-batch": ({"seed_invariance"}, "control-one-stream-per-row"),
    "ratio-on-input-token": ({"sampling"}, None),
    "rejection-handled-one-step-late": ({"greedy", "sampling"}, None),
}
PENALTIES = BY_ID["penalty-counts-rejected-drafts"].case


@pytest.fixture(scope="module")
def run():
    """The quick plan's mutant run (its target, depth and seed 0), shared by the rows below."""
    return MutantRun(QUICK.target, 0, depth=(QUICK.depth_context, QUICK.depth_cap))


@pytest.fixture(scope="module")
def oracle():
    return Oracle(load_model("tiny-ouro", dtype=torch.float64))


@pytest.mark.parametrize("mutant_id", list(KILLED_BY))
def test_each_new_mutant_dies_in_the_quick_mutation_check(run, mutant_id):
    m = BY_ID[mutant_id]
    row = run.row(m)
    want, _ = KILLED_BY[mutant_id]
    assert row["ok"] and row["rejected"] and set(row["rejected_by"]) == want, row
    if m.case is not None:  # a sampled class: the quick plan's power was promised to see it
        assert row["promised"] and row["power_margin"] > 1 and row["tv"] > 0.05


@pytest.mark.parametrize("mutant_id", list(KILLED_BY))
def test_each_new_mutants_lossless_twin_passes(run, mutant_id):
    """The control of the class (or the mutant with its bug switched off) is not rejected, on the
    same model and the same checks: the test above fails on a decoder without the bug."""
    m = BY_ID[mutant_id]
    _, control = KILLED_BY[mutant_id]
    if control is not None:
        twin = BY_ID[control]
        assert twin.model == m.model and twin.cls == m.cls and twin.batch == m.batch
        assert twin.case == m.case or twin.case is None
        assert twin.edge is None or twin.edge == {"row_windows": True}  # the bug's path, bug off
    else:
        twin = replace(m, id=f"{m.id}-twin", specref={"d1": m.specref["d1"]})
    row = run.row(twin)
    assert not row["rejected"] and row["rejected_by"] == [], row
    assert row["tv"] is None or row["tv"] < 1e-9


# -- the pieces: each mutant's exact law is its sampler's, and each control is lossless -------------


# the closed-form laws of ratio-on-input-token and rejection-handled-one-step-late are checked
# against their sampler with the other bugs' (tests/proofs/decoders/test_specref.py FIELD)


@pytest.mark.parametrize("rolled_back", [True, False])
def test_penalty_rollback_sequence_law_matches_its_decoder(oracle, rolled_back):
    """Differential over 2 tokens (the second's penalties see the first step's rejected draft):
    the enumerated law vs 3000 decodes; rolled back, the law is SpecRef's lossless one."""
    s = next(c for c in CASES if c.name == PENALTIES).sampling
    dec = PenaltyRollback(oracle, d1=1, rolled_back=rolled_back)
    law = dec.sequence_law(PROMPT, 2, s)
    assert sum(law.values()) == approx(1.0)
    seqs = sorted(law)
    index = {q: i for i, q in enumerate(seqs)}
    counts = np.zeros(len(seqs), dtype=np.int64)
    for seed in range(3000):
        counts[index[tuple(dec.generate(list(PROMPT), 2, s, seed))]] += 1
    assert chisquare_gof(counts, np.array([law[q] for q in seqs]))["p_value"] > 1e-4
    exact = SpecRef(oracle, d1=oracle.R).sequence_law(PROMPT, 2, s)
    tv = 0.5 * sum(abs(law.get(q, 0.0) - exact.get(q, 0.0)) for q in set(law) | set(exact))
    assert tv < 1e-12 if rolled_back else tv > 0.05


def test_one_stream_per_row_is_each_row_alone_and_one_shared_stream_is_not(oracle):
    s = SamplingParams(temperature=1.0)
    prompts, seeds = [list(PROMPT), [4, 7, 11, 2], [0, 5]], [5, 6, 7]
    own, shared = BatchStreams(oracle, d1=1), BatchStreams(oracle, d1=1, shared=True)
    alone = [own.generate(p, 6, s, seed) for p, seed in zip(prompts, seeds, strict=True)]
    assert own.generate_batch(prompts, 6, s, seeds) == alone
    got = shared.generate_batch(prompts, 6, s, seeds)
    assert got[0] != alone[0] or got[1:] != alone[1:]  # its neighbours' draws move a row
    for dec, passes in ((own, True), (shared, False)):
        r = check_seed_invariance("seed_invariance", dec, "x", PROMPT, prompts[1:], 6, s, (0, 1, 2))
        assert r.passed is passes and r.details.seed_sensitive


def test_the_per_row_window_at_the_window_is_refdecs_and_wider_is_not():
    """window_per_call's mask (proofs.decoders.edges.WidenedPasses): every row at the model's window
    is refdec's forward; one row a key wider moves that row's logits and no earlier row's."""
    from proofs.checks.mutation import loopcoder64
    from proofs.decoders.edges import forward_at

    model = loopcoder64()
    W, T = model.cfg.loop_window_size, 80
    ids = [(7 * i + 3) % model.cfg.vocab_size for i in range(T)]
    plain = forward_at(model, ids, range(T), [model.cfg.recurrence])[0]
    at_window = forward_at(model, ids, range(T), [model.cfg.recurrence], [W] * T)[0]
    assert torch.equal(plain, at_window) or torch.allclose(plain, at_window, atol=1e-12, rtol=0)
    wider = forward_at(model, ids, range(T), [model.cfg.recurrence], [W] * (T - 1) + [W + 1])[0]
    assert torch.allclose(wider[:-1], plain[:-1], atol=1e-12, rtol=0)
    assert (wider[-1] - plain[-1]).abs().max() > 1e-6
