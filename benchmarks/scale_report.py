"""The growth table and plot of docs/scale.md: certify time per part against parameters.

Two steps, so that the figures the docs show are committed data, not a log folder:

    python benchmarks/scale_report.py collect /work/scale-logs --out docs/scale-data.json
    python benchmarks/scale_report.py table docs/scale-data.json --md docs/scale-table.md --png docs/scale.png

`collect` reads, per sweep size NAME (ouro-w<width>): the certificate of its real quick run
(cert-wW/certificate.json for NAME ouro-wW), its peak RSS (certify-wW.log, GNU time -v), the
certificate of its run with the --time-budget the plan needs where one was made
(cert-wW-budget/certificate.json, cert-wW-budget.log), its
prediction (predict-wW.json, benchmarks/scale_parts.py predict), --predict's layer-cut estimate
(cut-wW.json, benchmarks/scale_parts.py cut: the figure --predict gives where it does not go on to the
measured prediction, as at the 1.4B shape) and the parts of its 1- and 2-layer cuts
(parts-NAME-l1.json, parts-NAME-l2.json, benchmarks/scale_parts.py parts), which it extrapolates linearly
in the layer count to the 24 layers of the shape (each part's cost is a + b x layers: the
embedding and the 49k-token head once, the layers 24 times). `table` fits log time = c + k log
parameters per part over the sizes measured and writes the table and the plot.

A logs folder is one machine's and does not last; the committed data does. `collect --update
docs/scale-data.json` keeps every size and every figure the logs do not hold anew, so one new run
(one size's certificate, one estimate) is added without the logs of the others:

    python benchmarks/scale_report.py collect /work/logs --update docs/scale-data.json \
        --out docs/scale-data.json
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from proofs.cost.extrapolate import scaled, work
from proofs.cost.parts import GROUPS, group_of
from refdec.errors import LoopcertError
from refdec.sizes import ouro_shape, parameters

PARTS = GROUPS  # a certificate's checks, grouped by proofs/cost/parts.py's one table
LAYERS = 24  # the published shape's; the cuts' figures are extrapolated to it


def part_of(check: str) -> str:
    return group_of(check)


def peak_rss_of(log: Path) -> int | None:
    """Bytes, from GNU time -v's 'Maximum resident set size (kbytes)'."""
    if not log.is_file():
        return None
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", log.read_text(errors="replace"))
    return int(m.group(1)) * 1024 if m else None


def certified(logs: Path, name: str, log: str | None = None) -> dict | None:
    """The measured quick run of one size: seconds per part, total, peak RSS (from `log`, GNU time
    -v; default certify-NAME.log), verdict, the sampling budget and the samples drawn of those
    planned."""
    path = logs / f"cert-{name}" / "certificate.json"
    if not path.is_file():
        return None
    cert = json.loads(path.read_text())
    planned = drawn = 0
    to_n = 0.0  # sampling every case to its N at the rates the run measured (its budget advice)
    for c in cert["checks"]:
        for case in (c.get("details") or {}).get("cases", []) if c["name"].startswith("sampling[") else []:
            planned += int(case.get("planned") or 0)
            drawn += int(case.get("samples") or 0)
            if case.get("samples_per_s"):
                to_n += int(case.get("planned") or 0) / float(case["samples_per_s"])
    parts = dict.fromkeys(PARTS, 0.0)
    for c in cert["checks"]:
        parts[part_of(c["name"])] += float(c.get("seconds") or 0.0)
    total = float(cert["stamp"]["seconds"])
    parts["setup"] = total - sum(v for k, v in parts.items() if k != "setup")
    return {
        "seconds": total,
        "parts": parts,
        "peak_rss": peak_rss_of(logs / (log or f"certify-{name}.log")),
        "verdict": cert["verdict"],
        "failed": cert["failed"],
        "load": _read(logs / f"{(log or f'certify-{name}.log').removesuffix('.log')}.uptime"),
        "sampling_budget_s": cert["stamp"].get("sampling_budget_s"),
        "samples": {"planned": planned, "drawn": drawn},
        "sampling_to_n_s": to_n or None,
    }


def predicted(logs: Path, name: str) -> dict | None:
    path = logs / f"predict-{name}.json"
    if not path.is_file():
        return None
    p = json.loads(path.read_text())
    return {
        "wall_seconds": p["wall_seconds"],
        "sampling_to_target_s": p.get("sampling_seconds", p.get("predicted_seconds")),
        "setup_seconds": p["setup_seconds"],
        "warnings": p.get("warnings", []),
        "predict_took": p.get("predict_wall"),
        "load1": p.get("load1"),
    }


def estimated(logs: Path, name: str) -> dict | None:
    """--predict's layer-cut estimate of one size (cut-wW.json, `benchmarks/scale_parts.py cut`): the run in
    one process, per part, and what it cost to make."""
    path = logs / f"cut-{name}.json"
    if not path.is_file():
        return None
    e = json.loads(path.read_text())
    return {
        "serial_seconds": e["serial_seconds"],
        "parts": e["parts"],
        "dtype": e.get("dtype"),
        "estimate_took": e.get("estimate_seconds"),
        "load1": e.get("load1"),
    }


def macs_per_position(width: int, layers: int) -> int:
    """Multiply-adds of one position at one depth of an Ouro-shaped model: every layer's
    projections and MLP, the early-exit gate and the 49k-token head (the embedding is a lookup):
    proofs/cost/extrapolate.py work, the one measure both extrapolations from cuts use."""
    return work(ouro_shape(width, layers))


def extrapolated(logs: Path, name: str) -> dict | None:
    """Each part of the 1- and 2-layer cuts of `name` (ouro-wW) at LAYERS layers, by the one
    extrapolation of proofs/cost/extrapolate.py: each cut scaled by the multiply-adds of a position
    (macs_per_position), and the two estimates' geometric mean. Scaling, not differencing: the two
    cuts ran at different loads (one took longer with 1 layer than the other with 2), and a
    difference times 23 multiplies that noise."""
    width = int(re.fullmatch(r"ouro-w(\d+)", name).group(1))
    cuts = {}
    for n in (1, 2):
        path = logs / f"parts-{name}-l{n}.json"
        if not path.is_file():
            return None
        cuts[n] = json.loads(path.read_text())["parts"]
    full = macs_per_position(width, LAYERS)
    works = {n: macs_per_position(width, n) for n in (1, 2)}
    factor = {n: full / works[n] for n in (1, 2)}

    def estimates(times: dict[int, float]) -> dict:
        geo = scaled(times, works, full) or None
        return {f"from_l{n}": t * factor[n] for n, t in times.items()} | {f"l{LAYERS}": geo}

    out = {}
    for part in sorted(set(cuts[1]) & set(cuts[2])):
        if part in ("vocab", "sampling"):  # the vocabulary does not grow with layers; sampling below
            continue
        times = {n: cuts[n][part]["seconds"] for n in (1, 2)}
        out[part] = {"l1": times[1], "l2": times[2], **estimates(times)}
    if all("reference" in cuts[n] for n in (1, 2)):
        times = {n: cuts[n]["reference"]["per_token"] for n in (1, 2)}
        out["reference_per_token"] = times | estimates(times)
    if all("sampling" in cuts[n] for n in (1, 2)):  # seconds a sample, every unit's mean
        per = {
            n: [1 / u["samples_per_s"] for u in cuts[n]["sampling"]["units"] if u["samples_per_s"]]
            for n in (1, 2)
        }
        out["seconds_per_sample"] = estimates({n: sum(per[n]) / len(per[n]) for n in (1, 2) if per[n]})
        # N: the quick plan's for the 1-layer cut (the 24-layer model's own N is not known here)
        n = sum(u["N"] for u in cuts[1]["sampling"]["units"])
        out["sampling"] = {"samples": n, f"l{LAYERS}": n * out["seconds_per_sample"][f"l{LAYERS}"]}
    if not out:
        return None
    out["factor"] = factor
    out["peak_rss"] = {f"l{n}": max(p.get("peak_rss", 0) for p in cuts[n].values()) for n in (1, 2)}
    out["load1"] = {f"l{n}": [p.get("load1") for p in cuts[n].values()] for n in (1, 2)}
    return out


def _read(path: Path) -> str | None:
    return path.read_text().strip() if path.is_file() else None


def collect(logs: Path, names: list[str]) -> dict:
    sizes = []
    for name in names:
        m = re.fullmatch(r"ouro-w(\d+)", name)
        if not m:
            raise LoopcertError(f"sweep names are ouro-w<width> (benchmarks/size_sweep.py), got {name!r}")
        row = {"name": name, "parameters": parameters(ouro_shape(int(m.group(1))))}
        short = name.removeprefix("ouro-")  # cert-w256/, certify-w256.log, predict-w256.json
        row["certified"] = certified(logs, short)
        row["certified_full"] = certified(logs, f"{short}-budget", f"cert-{short}-budget.log")
        row["predicted"] = predicted(logs, short)
        row["estimated"] = estimated(logs, short)
        row["extrapolated"] = extrapolated(logs, name)
        sizes.append(row)
    return {"sizes": sizes}


def updated(old: dict, new: dict) -> dict:
    """`new` over `old`, size by size and figure by figure: a figure the new logs do not hold (None)
    keeps its old value; sizes of either stay, in the sweep's order (by parameters)."""
    rows = {s["name"]: dict(s) for s in old.get("sizes", [])}
    for s in new["sizes"]:
        row = rows.setdefault(s["name"], {})
        row.update({k: v for k, v in s.items() if v is not None or k not in row})
    return {"sizes": sorted(rows.values(), key=lambda s: s["parameters"])}


def fit(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log y on log x (the growth exponent); None under two points."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx > 0 else None


def table(data: dict) -> str:
    rows = [s for s in data["sizes"] if s["certified"]]
    head = (
        "| part | "
        + " | ".join(f"{s['name']} ({s['parameters'] / 1e6:.0f}M)" for s in rows)
        + " | exponent |"
    )
    lines = [head, "|---|" + "---:|" * (len(rows) + 1)]
    xs = [s["parameters"] for s in rows]
    for part in (*PARTS, "total"):
        ys = [s["certified"]["seconds"] if part == "total" else s["certified"]["parts"][part] for s in rows]
        k = fit(xs, ys)
        cells = " | ".join(f"{y:.0f}" for y in ys)
        lines.append(f"| {part} (s) | {cells} | {'' if k is None else f'{k:.2f}'} |")
    rss = " | ".join(
        f"{s['certified']['peak_rss'] / 2**30:.2f}" if s["certified"]["peak_rss"] else "-" for s in rows
    )
    lines.append(
        f"| peak RSS (GiB) | {rss} | {fit(xs, [s['certified']['peak_rss'] or 0 for s in rows]) or 0:.2f} |"
    )
    to_n = [s["certified"].get("sampling_to_n_s") for s in rows]
    if any(to_n):
        cells = " | ".join("-" if t is None else f"{t:,.0f}" for t in to_n)
        lines.append(f"| sampling every case to its N, at the run's rates (s) | {cells} | |")
    pred = []
    for s in rows:
        p = s["predicted"]
        pred.append(
            "-"
            if not p
            else f"{p['wall_seconds']:.0f} ({p['wall_seconds'] / s['certified']['seconds']:.2f}x)"
        )
    lines.append(f"| --predict (s, predicted/measured) | {' | '.join(pred)} | |")
    if any(s.get("estimated") for s in rows):
        cut = []
        for s in rows:
            e = s.get("estimated")
            cut.append(
                "-"
                if not e
                else f"{e['serial_seconds']:.0f} ({e['serial_seconds'] / s['certified']['seconds']:.2f}x)"
            )
        lines.append(f"| --predict's layer-cut estimate (s, estimated/measured) | {' | '.join(cut)} | |")
    return "\n".join(lines) + "\n" + full_table(data)


def full_table(data: dict) -> str:
    """The runs given the --time-budget the plan needs (every case at its full N): their verdict,
    time per part and the sampling exponent; empty when none was made."""
    rows = [s for s in data["sizes"] if s.get("certified_full")]
    if not rows:
        return ""
    xs = [s["parameters"] for s in rows]
    lines = [
        "",
        "With the `--time-budget` the plan needs (every case at its full N):",
        "",
        "| | " + " | ".join(f"{s['name']} ({s['parameters'] / 1e6:.0f}M)" for s in rows) + " | exponent |",
        "|---|" + "---:|" * (len(rows) + 1),
    ]
    full = [s["certified_full"] for s in rows]
    lines.append("| verdict | " + " | ".join(f["verdict"] for f in full) + " | |")
    lines.append(
        "| --time-budget (s) | " + " | ".join(f"{f['sampling_budget_s']:.0f}" for f in full) + " | |"
    )
    lines.append(
        "| samples drawn / planned | "
        + " | ".join(f"{f['samples']['drawn']:,} / {f['samples']['planned']:,}" for f in full)
        + " | |"
    )
    for part in ("sampling", "total"):
        ys = [f["seconds"] if part == "total" else f["parts"][part] for f in full]
        k = fit(xs, ys)
        cells = " | ".join(f"{y:.0f}" for y in ys)
        lines.append(f"| {part} (s) | {cells} | {'' if k is None else f'{k:.2f}'} |")
    rss = [f["peak_rss"] for f in full]
    cells = " | ".join(f"{r / 2**30:.2f}" if r else "-" for r in rss)
    k = fit(xs, [r or 0 for r in rss])
    lines.append(f"| peak RSS (GiB) | {cells} | {'' if k is None else f'{k:.2f}'} |")
    return "\n".join(lines) + "\n"


def plot(data: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [s for s in data["sizes"] if s["certified"]]
    xs = [s["parameters"] for s in rows]
    fig, ax = plt.subplots(figsize=(10, 5.5))
    for part in (*PARTS, "total"):
        ys = [s["certified"]["seconds"] if part == "total" else s["certified"]["parts"][part] for s in rows]
        k = fit(xs, ys)
        if all(y <= 0 for y in ys):
            continue
        label = f"{part} (k={k:.2f})" if k is not None else part
        ax.plot(xs, ys, marker="o", lw=2.5 if part == "total" else 1.2, label=label)
    for s in rows:  # what the quick plan's TV needs, at the rates the run itself measured
        t = s["certified"].get("sampling_to_n_s")
        if t:
            ax.plot([s["parameters"]], [t], marker="D", color="tab:red", mfc="none", ls="none")
    ax.plot(
        [],
        [],
        marker="D",
        color="tab:red",
        mfc="none",
        ls="none",
        label="sampling to TV 0.05, the run's rates",
    )
    full = [s for s in data["sizes"] if s.get("certified_full")]
    if full:  # measured: the runs given the --time-budget their plan needs
        ys = [s["certified_full"]["parts"]["sampling"] for s in full]
        ax.plot([s["parameters"] for s in full], ys, marker="D", color="tab:red", ls="none")
        ax.plot(
            [], [], marker="D", color="tab:red", ls="none", label="sampling to TV 0.05, measured (full N)"
        )
    ext = [s for s in data["sizes"] if s["extrapolated"] and not s["certified"]]  # a size run whole: its run
    for s in ext:
        e = s["extrapolated"]
        for part, mark in (("laws", "s"), ("greedy", "^"), ("sampling", "D"), ("load", "v")):
            if part in e and e[part][f"l{LAYERS}"]:
                ax.plot([s["parameters"]], [e[part][f"l{LAYERS}"]], marker=mark, color="k", ls="none")
    if ext:
        ax.plot([], [], marker="s", color="k", ls="none", label="exact laws, extrapolated (1-2 layer cuts)")
        ax.plot([], [], marker="^", color="k", ls="none", label="greedy, extrapolated")
        ax.plot([], [], marker="D", color="k", ls="none", label="sampling to TV 0.05, extrapolated")
        ax.plot([], [], marker="v", color="k", ls="none", label="loading, extrapolated")
    ax.axhline(3600, color="grey", ls=":", lw=1)
    ax.text(xs[0] if xs else 1e7, 3900, "1 hour", color="grey", fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("parameters (Ouro shape, 24 layers, V = 49,152, R = 4)")
    ax.set_ylabel("seconds (2 shared CPU cores, 1 thread)")
    ax.set_title("loopcert certify --quick: time per part vs parameters")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python benchmarks/scale_report.py", description=__doc__.split("\n\n")[0]
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("logs", type=Path)
    c.add_argument("--names", default="ouro-w128,ouro-w256,ouro-w512,ouro-w1024,ouro-w2048")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument(
        "--update",
        type=Path,
        metavar="DATA",
        help="a scale-data.json whose sizes and figures stay where the logs have none anew",
    )
    t = sub.add_parser("table")
    t.add_argument("data", type=Path)
    t.add_argument("--md", type=Path)
    t.add_argument("--png", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "collect":
        data = collect(a.logs, a.names.split(","))
        if a.update is not None:
            if not a.update.is_file():
                raise LoopcertError(f"--update {a.update}: no such file (a scale-data.json to update)")
            data = updated(json.loads(a.update.read_text()), data)
        tmp = a.out.with_name(a.out.name + ".tmp")  # atomic: a failed collect keeps the old data
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(a.out)
        return 0
    data = json.loads(a.data.read_text())
    md = table(data)
    if a.md:
        a.md.write_text(md)
    else:
        print(md)
    if a.png:
        plot(data, a.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
