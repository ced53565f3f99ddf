"""Sampler state and rejected drafts: a speculative decoder whose penalty history is, or is not,
rolled back when a draft is rejected (a mutant and its control in proofs/checks/mutation.py).

The class of bug (found in the field): an engine keeps per-sequence sampler state beside the KV
cache (llama.cpp's penalty ring, grammar and sampler chain), feeds it each drafted token as it is
proposed, and must roll it back with the cache when the draft is rejected (llama.cpp's
speculative checkpoints restore the cache; state the restore leaves out keeps the rejected
tokens). Here the repetition, frequency and presence penalties count the tokens of `history`:
the tokens emitted, plus, when `rolled_back` is False, every rejected draft, in order. The model
itself sees the emitted tokens only (its cache is rolled back).

One LoopSpec proposal per token (d1, no second proposal, SpecRef's lossless step): x1 ~ q1,
accepted iff u < p_R(x1)/q1(x1), else the residual p_R (-) q1, where q1 and p_R both carry the
penalties of `history`. The law of the token is then p_R under that history, so with
`rolled_back` it is refdec's law exactly; without, a rejection changes the penalties of every
later position. `sequence_law` enumerates it (states: emitted tokens, history).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from proofs.decoders.specref import SpecRef, _ratio, _shrink
from refdec.errors import LoopcertError
from refdec.sampling import Context, SamplingParams, draw_uniform, sample_from, transform


class PenaltyRollback(SpecRef):
    """SpecRef's lossless step at d1 with penalties that count `history` (the module docstring)."""

    def __init__(self, model_or_oracle, d1: int, rolled_back: bool = True):
        super().__init__(model_or_oracle, d1)
        self.rolled_back = rolled_back
        self._hist_laws: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def hist_laws(
        self, context: Sequence[int], prompt_len: int, history: Sequence[int], s: SamplingParams
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(p_R, q1) at `context`, the processors seeing `history` as the output so far."""
        key = (tuple(context), prompt_len, tuple(history), s)
        if key not in self._hist_laws:
            o = self.oracle
            ctx = Context.of(context[:prompt_len], history) if s.needs_context else None
            logits = o.logits(context)
            target = transform(logits[o.R - 1], s, ctx)
            q1 = transform(logits[self.d1 - 1], self._draft_params(s), ctx)
            self._hist_laws[key] = target, q1
        return self._hist_laws[key]

    def decode(self, ids, depth, max_new_tokens, sampling, gen, eos_token_id) -> list[int]:
        if sampling.greedy:  # penalties never reach a greedy step here: SpecRef's greedy path
            return super().decode(ids, depth, max_new_tokens, sampling, gen, eos_token_id)
        context, history, new = list(ids), [], []
        stops = sampling.stop_ids(eos_token_id)
        for _ in range(max_new_tokens):
            target, q1 = self.hist_laws(context, len(ids), history, sampling)
            x1 = sample_from(q1, draw_uniform(gen))
            if draw_uniform(gen) < _ratio(target, q1, x1):
                y = x1
            else:
                y = sample_from(_shrink(target, q1, normalise=True), draw_uniform(gen))
                if not self.rolled_back:
                    history.append(x1)  # the rejected draft stays in the penalty state
            history.append(y)
            context.append(y)
            new.append(y)
            if y in stops:
                break
        return new

    def step_law(self, context: Sequence[int], s: SamplingParams, position: int = 0) -> torch.Tensor:
        raise LoopcertError("PenaltyRollback's state is its history: use sequence_law")

    def sequence_law(self, prompt: Sequence[int], n: int, s: SamplingParams) -> dict[tuple[int, ...], float]:
        """Exact law of the first n emitted tokens (ended at a stop token, as SpecRef's)."""
        prompt = tuple(prompt)
        stops = s.stop_ids()
        # without a penalty window the processors count tokens, in any order: states merge
        canon = (lambda h: tuple(sorted(h))) if s.penalty_window is None else tuple
        states: dict[tuple[tuple[int, ...], tuple[int, ...]], float] = {((), ()): 1.0}
        for i in range(n):
            nxt: dict = {}
            if i == n - 1:  # no position after the last: its history is never read
                canon = lambda h: ()  # noqa: E731

            def add(key, p, nxt=nxt):
                nxt[key] = nxt.get(key, 0.0) + p

            for (emitted, history), p in states.items():
                if emitted and emitted[-1] in stops:
                    add((emitted, history), p)
                    continue
                target, q1 = self.hist_laws(prompt + emitted, len(prompt), history, s)
                residual = _shrink(target, q1, normalise=True)
                residual = residual / residual.sum()
                for x, qx in enumerate(q1.tolist()):
                    if qx <= 0:
                        continue
                    a = min(1.0, _ratio(target, q1, x))
                    if a > 0:
                        add((emitted + (x,), canon(history + (x,))), p * qx * a)
                    if a < 1:
                        ghost = () if self.rolled_back else (x,)
                        for y, ry in enumerate(residual.tolist()):
                            if ry > 0:
                                add((emitted + (y,), canon(history + ghost + (y,))), p * qx * (1 - a) * ry)
            states = nxt
        law: dict[tuple[int, ...], float] = {}
        for (emitted, _), p in states.items():
            law[emitted] = law.get(emitted, 0.0) + p
        return law
