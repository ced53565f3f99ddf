"""`loopcert speculate`: the fast self-speculative decoder (fastdec), with its stats.

Flags are named like fastdec.DecodeConfig's fields; the seed's names (--draft-loops,
--verify-loops, --second-loops, --rewind-L) stay accepted as aliases.
"""

from __future__ import annotations

from loopcert.commands.common import (
    add_decoder_arguments,
    add_model_arguments,
    add_sampling_arguments,
    config_from_args,
    decode_text,
    decoder_from_args,
    load_from_args,
    prompts_from_args,
    sampling_from_args,
)

HELP = "decode with the fast self-speculative decoder and print its stats"


def add_arguments(p) -> None:
    add_model_arguments(p)
    add_sampling_arguments(p, several=True)
    add_decoder_arguments(p)
    p.add_argument("--eos", type=int, default=None, help="EOS token id")


def format_value(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, dict):
        return ",".join(f"{k}={n}" for k, n in v.items()) or "-"
    return "-" if v is None else str(v)


def run(args) -> int:
    """One prompt: its text, then its stats. Several (--prompt repeated, --prompts-file): one
    batch (Decoder.generate_batch, sequence i seeded --seed + i), each block headed `# i`."""
    config_from_args(args)  # a bad setting is reported before the model loads
    model = load_from_args(args)
    prompts = prompts_from_args(args, model)
    dec = decoder_from_args(args, model, max_batch=len(prompts))
    seeds = [args.seed + i for i in range(len(prompts))]
    results = dec.generate_batch(
        prompts, args.max_new_tokens, sampling_from_args(args), seeds, eos_token_id=args.eos
    )
    for i, res in enumerate(results):
        if len(results) > 1:
            print(f"# {i}")
        text = decode_text(model, res.tokens)
        print(text if text is not None else " ".join(map(str, res.tokens)))
        print(f"lossless: {dec.lossless}")
        for key, value in res.stats.as_dict().items():
            print(f"{key}: {format_value(value)}")
    return 0
