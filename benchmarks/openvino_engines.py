"""OpenVINO GenAI beside fastdec on one Ouro checkpoint: greedy tokens per second at batch 1,
interleaved rounds, the median of each (docs/measurements.md, "OpenVINO GenAI on Ouro").

`tox -e openvino`'s engines table (reports/out/openvino/engines.md) measures each engine once, one
after the other; on shared cores a load spike lands on whichever row runs then. Here every round
measures every engine (speed.engines.rates: 4 prompts of 24 tokens, 32 new tokens, one
warm-up), and the table gives the median round and the range. Each engine's greedy tokens are
first compared with refdec's on 4 prompts. Checkpoints: `tiny` (tiny-ouro, seed 0) or `mid` (the
same family at d 512, 8 heads of 64, 4 layers, vocab 4096, R 4, random weights, seed 0), written by
refdec in Ouro's published layout; "draft 1 loop" is the same folder with total_ut_steps = 1 (the
self-speculation fastdec does, drafts from fewer loops, run by GenAI's draft-model pipeline). Not
a test: a measurement, run in the openvino environment:

    OMP_NUM_THREADS=1 .tox/openvino/bin/python benchmarks/openvino_engines.py tiny --rounds 5
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
from pathlib import Path

import refdec
from fastdec import Decoder
from proofs.decoders.openvino_decoder import decoder_for, openvino_versions
from proofs.decoders.protocol import tokens_of
from refdec.checkpoints import write_published
from refdec.sampling import SamplingParams
from speed.engines import NEW_TOKENS, prompts, rates

GREEDY = SamplingParams()


def config(which: str):
    tiny = refdec.get_preset("tiny-ouro")
    if which == "tiny":
        return tiny
    return dataclasses.replace(
        tiny,
        name="mid-ouro",
        d_model=512,
        n_heads=8,
        n_kv_heads=8,
        head_dim=64,
        intermediate_size=1536,
        n_core=4,
        vocab_size=4096,
        max_seq_len=512,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint", choices=("tiny", "mid"))
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    cfg = config(args.checkpoint)
    root = Path(tempfile.mkdtemp(prefix="loopcert-ov-engines-"))
    folder = write_published(refdec.LoopedLM(cfg).init_weights(0), root / cfg.name)
    shallow = write_published(refdec.LoopedLM(cfg).init_weights(0), root / "draft-1-loop")
    raw = json.loads((shallow / "config.json").read_text())
    (shallow / "config.json").write_text(json.dumps(raw | {"total_ut_steps": 1}))
    model = refdec.load_model(str(folder))
    V = cfg.vocab_size

    engines, drafts = {}, {}
    for s in ("autoregressive", "draft-verify", "pipelined"):
        d = Decoder(model, s)
        engines[f"fastdec {s}"] = lambda b, d=d: [
            tokens_of(r) for r in d.generate_batch(b, NEW_TOKENS, GREEDY, list(range(len(b))))
        ]
    specs = {
        "OpenVINO PA": "openvino:threads=1",
        "OpenVINO SDPA": "openvino:backend=sdpa,threads=1",
        "OpenVINO prompt lookup (3)": "openvino:spec=prompt_lookup,threads=1",
        "OpenVINO draft 1 loop (3)": f"openvino:draft={shallow},threads=1",
        "OpenVINO draft self (3)": "openvino:draft=self,threads=1",
    }
    for label, spec in specs.items():
        d = decoder_for(spec, model)
        engines[label] = lambda b, d=d: [d.generate(p, NEW_TOKENS, GREEDY, 0) for p in b]
        if d.spec.draft is not None:
            drafts[label] = d

    ps = prompts(V)[:4]
    want = [refdec.generate(model, p, NEW_TOKENS) for p in ps]
    for label, f in engines.items():
        equal = [list(o) == w for o, w in zip(f(ps), want)]
        print(f"{label}: greedy equal to refdec on {sum(equal)} of {len(equal)} prompts")
    for d in drafts.values():
        d.stats = type(d.stats)()
    got = {k: [] for k in engines}
    for _ in range(args.rounds):
        for label, f in engines.items():
            got[label].append(rates(f, V, batches=(1,))[1])
    base = statistics.median(got["fastdec autoregressive"])
    print(
        f"\n{cfg.name}: d {cfg.d_model}, {cfg.n_core} layers, R {cfg.recurrence}, vocab {V}; "
        f"{openvino_versions()}; batch 1, {NEW_TOKENS} new tokens, "
        f"median of {args.rounds} interleaved rounds\n"
    )
    print("| engine | tok/s b=1 | x AR b=1 | range | draft acceptance |\n|---|---|---|---|---|")
    for label, v in got.items():
        m = statistics.median(v)
        a = drafts[label].stats.acceptance_rate if label in drafts else None
        acceptance = "-" if a is None else f"{a:.2f}"
        print(f"| {label} | {m:.0f} | {m / base:.2f} | {min(v):.0f}-{max(v):.0f} | {acceptance} |")


if __name__ == "__main__":
    main()
