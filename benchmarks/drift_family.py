"""The drift family through the quick plan's per-position checks, one model at a time
(docs/measurements.md, "Martingale evidence and the drift family"):

    OMP_NUM_THREADS=1 python benchmarks/drift_family.py tiny-ouro [DECODER ...]

Each decoder of `proofs.decoders.late_drift.family` (exact for 40 tokens after the model's first
prompt, then wrong; and its lossless twin) over fastdec pipelined at the model's default depths is
judged by `check_positions_of` with the quick plan's `PositionsPlan`: under the plan's own law (T=1)
and each quick sampling case whose parameters the decoder declares (stop tokens removed, as certify
runs them). A lossy decoder stops at its first failed law. One line per decoder: the wall time, and
per law its verdict, samples drawn / planned and what decided it."""

from __future__ import annotations

import sys
import time
from dataclasses import replace

import torch

import refdec
from fastdec import DecodeConfig, Decoder
from proofs.checks.positions import check_positions_of
from proofs.decoder_attributes import declared_sampling
from proofs.decoders.late_drift import family
from proofs.prompts import model_prompts
from proofs.run.plan import QUICK, QUICK_CASES
from refdec.sampling import TEMPERATURE_FIRST
from speed.settings import default_depths


def main(name: str, only: list[str]) -> None:
    torch.set_num_threads(1)
    m64 = refdec.load_model(name, dtype=torch.float64)
    m32 = refdec.load_model(name, dtype=torch.float32)
    d1, d2 = default_depths(m32.cfg.recurrence)
    inner = Decoder(m32, DecodeConfig("pipelined", draft_depth=d1, second_depth=d2))
    prompt = list(model_prompts(m64, name, 1)[0])
    plan = QUICK.positions
    laws = [None] + [(c[0], replace(c[1], stop_token_ids=()), plan.case_drift) for c in QUICK_CASES]
    for label, dec in family(inner, len(prompt)).items():
        if only and label not in only:
            continue
        fields = declared_sampling(dec).fields
        t0, verdicts = time.time(), []
        for law in laws:
            if law is not None and set(law[1].engine_fields()) - set(fields):
                continue  # not declared: the quick plan leaves the case out
            r = check_positions_of(
                "positions", dec, m64, prompt, plan, TEMPERATURE_FIRST, None, 0, name, label, None, None, law
            )
            d = r.details
            tag = "PASS" if r.passed else ("INCOMPLETE" if r.incomplete else "FAIL")
            why = d.martingale_rejected[:1] or d.rejected[:1] or d.no_power[:1]
            if d.impossible:
                why = (f"impossible: {d.first_impossible}",)
            verdicts.append(f"{law[0] if law else 'T=1'}: {tag} {d.samples}/{d.planned_samples} {why}")
            if not r.passed and label != "twin":
                break
        print(f"{name:15s} {label:28s} {time.time() - t0:6.1f}s | " + " | ".join(verdicts), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
