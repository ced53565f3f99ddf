"""`loopcert speculate`: the fast self-speculative decoder (fastdec), with its stats."""

from __future__ import annotations

from fastdec import STRATEGIES, Decoder
from loopcert.commands.common import (
    add_model_arguments,
    add_sampling_arguments,
    decode_text,
    load_from_args,
    prompt_from_args,
    sampling_from_args,
)
from refdec.errors import LoopcertError

HELP = "decode with the fast self-speculative decoder and print its stats"
GATE_CHOICES = {"on": True, "off": False, "inverted": "inverted"}


def add_arguments(p) -> None:
    add_model_arguments(p)
    add_sampling_arguments(p)
    p.add_argument("--strategy", default="draft-verify", choices=STRATEGIES)
    p.add_argument("--draft-loops", type=int, default=2, help="draft depth d1")
    p.add_argument("--verify-loops", type=int, default=None, help="target depth R (default: the model's)")
    p.add_argument("--second-loops", type=int, default=None, help="LoopSpec second-proposal depth d2")
    p.add_argument("--gate", choices=sorted(GATE_CHOICES), default="on", help="second-proposal gate")
    p.add_argument("--draft-ahead", type=int, default=4, help="drafts per round (draft-verify)")
    p.add_argument("--rewind-L", dest="rewind_depth", type=int, default=None,
                   help="rewind telemetry depth (adaptive-verify: its verify depth)")
    p.add_argument("--fixed-width", type=int, default=None, help="run every engine call at this width")
    p.add_argument("--no-cuda-graphs", action="store_true", help="eager steps on CUDA")
    p.add_argument("--eos", type=int, default=None, help="EOS token id")


def format_value(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, dict):
        return ",".join(f"{k}={n}" for k, n in v.items()) or "-"
    return "-" if v is None else str(v)


def run(args) -> int:
    if args.strategy == "autoregressive" and args.second_loops is not None:
        raise LoopcertError("--second-loops needs --strategy pipelined")
    model = load_from_args(args)
    prompt = prompt_from_args(args, model)
    dec = Decoder(model, args.strategy, draft_depth=args.draft_loops, second_depth=args.second_loops,
                  gate=GATE_CHOICES[args.gate], draft_ahead=args.draft_ahead, depth=args.verify_loops,
                  rewind_depth=args.rewind_depth, device=args.device, fixed_width=args.fixed_width,
                  cuda_graphs=False if args.no_cuda_graphs else None)
    res = dec.generate(prompt, args.max_new_tokens, sampling_from_args(args), seed=args.seed,
                       eos_token_id=args.eos)
    text = decode_text(model, res.tokens)
    print(text if text is not None else " ".join(map(str, res.tokens)))
    print(f"lossless: {dec.lossless}")
    for key, value in res.stats.as_dict().items():
        print(f"{key}: {format_value(value)}")
    return 0
