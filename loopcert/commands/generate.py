"""`loopcert generate`: the reference decoder (refdec), slow and exact."""

from __future__ import annotations

from loopcert.commands.common import (
    add_model_arguments,
    add_sampling_arguments,
    decode_text,
    load_from_args,
    prompt_from_args,
    sampling_from_args,
)
from refdec.decode import generate

HELP = "decode with the reference decoder (no cache, the oracle)"


def add_arguments(p) -> None:
    add_model_arguments(p)
    add_sampling_arguments(p)
    p.add_argument("--depth", type=int, default=None, help="target recurrence (default: the model's R)")
    p.add_argument("--eos", type=int, default=None, help="EOS token id (default: the checkpoint's)")


def run(args) -> int:
    model = load_from_args(args)
    prompt = prompt_from_args(args, model)
    ids = generate(
        model,
        prompt,
        args.max_new_tokens,
        sampling_from_args(args),
        seed=args.seed,
        depth=args.depth,
        eos_token_id=args.eos if args.eos is not None else getattr(model, "eos_token_id", None),
    )
    text = decode_text(model, ids)
    print(text if text is not None else " ".join(map(str, ids)))
    return 0
