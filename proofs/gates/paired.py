"""The paired speed gate: this checkout's code and a reference tree timed in the same job, round
by round, so that whatever the host does (its load, its state, which machine CI drew) falls on
both alike.

Why: protocol 3 compared a run's ratios with ratios stored in benchmarks/baseline.json, measured
on another day and maybe another machine. On the 2-core dev machine the host's state alone moved
the strategies' ratios ~10% over tens of minutes (docs/measurements.md "Gate false alarms"), so
the tolerance had to be wide, and a 25% slowdown measured in a faster state passed. Timed beside
the change, the reference moves with it.

The reference is the commit the baseline was written at (its `reference_commit`), exported with
`git archive` into a temporary folder, or any folder holding a loopcert tree. Each side is a
speed.round_worker process importing its own fastdec (PYTHONPATH), one torch thread; the
gate asks them for one round at a time, in turn, the order alternating, never both at once.

Figure, per mode and gate setting: its relative speed, the 20%-trimmed geometric mean over rounds
of (the reference's time / this tree's time), decode process time of the same prompts, seeds and
setting (speed.timing.trimmed_ratio). Below 1 this tree is slower. It fails below
1 - tolerance (PAIRED_TOL, set from docs/measurements.md "Gate false alarms"). The autoregressive
setting is gated too: its own cost is compared, which the ratio gates could only see through the
figure over naive-kv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

from proofs.details import GateDetails
from proofs.result import CheckResult
from refdec.errors import LoopcertError
from refdec.progress import Progress
from speed.round_worker import PAIRED_PROTOCOL
from speed.timing import Workload, loadavg, trimmed_ratio

ROOT = Path(__file__).resolve().parents[2]  # the tree this module runs from (a checkout or site-packages)
CODE = ("refdec", "fastdec", "analysis", "speed", "proofs", "reports", "trainer", "loopcert")  # timed code
# Set from 10 paired runs on the unchanged tree with the other core idle and 10 with it busy
# (docs/measurements.md "Gate false alarms", protocol 4): the figures spread s 0.012-0.028 (idle) and
# 0.011-0.030 (busy) in log; at 0.11 a whole run fails falsely with implied probability 1.6e-5 /
# 5.5e-5 (5.7e-3 / 1.3e-2 at the spreads' 95% upper bounds: under 1 in 50 either way, which 0.10
# missed busy at the upper bounds, 2.6e-2), and a setting made 25% dearer (its figure ~0.8) fails
# with probability >= 0.985 even at the upper bounds. No stored figure or host state enters.
PAIRED_TOL = 0.11
FIGURE = "relative speed"


def _git(repo: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, timeout=60, **kw)


def toplevel(repo: Path = ROOT) -> Path | None:
    """The top of the git checkout holding `repo` (ROOT may be an ignored folder inside it, as tox's
    site-packages under .tox/ is: git archive refuses to run there, and archives only the folder it
    runs in), or None outside one."""
    try:
        got = _git(repo, "rev-parse", "--show-toplevel", text=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(got.stdout.strip()) if got.returncode == 0 else None


def code_commit(repo: Path = ROOT) -> str | None:
    """HEAD of the checkout at `repo` when its code (CODE) is as committed, else None (another
    tree than any commit, or no git): the reference a baseline written now can name."""
    top = toplevel(repo)
    if top is None:
        return None
    try:
        head = _git(top, "rev-parse", "HEAD", text=True)
        if head.returncode != 0:
            return None
        diff = _git(top, "diff", "--quiet", "HEAD", "--", *CODE)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() if diff.returncode == 0 else None


def has_commit(commit: str, repo: Path = ROOT) -> bool:
    """Whether the checkout at `repo` holds `commit` (a shallow clone or a copy without .git may not)."""
    try:
        return _git(repo, "cat-file", "-e", f"{commit}^{{commit}}").returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def export_tree(commit: str, dest: Path, repo: Path = ROOT) -> Path:
    """The files of `commit` of the checkout at `repo`, written under `dest` (git archive)."""
    top = toplevel(repo)
    if top is None or not has_commit(commit, top):
        raise LoopcertError(
            f"commit {commit} is not in the checkout at {repo} (a shallow clone, or not a git checkout): "
            f"the paired gate cannot export its reference; fetch it, or gate with --reference stored"
        )
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as archive:  # whole, then unpacked: a git error is git's, not tar's
        got = subprocess.run(
            ["git", "archive", "--format=tar", commit], cwd=top, stdout=archive, stderr=subprocess.PIPE
        )
        if got.returncode != 0:
            why = got.stderr.decode(errors="replace").strip()
            raise LoopcertError(f"git archive {commit} failed in {top}: {why}")
        archive.seek(0)
        with tarfile.open(fileobj=archive) as tar:
            if hasattr(tarfile, "data_filter"):  # Python 3.12, and 3.11.4 on
                tar.extractall(dest, filter="data")
            else:
                tar.extractall(dest)  # noqa: S202 (our own repository's archive)
    return dest


def worker_module(source: Path) -> str:
    """The round worker's module in the tree under `source`: proofs.speed.round_worker in a tree
    from before speed/ left proofs/ (a reference commit), else speed.round_worker (also in a tree
    that has neither: the worker then refuses the installed loopcert it finds, by name)."""
    old = (source / "proofs" / "speed" / "round_worker.py").is_file()
    return "proofs.speed.round_worker" if old else "speed.round_worker"


class Side:
    """One round_worker process on the code under `source` (its fastdec must come from there)."""

    def __init__(self, name: str, source: Path, workdir: Path):
        self.name, self.source = name, source.resolve()
        self.log = open(workdir / f"{name}.stderr", "w+")  # noqa: SIM115 (closed in close())
        env = {**os.environ, "PYTHONPATH": str(self.source), "OMP_NUM_THREADS": "1"}
        env.pop("PYTHONSAFEPATH", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", worker_module(self.source)],
            cwd=workdir,  # neutral: sys.path[0] is the work folder, PYTHONPATH picks the tree
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )

    def ask(self, req: dict) -> dict:
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            self.log.seek(0)
            tail = " | ".join(self.log.read().strip().splitlines()[-3:])
            raise LoopcertError(
                f"the {self.name} tree's round worker ({self.source}) ended: {tail or 'no output'}"
            )
        reply = json.loads(line)
        if "error" in reply:
            raise LoopcertError(f"the {self.name} tree ({self.source}): {reply['error']}")
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.ask({"op": "exit"})
                self.proc.wait(timeout=30)
            except (LoopcertError, OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def reference_of(spec: str, base: dict) -> tuple[Path | str | None, str]:
    """What --reference SPEC names: (a folder, a commit, or None for the stored ratios; how the
    gate's output names it). auto: the baseline's reference_commit where this checkout holds it,
    else None with the reason. A commit or folder that is not there is a usage error."""
    if spec == "stored":
        return None, "--reference stored"
    if spec == "auto":
        commit = base.get("reference_commit")
        if not commit:
            return None, "the baseline names no reference commit (written from uncommitted code)"
        if not has_commit(commit):
            return (
                None,
                f"the baseline's reference commit {commit[:12]} is not in this checkout (shallow, or no git)",
            )
        return commit, f"the baseline's commit {commit[:12]}"
    if Path(spec).is_dir():
        return Path(spec).resolve(), f"the tree at {spec}"
    if not has_commit(spec):
        raise LoopcertError(
            f"--reference {spec!r}: neither a folder nor a commit of this checkout "
            "(auto, stored, a commit, a folder)"
        )
    return spec, f"commit {spec[:12]}"


def measure_paired(
    model_name: str,
    prompts: Sequence[Sequence[int]],
    plan: Workload,
    settings: Sequence[str],
    reference: Path,
    current: Path = ROOT,
    modes: Sequence[str] = ("greedy", "sampling"),
    seed_weights: int = 0,
    dtype: str = "float32",
    device: str = "cpu",
    slow: tuple[str, float] | None = None,
    progress: Progress | None = None,
) -> dict:
    """Time `settings` (gate labels) on the code under `current` and under `reference`,
    `plan.repeats` rounds per mode, one round of each side in turn (the first side alternating).
    `slow` = (label, fraction) makes that setting dearer on the current side only (the negative
    control). Returns {"figures": mode -> label -> {relative_speed, rounds, speedup,
    reference_speedup}, "reference", "fingerprint", "load_average", "deterministic"}."""
    prompts = [list(p) for p in plan.select(prompts)]
    clock = "wall" if str(device).startswith("cuda") else "cpu"  # as gates.measure
    load = {"start": loadavg()}
    setup = {
        "op": "setup",
        "model": model_name,
        "seed_weights": seed_weights,
        "dtype": dtype,
        "prompts": prompts,
        "tokens": plan.tokens,
        "seed": plan.seed,
        "device": str(device),
        "settings": list(settings),
        "modes": list(modes),
    }
    with tempfile.TemporaryDirectory(prefix="loopcert-paired-") as work:
        sides = {}
        try:
            info = {}
            for name, source, slowed in (("current", current, slow), ("reference", reference, None)):
                sides[name] = Side(name, Path(source), Path(work))
                info[name] = sides[name].ask({**setup, "slow": list(slowed) if slowed else None})
            for name, got in info.items():
                if got["protocol"] != PAIRED_PROTOCOL:
                    raise LoopcertError(
                        f"the {name} tree's round worker speaks paired protocol {got['protocol']}, this gate "
                        f"{PAIRED_PROTOCOL}: re-write the baseline at a commit of this protocol"
                    )
                if Path(got["source"]).resolve() != sides[name].source:
                    raise LoopcertError(
                        f"the {name} round worker imported fastdec from {got['source']}, not from "
                        f"{sides[name].source} (an editable install shadowing PYTHONPATH?)"
                    )
            if info["current"]["fingerprint"] != info["reference"]["fingerprint"]:
                raise LoopcertError(
                    f"{model_name!r} has other weights in the reference tree "
                    f"({info['reference']['fingerprint']}, here {info['current']['fingerprint']}): "
                    "the paired gate times the same model on both"
                )
            times = {m: {n: {lb: [] for lb in settings} for n in sides} for m in modes}
            shas = {m: {lb: set() for lb in settings} for m in modes}
            for mode in modes:
                if progress:
                    progress(
                        f"paired gate: {mode}, {len(settings)} settings x {len(prompts)} prompts x "
                        f"{plan.tokens} tokens, {plan.repeats} rounds on each tree in turn"
                    )
                for r in range(plan.repeats):
                    order = ("current", "reference") if r % 2 == 0 else ("reference", "current")
                    for name in order:
                        got = sides[name].ask({"op": "round", "mode": mode})
                        for lb in settings:
                            times[mode][name][lb].append(got[clock][lb])
                            if name == "current":
                                shas[mode][lb].add(got["tokens_sha"][lb])
        finally:
            for side in sides.values():
                side.close()
    figures = {mode: paired_figures(times[mode]["current"], times[mode]["reference"]) for mode in modes}
    load["end"] = loadavg()
    return {
        "paired_protocol": PAIRED_PROTOCOL,
        "reference": str(reference),
        "fingerprint": info["current"]["fingerprint"],
        "plan": {"repeats": plan.repeats, "tokens": plan.tokens, "prompts": len(prompts)},
        "clock": clock,
        "slowed": list(slow) if slow else None,
        "deterministic": {m: {lb: len(s) == 1 for lb, s in per.items()} for m, per in shas.items()},
        "load_average": load,
        "figures": figures,
    }


def paired_figures(cur: dict[str, list[float]], ref: dict[str, list[float]]) -> dict:
    """label -> figures, from each side's per-round times (label -> seconds, the first label the
    autoregressive setting): relative speed = reference time / this tree's (above 1: faster here)."""
    base = next(iter(cur))
    return {
        lb: {
            "relative_speed": trimmed_ratio(ref[lb], cur[lb]),
            "rounds": [b / x for b, x in zip(ref[lb], cur[lb])],
            "speedup": trimmed_ratio(cur[base], cur[lb]),
            "reference_speedup": trimmed_ratio(ref[base], ref[lb]),
        }
        for lb in cur
    }


def compare_paired(
    paired: dict, tolerance: float = PAIRED_TOL, label: str = "the reference"
) -> list[CheckResult]:
    """One CheckResult per (mode, setting): its relative speed against 1 - tolerance; and one per
    setting whose timed rounds gave different tokens on this tree (nondeterminism)."""
    out = []
    bound = 1 - tolerance
    for mode, per in paired["figures"].items():
        base = next(iter(per))  # the autoregressive setting: every speedup is over it
        for lb, f in per.items():
            fig = f"{mode} / {lb} / {FIGURE}"
            x = f["relative_speed"]
            ok = x >= bound
            message = (
                f"{fig} ({label}'s time / this tree's, timed in this job): measured {x:.3f}, tolerance "
                f"{tolerance:g}: "
                + (f"at least {bound:.3f} passes" if ok else f"below {bound:.3f}, REGRESSION")
            )
            if lb != base:
                message += (
                    f" (speedup over autoregressive {f['speedup']:.3f}x, "
                    f"{label} {f['reference_speedup']:.3f}x)"
                )
            details = GateDetails(fig, "speed", 1.0, x, tolerance, message, tuple(f["rounds"]))
            out.append(CheckResult(fig, x, bound, ok, details))
            if not paired["deterministic"][mode][lb]:
                fig = f"{mode} / {lb} / deterministic (paired rounds)"
                msg = f"{fig}: this tree's timed rounds gave different tokens (nondeterminism)"
                out.append(
                    CheckResult(fig, 0.0, 1.0, False, GateDetails(fig, "exact", True, False, None, msg))
                )
    return out
