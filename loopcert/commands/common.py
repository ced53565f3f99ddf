"""Arguments shared by subcommands: model, device, dtype, prompt, sampling."""

from __future__ import annotations

import torch

from refdec.errors import LoopcertError
from refdec.io import load_model, parse_dtype
from refdec.sampling import SamplingParams


def add_model_arguments(p, default_model: str = "tiny-raven") -> None:
    p.add_argument("model", nargs="?", default=default_model,
                   help=f"preset name or model folder (default: {default_model})")
    p.add_argument("--seed-weights", type=int, default=0, help="weights seed for a preset")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", default="float32", help="float32, float64, bfloat16, float16")


def add_sampling_arguments(p, several: bool = False) -> None:
    """several: --prompt may repeat, and --prompts-file gives one text prompt per line."""
    if several:
        p.add_argument("--prompt", action="append", help="text prompt (byte-level or tokenizer.json "
                       "models); repeat it to decode several prompts as one batch")
        p.add_argument("--prompts-file", default=None, help="one text prompt per line, decoded as one batch")
    else:
        p.add_argument("--prompt", help="text prompt (byte-level or tokenizer.json models)")
    p.add_argument("--prompt-ids", type=int, nargs="+", help="prompt as token ids")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=0, help="sampling seed")


def check_device(device: str) -> str:
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError, ValueError):
        kind = None
    if kind not in ("cpu", "cuda"):
        raise LoopcertError(f"--device must be cpu or cuda[:N], got {device!r}")
    if kind == "cuda" and not torch.cuda.is_available():
        raise LoopcertError(f"--device {device!r} requested but CUDA is not available")
    return device


def load_from_args(args):
    check_device(args.device)
    model = load_model(args.model, seed=args.seed_weights, dtype=parse_dtype(args.dtype))
    return model.to(args.device)


def sampling_from_args(args) -> SamplingParams:
    return SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)


def prompt_from_args(args, model) -> list[int]:
    """--prompt-ids as given; --prompt through the model's tokenizer (bytes when it has none)."""
    if args.prompt_ids is not None and args.prompt is not None:
        raise LoopcertError("give --prompt or --prompt-ids, not both")
    if args.prompt_ids is not None:
        return list(args.prompt_ids)
    text = args.prompt if args.prompt is not None else "def "
    return encode_text(model, text)


def prompts_from_args(args, model) -> list[list[int]]:
    """Every prompt of --prompt (repeatable), --prompts-file and --prompt-ids, in that order;
    "def " when none is given."""
    texts = list(args.prompt or [])
    if args.prompts_file is not None:
        try:
            with open(args.prompts_file, encoding="utf-8") as f:
                texts += [line.rstrip("\n") for line in f if line.strip()]
        except OSError as e:
            raise LoopcertError(f"cannot read --prompts-file {args.prompts_file!r}: {e.strerror}") from None
    out = [encode_text(model, t) for t in texts]
    if args.prompt_ids is not None:
        out.append(list(args.prompt_ids))
    return out or [encode_text(model, "def ")]


def encode_text(model, text: str) -> list[int]:
    tok = getattr(model, "tokenizer", None)
    if tok is not None:
        return tok.encode(text)
    if model.cfg.vocab_size < 256:
        raise LoopcertError(
            f"model {model.cfg.name!r} has vocab_size={model.cfg.vocab_size} and no tokenizer: "
            "use --prompt-ids"
        )
    return list(text.encode("utf-8"))


def decode_text(model, ids: list[int]) -> str | None:
    tok = getattr(model, "tokenizer", None)
    if tok is not None:
        return tok.decode(ids)
    if model.cfg.vocab_size < 256:
        return None
    return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")



GATE_CHOICES = {"on": True, "off": False, "inverted": "inverted"}


def add_decoder_arguments(p, default_strategy: str = "draft-verify") -> None:
    """fastdec.DecodeConfig's fields and the Decoder's run options (speculate, serve). The seed's
    names (--draft-loops, --verify-loops, --second-loops, --rewind-L) stay accepted as aliases."""
    from fastdec import STRATEGIES

    p.add_argument("--strategy", default=default_strategy, choices=STRATEGIES)
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


def config_from_args(args):
    from fastdec import DecodeConfig

    return DecodeConfig(args.strategy, depth=args.depth, draft_depth=args.draft_depth,
                        second_depth=args.second_depth, gate=GATE_CHOICES[args.gate],
                        draft_ahead=args.draft_ahead, rewind_depth=args.rewind_depth)


def decoder_from_args(args, model, max_batch: int = 1):
    """The Decoder add_decoder_arguments describes; max_batch: sequences generate_batch takes."""
    from fastdec import Decoder

    config = config_from_args(args)
    return Decoder(model, config, device=args.device, fixed_width=args.fixed_width,
                   cuda_graphs=False if args.no_cuda_graphs else None, max_batch=max(max_batch, 1))
