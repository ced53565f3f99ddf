"""Arguments shared by subcommands: model, device, dtype, prompt, sampling, threads; and what
every command does when it is interrupted."""

from __future__ import annotations

import contextlib
import os
import signal

import torch

from refdec.errors import LoopcertError
from refdec.load import load_model, parse_dtype
from refdec.sampling import SamplingParams
from refdec.tokenizer import byte_decode, byte_encode
from refdec.values import check_device


def add_model_arguments(p, default_model: str = "tiny-raven") -> None:
    p.add_argument(
        "model",
        nargs="?",
        default=default_model,
        help=f"preset name or model folder (default: {default_model})",
    )
    p.add_argument("--seed-weights", type=int, default=0, help="weights seed for a preset")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", default="float32", help="float32, float64, bfloat16, float16")


def add_sampling_arguments(p, several: bool = False) -> None:
    """several: --prompt may repeat, and --prompts-file gives one text prompt per line."""
    if several:
        p.add_argument(
            "--prompt",
            action="append",
            help="text prompt (byte-level or tokenizer.json "
            "models); repeat it to decode several prompts as one batch",
        )
        p.add_argument("--prompts-file", default=None, help="one text prompt per line, decoded as one batch")
    else:
        p.add_argument("--prompt", help="text prompt (byte-level or tokenizer.json models)")
    p.add_argument("--prompt-ids", type=int, nargs="+", help="prompt as token ids")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=0, help="sampling seed")


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
    return byte_encode(text)


def decode_text(model, ids: list[int]) -> str | None:
    tok = getattr(model, "tokenizer", None)
    if tok is not None:
        return tok.decode(ids)
    if model.cfg.vocab_size < 256:
        return None
    return byte_decode(ids)


GATE_CHOICES = {"on": True, "off": False, "inverted": "inverted"}


def add_decoder_arguments(p, default_strategy: str = "draft-verify") -> None:
    """fastdec.DecodeConfig's fields and the Decoder's run options (speculate, serve). The seed's
    names (--draft-loops, --verify-loops, --second-loops, --rewind-L) stay accepted as aliases."""
    from fastdec import STRATEGIES

    p.add_argument("--strategy", default=default_strategy, choices=STRATEGIES)
    p.add_argument(
        "--draft-depth",
        "--draft-loops",
        dest="draft_depth",
        type=int,
        default=None,
        help="draft depth d1 (default: max(1, round(R/16)))",
    )
    p.add_argument(
        "--depth",
        "--verify-loops",
        dest="depth",
        type=int,
        default=None,
        help="target depth R (default: the model's)",
    )
    p.add_argument(
        "--second-depth",
        "--second-loops",
        dest="second_depth",
        type=int,
        default=None,
        help="LoopSpec second-proposal depth d2 (pipelined)",
    )
    p.add_argument("--gate", choices=sorted(GATE_CHOICES), default="on", help="second-proposal gate")
    p.add_argument("--draft-ahead", type=int, default=4, help="drafts per round (draft-verify)")
    p.add_argument(
        "--rewind-depth",
        "--rewind-L",
        dest="rewind_depth",
        type=int,
        default=None,
        help="rewind telemetry depth (adaptive-verify: its verify depth)",
    )
    p.add_argument("--fixed-width", type=int, default=None, help="run every engine call at this width")
    p.add_argument("--no-cuda-graphs", action="store_true", help="eager steps on CUDA")
    p.add_argument(
        "--compile",
        action="store_true",
        help="compile each engine step with torch.compile (CPU; the first call of each shape pays "
        "its compile, cached on disk: docs/speed.md#compiled-steps)",
    )


def config_from_args(args):
    from fastdec import DecodeConfig

    return DecodeConfig(
        args.strategy,
        depth=args.depth,
        draft_depth=args.draft_depth,
        second_depth=args.second_depth,
        gate=GATE_CHOICES[args.gate],
        draft_ahead=args.draft_ahead,
        rewind_depth=args.rewind_depth,
    )


def decoder_from_args(args, model, max_batch: int = 1):
    """The Decoder add_decoder_arguments describes; max_batch: sequences generate_batch takes."""
    from fastdec import Decoder

    config = config_from_args(args)
    return Decoder(
        model,
        config,
        device=args.device,
        fixed_width=args.fixed_width,
        cuda_graphs=False if args.no_cuda_graphs or args.compile else None,
        compile=args.compile,
        max_batch=max(max_batch, 1),
    )


# -- an HTTP decoder (--decoder http://...: proofs/decoders/http_decoder.py) ------------------------
API_KEY_ENV = "LOOPCERT_API_KEY"


def add_http_arguments(p) -> None:
    from proofs.decoders.http_client import TIMEOUT_S
    from proofs.decoders.server_info import SERVERS

    p.add_argument(
        "--server",
        default="auto",
        choices=SERVERS,
        help="what serves --decoder http://...: auto (ask it), loopcert (serve), vllm, sglang, openai",
    )
    p.add_argument(
        "--http-timeout",
        type=float,
        default=TIMEOUT_S,
        metavar="SECONDS",
        help=f"seconds one HTTP request may take (default {TIMEOUT_S:g})",
    )
    p.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help=f"sent as 'Authorization: Bearer KEY' (default: ${API_KEY_ENV} if set)",
    )
    p.add_argument(
        "--decoder-dtype",
        default=None,
        choices=("float32", "float64", "bfloat16", "float16"),
        help="the dtype the server computes in, the greedy check's tie tolerance "
        "(default: float32 for vLLM, SGLang and OpenAI-compatible servers)",
    )
    p.add_argument(
        "--served-model",
        default=None,
        metavar="NAME_OR_PATH",
        help="what the vLLM / SGLang server calls the certified model, when it is not MODEL "
        "(another machine's path, a --served-model-name)",
    )
    p.add_argument(
        "--boundaries",
        default=None,
        metavar="N,N,...",
        help="positions where the server's state changes shape (its KV block size, its prefill "
        "chunk size): the checks at depth cross each (docs/certify.md#boundaries)",
    )


def http_options_from_args(args):
    """The HTTP flags as proofs.decoders.http_decoder.HTTPOptions; LoopcertError for any of them
    given without an http:// --decoder, or with a bad value (named)."""
    from proofs.decoders.http_client import TIMEOUT_S, Transport
    from proofs.decoders.http_decoder import HTTPOptions, is_http_spec

    if not is_http_spec(args.decoder):
        given = [
            flag
            for flag, value, default in (
                ("--server", args.server, "auto"),
                ("--http-timeout", args.http_timeout, TIMEOUT_S),
                ("--api-key", args.api_key, None),
                ("--decoder-dtype", args.decoder_dtype, None),
                ("--served-model", args.served_model, None),
                ("--boundaries", getattr(args, "boundaries", None), None),
            )
            if value != default
        ]
        if given:
            raise LoopcertError(f"{', '.join(given)}: only with --decoder http://HOST:PORT/v1")
        return None
    key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV)
    return HTTPOptions(
        server=args.server,
        transport=Transport(timeout_s=args.http_timeout, api_key=key),
        compute_dtype=args.decoder_dtype,
        served_model=args.served_model,
        model=args.model,
        boundaries=parse_boundaries(getattr(args, "boundaries", None)),
    )


def parse_boundaries(text: str | None) -> tuple[int, ...]:
    """--boundaries "16,512" -> (16, 512); LoopcertError naming a bad entry."""
    if text is None:
        return ()
    out = []
    for part in text.split(","):
        try:
            n = int(part.strip())
        except ValueError:
            n = 0
        if n < 1:
            raise LoopcertError(f"--boundaries: {part.strip()!r} is not a position (an integer >= 1)")
        out.append(n)
    return tuple(sorted(set(out)))


def http_options(args):
    """(the HTTPOptions of an http:// --decoder, of an http:// --relative-to; None where it is not
    one): --relative-to gets --decoder's flags (the same engine's plain decoder: the same server
    flags), else MODEL alone. Both URLs are checked before either server is reached."""
    from proofs.decoders.http_decoder import HTTPOptions, check_url, is_http_spec

    relative = getattr(args, "relative_to", None)
    for spec in (args.decoder, relative):
        if is_http_spec(spec):
            check_url(spec)
    options = http_options_from_args(args)
    if not is_http_spec(relative):
        return options, None
    return options, options if options is not None else HTTPOptions(model=args.model)


def http_command_parts(args) -> list[str]:
    """The HTTP flags of the effective command: the server certify found (the kind --server
    auto detected), the timeout and what was given; never the API key."""
    from proofs.decoders.http_decoder import built, is_http_spec

    if not is_http_spec(args.decoder):
        return []
    dec = built(args.decoder)
    parts = [f"--server {dec.server.kind if dec is not None else args.server}"]
    parts.append(f"--http-timeout {args.http_timeout:g}")
    if args.decoder_dtype is not None:
        parts.append(f"--decoder-dtype {args.decoder_dtype}")
    if args.served_model is not None:
        parts.append(f"--served-model {args.served_model}")
    if getattr(args, "boundaries", None) is not None:
        parts.append(f"--boundaries {args.boundaries}")
    return parts


def http_decoder_stamp(args, decoder: str) -> str:
    """The stamp's decoder (proofs.run.certify.described): the spec, for an HTTP decoder the server
    and dialect it spoke, for mlx-lm, llama.cpp and OpenVINO the versions decoded with."""
    from proofs.run.certify import described

    return described(args.decoder, decoder)


# -- threads ----------------------------------------------------------------------------------------
MAX_THREADS = 1024
DEFAULT_THREADS = 1


def add_threads_argument(p) -> None:
    p.add_argument(
        "--threads",
        type=int,
        default=DEFAULT_THREADS,
        metavar="N",
        help=f"torch CPU threads for this run (default {DEFAULT_THREADS}: decoding steps on "
        "these models are too small to split, and on a busy machine more threads are "
        "many times slower; docs/measurements.md 'Threads')",
    )


def apply_threads(args) -> None:
    """The CLI owns its process, so it sets torch's thread count; the Python API never does."""
    n = args.threads
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_THREADS:
        raise LoopcertError(f"--threads must be an integer in [1, {MAX_THREADS}], got {n!r}")
    torch.set_num_threads(n)


# -- interruption -----------------------------------------------------------------------------------
class Interrupted(BaseException):
    """SIGINT or SIGTERM: a BaseException, so no `except Exception` (a check's guard) swallows it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum, _frame):
    raise Interrupted(signum)


def install_signal_handlers() -> None:
    """SIGINT and SIGTERM raise Interrupted in the main thread: reports are written atomically
    and only at the end, so unwinding leaves the previous report and no temporary file."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _raise_interrupted)


@contextlib.contextmanager
def uninterrupted():
    """Hold SIGINT / SIGTERM while a report's files are replaced, so a signal never leaves a new
    certificate.json beside an old certificate.md; the signal is acted on right after."""
    pending: list[int] = []
    old = {
        sig: signal.signal(sig, lambda signum, _f: pending.append(signum))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if pending:
            raise Interrupted(pending[0])
