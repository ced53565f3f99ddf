"""`loopcert speculate`: the fast self-speculative decoder (fastdec), with its stats.

Flags are named like fastdec.DecodeConfig's fields; the seed's names (--draft-loops,
--verify-loops, --second-loops, --rewind-L) stay accepted as aliases.
"""

from __future__ import annotations

from fastdec import STRATEGIES, DecodeConfig, Decoder
from loopcert.commands.common import (
    add_model_arguments,
    add_sampling_arguments,
    decode_text,
    load_from_args,
    prompts_from_args,
    sampling_from_args,
)

HELP = "decode with the fast self-speculative decoder and print its stats"
GATE_CHOICES = {"on": True, "off": False, "inverted": "inverted"}


def add_arguments(p) -> None:
    add_model_arguments(p)
    add_sampling_arguments(p, several=True)
    p.add_argument("--strategy", default="draft-verify", choices=STRATEGIES)
    p.add_argument("--draft-depth", "--draft-loops", dest="draft_depth", type=int, default=None,
                   help="draft depth d1 (default: max(1, round(R/16)))")
    p.add_argument("--depth", "--verify-loops", dest="depth", type=int, default=None,
                   help="target depth R (default: the model's)")
    p.add_argument("--second-depth", "--second-loops", dest="second_depth", type=int, default=None,
                   help="LoopSpec second-proposal depth d2 (pipelined)")
    p.add_argument("--gate", choices=sorted(GATE_CHOICES), default="on", help="second-proposal gate")
    p.add_argument("--draft-ahead", type=int, default=4, help="drafts per round (draft-verify)")
    p.add_argument("--rewind-depth", "--rewind-L", dest="rewind_depth", type=int, default=None,
                   help="rewind telemetry depth (adaptive-verify: its verify depth)")
    p.add_argument("--fixed-width", type=int, default=None, help="run every engine call at this width")
    p.add_argument("--no-cuda-graphs", action="store_true", help="eager steps on CUDA")
    p.add_argument("--eos", type=int, default=None, help="EOS token id")


def config_from_args(args) -> DecodeConfig:
    return DecodeConfig(args.strategy, depth=args.depth, draft_depth=args.draft_depth,
                        second_depth=args.second_depth, gate=GATE_CHOICES[args.gate],
                        draft_ahead=args.draft_ahead, rewind_depth=args.rewind_depth)


def format_value(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, dict):
        return ",".join(f"{k}={n}" for k, n in v.items()) or "-"
    return "-" if v is None else str(v)


def run(args) -> int:
    """One prompt: its text, then its stats. Several (--prompt repeated, --prompts-file): one
    batch (Decoder.generate_batch, sequence i seeded --seed + i), each block headed `# i`."""
    config = config_from_args(args)
    model = load_from_args(args)
    prompts = prompts_from_args(args, model)
    dec = Decoder(model, config, device=args.device, fixed_width=args.fixed_width,
                  cuda_graphs=False if args.no_cuda_graphs else None, max_batch=max(len(prompts), 1))
    seeds = [args.seed + i for i in range(len(prompts))]
    results = dec.generate_batch(prompts, args.max_new_tokens, sampling_from_args(args), seeds,
                                 eos_token_id=args.eos)
    for i, res in enumerate(results):
        if len(results) > 1:
            print(f"# {i}")
        text = decode_text(model, res.tokens)
        print(text if text is not None else " ".join(map(str, res.tokens)))
        print(f"lossless: {dec.lossless}")
        for key, value in res.stats.as_dict().items():
            print(f"{key}: {format_value(value)}")
    return 0
