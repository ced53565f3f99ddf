"""`loopcert merge`: assemble the certificate of a run split with `loopcert certify --shard i/n`.

    loopcert merge DIR_1 ... DIR_n --out DIR

Reads DIR_k/shard.json, refuses shards of different runs (commit, plan, model, seed, decoder,
device, dtype, time budget: the shard and the field are named) and incomplete sets (missing
shards named), then assembles the certificate from the shards' raw results with the same code
as a single run (Holm across all cases of a check, one verdict) and writes certificate.md and
certificate.json to --out, atomically. Exit status as certify's: 0 pass, 1 a check failed,
3 incomplete (a shard's time budget cut a check short, nothing failed), 2 a usage error (a bad
--out, a shard.json that is not what `certify --shard` writes, named with its folder and field:
proofs/run/shard_schema.py; incompatible shards); nothing is written then.
"""

from __future__ import annotations

from pathlib import Path

from loopcert.commands.certify import DEFAULT_OUT, REPORT_FILES, publish, timed_progress
from proofs.run.certify import run_certify
from proofs.run.shard_schema import ShardError
from proofs.run.shards import combine, read_shard
from refdec.errors import LoopcertError
from refdec.files import check_output_folder

HELP = "merge the shard folders of `loopcert certify --shard i/n` into one certificate"
ON_INTERRUPT = "no certificate written, the previous one is left in place"


def add_arguments(p) -> None:
    p.add_argument("shards", nargs="+", metavar="DIR", help="the --out folders of the shard runs")
    p.add_argument("--out", default=str(DEFAULT_OUT), help=f"output folder (default: {DEFAULT_OUT})")


def run(args) -> int:
    progress = timed_progress()
    check_output_folder(args.out, "--out", REPORT_FILES)
    shards = [read_shard(Path(d)) for d in args.shards]
    ident, results = combine(shards)
    try:
        cert = merged(ident, results, shards, progress)
    except ShardError as e:  # a tally that does not bin as its unit's law: name the shard that holds it
        holder = next((s["_folder"] for s in shards if e.unit in s["results"]), None)
        raise LoopcertError(f"{holder}: shard.json: {e}" if holder else str(e)) from None
    cert = cert.with_stamp(
        command=shards[0].get("command"),
        merged_from=tuple(s["_folder"] for s in sorted(shards, key=lambda s: s["shard"][0])),
        seconds=sum(s.get("seconds", 0.0) for s in shards) + cert.stamp.seconds,
    )
    return publish(cert, args.out, f", merged from {len(shards)} shards")


def merged(ident: dict, results: dict, shards: list[dict], progress):
    """The certificate of the shards' results, assembled by the code of a single run."""
    return run_certify(
        ident["model"],
        None if ident["decoder"] in ("fastdec", "fastdec compiled") else ident["decoder"],
        ident["device"],
        ident["dtype"],
        ident["plan"],
        ident["seed"],
        progress,
        time_budget=ident["time_budget"],
        results=results,
        planned=shards[0]["sampling"],  # the shards' plan: the laws their tallies were binned by
        relative_to=ident["relative_to"],
        compile=ident["decoder"] == "fastdec compiled",  # certify --compile's shards
    )
