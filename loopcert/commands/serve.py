"""`loopcert serve`: fastdec behind an OpenAI-compatible completions API (loopcert/serve/).

    loopcert serve MODEL [--strategy S --draft-loops D1 ...] [--host 127.0.0.1] [--port 8000]

Needs the optional extra: pip install 'loopcert[serve]' (FastAPI + uvicorn). Listens on
127.0.0.1 unless --host says otherwise (beyond loopback without --api-key: one warning line on
stderr); --port 0 picks a free port, printed on startup and
written to --port-file. Blocks until interrupted.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from pathlib import Path

from loopcert.commands.common import (
    add_decoder_arguments,
    add_model_arguments,
    add_threads_argument,
    apply_threads,
    decode_text,
    decoder_from_args,
    encode_text,
    load_from_args,
)
from loopcert.serve import MAX_BODY_BYTES, READ_TIMEOUT_S
from proofs.decoder_attributes import declared_pairs, speculation_widths
from refdec.errors import LoopcertError
from refdec.load import write_atomic
from refdec.values import dtype_name

HELP = "serve fastdec over an OpenAI-compatible /v1/completions API (pip install 'loopcert[serve]')"
OWN_THREADS = True  # adds and applies the shared --threads itself (bench --serve-load reuses its parser)

ON_INTERRUPT = "every request in flight was answered 503 (shutting down)"
EXIT_AT_ONCE = True  # loopcert/cli.py: nothing is left to write once the server has stopped


def add_arguments(p) -> None:
    add_model_arguments(p, default_model="default")
    add_decoder_arguments(p, default_strategy="pipelined")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    p.add_argument("--port", type=int, default=8000, help="TCP port; 0 picks a free one")
    p.add_argument("--port-file", default=None, help="write the bound port to this file once listening")
    p.add_argument("--served-model-name", default=None, help="model id in the API (default: MODEL)")
    p.add_argument("--max-batch", type=int, default=64, help="most sequences decoded together")
    p.add_argument("--max-waiting", type=int, default=4096, help="sequences queued before HTTP 503")
    p.add_argument(
        "--batch-window-ms",
        type=float,
        default=10.0,
        help="wait up to this long for more requests before starting a round (0: never)",
    )
    p.add_argument(
        "--join",
        choices=("step", "round"),
        default="step",
        help="step (default): a request joins the running batch at the next engine step (continuous "
        "batching); round: it waits for the running generate_batch call to finish",
    )
    p.add_argument(
        "--no-batch",
        action="store_true",
        help="decode each sequence alone (no batching; same laws)",
    )
    add_threads_argument(p)
    p.add_argument(
        "--ignore-request-seed",
        action="store_true",
        help="WRONG ON PURPOSE (negative control): decode with a fresh random seed instead of "
        "the request's; certify must report the server NON-REPRODUCIBLE",
    )
    p.add_argument("--log-level", default="warning", help="uvicorn log level")
    p.add_argument(
        "--api-key",
        default=os.environ.get("LOOPCERT_API_KEY"),
        help="require 'Authorization: Bearer KEY' on every endpoint but /health (default: env "
        "LOOPCERT_API_KEY; none: no authentication)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=MAX_BODY_BYTES,
        help=f"largest request body; larger is HTTP 413 before it is read (default {MAX_BODY_BYTES})",
    )
    p.add_argument(
        "--read-timeout",
        type=float,
        default=READ_TIMEOUT_S,
        help="seconds a client may take to send a request's headers, and then its body, before "
        f"the connection is dropped (default {READ_TIMEOUT_S:g})",
    )


def build_served(args):
    """The model, decoder and scheduler, before any socket is opened (usage errors first)."""
    from loopcert.serve.app import Served
    from loopcert.serve.scheduler import Scheduler
    from refdec.load import model_fingerprint

    if args.max_batch < 1 or args.max_waiting < 1:
        raise LoopcertError(
            f"--max-batch and --max-waiting must be >= 1, got {args.max_batch}, {args.max_waiting}"
        )
    if not 0 <= args.port < 65536:
        raise LoopcertError(f"--port must be in [0, 65535], got {args.port}")
    if args.max_body_bytes < 1024:
        raise LoopcertError(f"--max-body-bytes must be at least 1024, got {args.max_body_bytes}")
    if not 0 < args.read_timeout <= 3600:  # also refuses nan
        raise LoopcertError(f"--read-timeout must be in (0, 3600] seconds, got {args.read_timeout}")
    if args.api_key is not None and (not args.api_key or any(c.isspace() for c in args.api_key)):
        raise LoopcertError("--api-key (or LOOPCERT_API_KEY) must be a non-empty string without spaces")
    apply_threads(args)
    model = load_from_args(args)
    decoder = decoder_from_args(args, model, max_batch=args.max_batch)
    fingerprint = model_fingerprint(model)
    c = decoder.config
    decoder_info = {
        "label": decoder.label,
        "strategy": c.strategy,
        "depth": c.depth,
        "draft_depth": c.draft_depth,
        "second_depth": c.second_depth,
        "gate": c.gate,
        "draft_ahead": c.draft_ahead,
        "rewind_depth": c.rewind_depth,
        "fixed_width": decoder.fixed_width,
        "max_batch": decoder.max_batch,
        "join": "sequence" if args.no_batch else args.join,
        "device": str(decoder.device),
        "dtype": dtype_name(decoder.dtype),
        "lossless": decoder.lossless,
        "ignore_request_seed": args.ignore_request_seed,
        # where its state changes shape, for a client's checks at depth (proofs/boundaries.py):
        # certify --decoder http://... reads them from here
        "boundaries": [[p, what] for p, what in declared_pairs(decoder)],
        "speculation_widths": speculation_widths(decoder),
    }
    cfg = model.cfg
    info = {
        "fingerprint": fingerprint,
        "name": cfg.name,
        "family": cfg.family,
        "vocab_size": cfg.vocab_size,
        "recurrence": cfg.recurrence,
        "max_seq_len": cfg.max_seq_len,
        "eos_token_id": getattr(model, "eos_token_id", None),
        "decoder": decoder_info,
    }
    scheduler = Scheduler(
        decoder,
        max_batch=args.max_batch,
        max_waiting=args.max_waiting,
        ignore_seed=args.ignore_request_seed,
        join="sequence" if args.no_batch else args.join,
        window_s=args.batch_window_ms / 1000,
    )
    return Served(
        args.served_model_name or args.model,
        model,
        scheduler,
        encode=lambda text: http_encode(model, text),
        decode=lambda ids: decode_text(model, ids),
        info=info,
        # byte-level text (no tokenizer) is prefix-stable; a tokenizer's decode may clean up spaces
        prefix_stable=getattr(model, "tokenizer", None) is None,
        model_path=args.model,
    )


def http_encode(model, text: str) -> list[int]:
    """encode_text with a message for HTTP clients (who send ids in the request, not --prompt-ids);
    the endpoint adds which field takes the ids."""
    if getattr(model, "tokenizer", None) is None and model.cfg.vocab_size < 256:
        raise LoopcertError(
            f"model {model.cfg.name!r} has vocab_size={model.cfg.vocab_size} and no tokenizer, so it "
            "takes no text"
        )
    return encode_text(model, text)


def run(args) -> int:
    try:
        import uvicorn

        from loopcert.serve.app import create_app
        from loopcert.serve.auth import exposure_warning
        from loopcert.serve.limits import HeaderTimeoutH11
    except ImportError as e:
        raise LoopcertError(
            f"loopcert serve needs the serve extra: pip install 'loopcert[serve]' ({e})"
        ) from None
    served = build_served(args)
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as e:
        raise LoopcertError(f"cannot listen on {args.host}:{args.port}: {e}") from None
    port = sock.getsockname()[1]
    served.scheduler.start()
    app = create_app(served, args.api_key, args.max_body_bytes, args.read_timeout)
    HeaderTimeoutH11.read_timeout_s = args.read_timeout
    config = uvicorn.Config(
        app, http=HeaderTimeoutH11, log_level=args.log_level, timeout_graceful_shutdown=SHUTDOWN_S
    )
    server = quick_to_stop(uvicorn.Server, served.scheduler)(config)
    d = served.info["decoder"]
    print(
        f"loopcert serve: {served.model_id} ({d['strategy']}, lossless={d['lossless']}, "
        f"{served.scheduler.status()['batching']}) on http://{args.host}:{port}/v1",
        flush=True,
    )
    warning = exposure_warning(args.host, args.api_key)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    if args.port_file:
        write_atomic(Path(args.port_file), lambda tmp: Path(tmp).write_text(f"{port}\n"))
    try:
        server.run(sockets=[sock])
    finally:
        served.scheduler.stop(timeout_s=SHUTDOWN_S)  # a daemon thread: a round still decoding ends with us
        sock.close()
    return 0


SHUTDOWN_S = 1.0  # SIGTERM / SIGINT: the server is gone within about this long


def quick_to_stop(server_class, scheduler):
    """uvicorn's Server, but a signal also answers every request in flight at once (HTTP 503, "the
    server is shutting down", Scheduler.shutdown) so that the graceful shutdown has nothing to wait
    for: the process ends within about SHUTDOWN_S with one line, never uvicorn's cancelled tasks'
    tracebacks after its own timeout. The answering runs on a thread of its own: a signal handler
    must not take the scheduler's lock that the interrupted code may hold."""

    class Server(server_class):
        def handle_exit(self, sig, frame):
            if not self.should_exit:
                reason = f"the server is shutting down ({signal.Signals(sig).name})"
                threading.Thread(target=scheduler.shutdown, args=(reason,), daemon=True).start()
            super().handle_exit(sig, frame)

    return Server
