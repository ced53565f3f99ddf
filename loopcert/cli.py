"""The `loopcert` console script. Each subcommand lives in loopcert/commands/<name>.py and
defines `HELP`, `add_arguments(parser)` and `run(args) -> int` (0 ok, 1 a check failed).
Errors a user can cause (LoopcertError) print one line and exit 2. Every command takes
`--threads N` (loopcert/commands/common.py), added here unless the command defines
`OWN_THREADS` (train: part of the recipe; serve: adds the shared flag itself). SIGINT / SIGTERM
print one line (the command's `ON_INTERRUPT` says what was kept) and exit 130 / 143 (at once,
skipping the interpreter's teardown, for a command that sets `EXIT_AT_ONCE`: serve). A name read
through an old module path (proofs/moved.py) prints its DeprecationWarning on stderr."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import warnings

from loopcert.commands import common
from proofs.moved import MovedWarning
from refdec.errors import LoopcertError

# what `loopcert --help` says above the commands (the module's docstring is for its readers)
DESCRIPTION = (
    "Certify that a decoder for looped transformers is lossless against the reference decoder. "
    "`loopcert COMMAND --help` says what each command takes."
)

COMMANDS = ("generate", "inspect", "train", "certify", "speculate", "bench", "serve", "merge")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loopcert", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        mod = importlib.import_module(f"loopcert.commands.{name}")
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        if not getattr(mod, "OWN_THREADS", False):
            common.add_threads_argument(p)
        p.set_defaults(_run=mod.run, _mod=mod)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # a decoder module that imports an old path (proofs/moved.py) is told so: Python would hide a
    # DeprecationWarning raised outside __main__
    warnings.simplefilter("default", MovedWarning)
    if argv is None:  # the console script owns the process; a caller of main([...]) keeps its handlers
        common.install_signal_handlers()
    try:
        if not getattr(args._mod, "OWN_THREADS", False):
            common.apply_threads(args)
        return int(args._run(args) or 0)
    except LoopcertError as e:
        print(f"loopcert {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, common.Interrupted) as e:
        signum = getattr(e, "signum", signal.SIGINT)
        kept = getattr(args._mod, "ON_INTERRUPT", "")
        print(
            f"loopcert {args.command}: interrupted by {signal.Signals(signum).name}"
            + (f"; {kept}" if kept else ""),
            file=sys.stderr,
            flush=True,
        )
        if argv is None and getattr(args._mod, "EXIT_AT_ONCE", False):
            # serve has answered every request (503) and holds no file open for writing: the
            # interpreter's teardown of torch alone takes seconds on a busy machine
            sys.stdout.flush()
            os._exit(128 + signum)
        return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
