"""The `loopcert` console script. Each subcommand lives in loopcert/commands/<name>.py and
defines `HELP`, `add_arguments(parser)` and `run(args) -> int` (0 ok, 1 a check failed).
Errors a user can cause (LoopcertError) print one line and exit 2."""

from __future__ import annotations

import argparse
import importlib
import sys

from refdec.errors import LoopcertError

COMMANDS = ("generate", "inspect", "train", "certify", "speculate", "bench", "serve")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loopcert", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        mod = importlib.import_module(f"loopcert.commands.{name}")
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except LoopcertError as e:
        print(f"loopcert {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
