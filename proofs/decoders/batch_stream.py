"""Random streams across a batch: SpecRef's lossless decoder given a `generate_batch` that draws
each row from its own seed's stream, or (the mutant) every row from one stream (a mutant and its
control in proofs/checks/mutation.py).

The class of bug (found in the field; TensorRT-LLM #19487, where rows that set no seed share one
generator, and vLLM Model Runner V2's one stream for the batch): the batch steps its rows
together, row after row at each step, and with `shared` all of them draw from
torch.Generator(seeds[0]). Each row's law is still p_R (every draw takes fresh uniforms), so the
sampling checks cannot see it; a row's tokens depend on the rows beside it, which the
seed-invariance check (proofs/checks/seed_invariance.py) sees. With `shared` False, row i is
`generate(prompts[i], ..., seeds[i])` token for token, whatever else the batch holds.
"""

from __future__ import annotations

import torch

from proofs.decoders.specref import SpecRef
from refdec.decode import check_generate_args
from refdec.sampling import SamplingParams


class BatchStreams(SpecRef):
    """SpecRef (lossless, at d1) with a generate_batch of one stream per row, or one shared."""

    def __init__(self, model_or_oracle, d1: int, shared: bool = False):
        super().__init__(model_or_oracle, d1)
        self.shared = shared

    def generate_batch(
        self, prompts, max_new_tokens: int, sampling: SamplingParams, seeds
    ) -> list[list[int]]:
        rows = [
            check_generate_args(self.model, p, max_new_tokens, sampling, s, None)[0]
            for p, s in zip(prompts, seeds, strict=True)
        ]
        if self.shared:
            gens = [torch.Generator().manual_seed(int(seeds[0]))] * len(rows)  # one stream, aliased
        else:
            gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
        stops = sampling.stop_ids()
        new: list[list[int]] = [[] for _ in rows]
        contexts = [list(r) for r in rows]
        for i in range(max_new_tokens):
            for r, gen in enumerate(gens):  # row after row at each step, as one batched sampler
                if new[r] and new[r][-1] in stops:
                    continue
                y, c = self.step(contexts[r], sampling, gen, i)
                new[r].append(y)
                contexts[r].append(c)
        return new
