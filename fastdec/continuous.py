"""Continuous batching: sequences join and leave a running batch between engine steps.

`Decoder.generate_batch` decodes the sequences it is given (queueing those beyond its rows) and
returns when all have ended, so a sequence that arrives meanwhile waits for the whole call. A
ContinuousBatch holds one engine of the decoder (`rows` cache rows at one capacity) and a batch
Driver (fastdec.batch): `add` starts a sequence in a free row before the next step, `step`
advances every live sequence by one engine step and returns those that ended, `drop` abandons
one (its row is garbage from then on).

Each sequence is built exactly as generate_batch builds it: the same Sequence class, its own
row, its own span (the capacity it would have decoding alone), its own torch.Generator(seed),
the prompt's prefill taken from a row that holds it (fastdec.strategies.Prefills). The driver
never lets sequences see each other's lanes, RNG or rows, so a sequence's law is generate()'s
whatever joined or left around it and when, and in fixed-width mode its tokens and logits are
generate()'s bit for bit (tests/fastdec/test_continuous.py).

The batch decodes in the decoder's own cache: decode nothing else with that decoder while a
ContinuousBatch of it is in use (a Decoder is not thread-safe either).
"""

from __future__ import annotations

import torch

from fastdec.batch import Driver
from fastdec.decoder import Decoder, GenerateResult, capacity_for
from fastdec.strategies import Prefills, Sequence
from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams
from refdec.validate import check_int


class ContinuousBatch:
    """decoder     a fastdec.Decoder
    n_positions the most positions (prompt + new tokens) of any sequence it will hold
    rows        the most sequences live at once (default: the decoder's max_batch)
    """

    def __init__(self, decoder: Decoder, n_positions: int, rows: int | None = None, timed: bool = False):
        if not isinstance(decoder, Decoder):
            raise LoopcertError(f"decoder must be a fastdec.Decoder, got {type(decoder).__name__}")
        n_positions = check_int("n_positions", n_positions, 1)
        rows = decoder.max_batch if rows is None else check_int("rows", rows, 1)
        if rows > decoder.max_batch:
            raise LoopcertError(f"rows={rows} exceed the decoder's max_batch={decoder.max_batch}")
        self.decoder = decoder
        self.engine = decoder.engine(n_positions, rows)
        self.capacity, self.rows = self.engine.capacity, rows
        decoder._prefills[(self.engine.capacity, self.engine.rows)].clear()  # its rows get rewritten
        self.prefills = Prefills()
        self.driver = Driver(self.engine, self.prefills, rows, timed, decoder._step_hook)

    def __len__(self) -> int:
        """Live sequences."""
        return len(self.driver.active) + len(self.driver.waiting)

    def fits(self, prompt_len: int, max_new_tokens: int) -> bool:
        """Whether a sequence of this size fits this batch's capacity."""
        return capacity_for(prompt_len + max_new_tokens) <= self.capacity

    def room(self) -> int:
        """Sequences that can join before the next step."""
        return self.rows - len(self)

    @torch.no_grad()
    def add(
        self,
        prompt,
        max_new_tokens: int,
        sampling: SamplingParams = SamplingParams(),
        seed: int = 0,
        eos_token_id: int | None = None,
        keep_logits: bool = False,
    ) -> Sequence:
        """Start a sequence before the next step; -> its handle (for `step`'s results and `drop`).
        Validated as generate() validates: a LoopcertError names the bad value, and a sequence
        that does not fit (capacity, rows) is refused before anything changes."""
        dec = self.decoder
        ids, news, sps, seeds, eos = dec.check_batch([prompt], max_new_tokens, sampling, [seed], eos_token_id)
        p, n = ids[0], news[0]
        if not self.fits(len(p), n):
            raise LoopcertError(
                f"a prompt of {len(p)} tokens + max_new_tokens={n} exceeds this batch's "
                f"capacity of {self.capacity} positions"
            )
        if not self.room():
            raise LoopcertError(f"the batch is full ({self.rows} sequences)")
        seq = dec.sequence(self.engine, self.prefills, p, n, sps[0], seeds[0], eos, keep_logits)
        self.driver.add(seq)
        return seq

    @torch.no_grad()
    def step(self) -> list[tuple[Sequence, GenerateResult]]:
        """One engine step of every live sequence; -> (handle, result) of those that ended."""
        if self.driver.active:
            ended = self.driver.step()
        else:  # only sequences that ended as they started
            ended, self.driver.ended = self.driver.ended, []
        return [(s, GenerateResult(s.tokens, s.stats, s.target_logits)) for s in ended]

    def drop(self, seq: Sequence) -> None:
        """Abandon a live sequence (its client went away); the others are not affected."""
        self.driver.drop(seq)
