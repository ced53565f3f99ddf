"""An engine certified as a user would, for the in-process engines' certify tests (mlx-lm, llama.cpp,
OpenVINO GenAI): `loopcert certify DIR --quick --decoder SPEC` in a subprocess, its certificate
read back, and each row's verdict with the evidence of its failed checks in one line (rows.md).

Certificates and logs go to reports/out/<engine folder>/<row>/ and <row>.log.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOBS = 2  # the CI machine's cores: the sampling cases decode in parallel


@dataclass
class EngineRows:
    """One engine's certify rows: where they are written, the engine's name in the evidence
    ("mlx-lm"), and each certified row's spec, verdict, failed checks and evidence."""

    out: Path
    engine: str
    timeout_s: float
    rows: dict[str, dict] = field(default_factory=dict)

    def certify(self, folder: Path, spec: str, name: str, budget: float) -> tuple[int, dict]:
        """`loopcert certify FOLDER --quick --decoder SPEC`: (exit status, certificate)."""
        out = self.out / name
        shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-m", "loopcert", "certify", str(folder), "--quick", "--decoder", spec]
        cmd += ["--jobs", str(JOBS), "--time-budget", str(budget), "--out", str(out)]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=self.timeout_s)
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / f"{name}.log").write_text(done.stdout + done.stderr)
        path = out / "certificate.json"
        assert path.exists(), (
            f"no certificate ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        cert = json.loads(path.read_text())
        self.rows[name] = {
            "spec": spec,
            "verdict": cert["verdict"],
            "failed": cert["failed"],
            "why": why(cert, self.engine),
        }
        return done.returncode, cert

    def why(self, name: str) -> str:
        return self.rows[name]["why"]

    def table(self, hide: dict[str, str] | None = None) -> str:
        """rows.md: each row's spec (with the paths in `hide` replaced by their names), verdict,
        failed checks and evidence."""
        lines = ["| row | --decoder | verdict | failed checks | evidence |", "|---|---|---|---|---|"]
        for name, r in self.rows.items():
            spec = r["spec"]
            for path, label in (hide or {}).items():
                spec = spec.replace(path, label)
            evidence = r["why"].replace("|", "/").replace("\n", " ")
            lines.append(
                f"| {name} | `{spec}` | {r['verdict']} | {', '.join(r['failed']) or '—'} | {evidence} |"
            )
        return "\n".join(lines) + "\n"


def checks(cert: dict) -> dict[str, dict]:
    return {c["name"]: c for c in cert["checks"]}


def sampling_of(cert: dict) -> dict:
    return next(c for c in cert["checks"] if c["name"].startswith("sampling["))


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def why(cert: dict, engine: str) -> str:
    """The failed checks' evidence, one line: greedy's first divergence (greedy_depth's at an
    absolute position, named by its boundary), sampling's errors, impossible samples and rejected
    cases, any other check's notes."""
    parts = []
    for c in cert["checks"]:
        if c["passed"] is not False:
            continue
        d = c.get("details") or {}
        notes = c.get("notes") or ""
        if c["name"].startswith("greedy"):
            first = next(iter(d.get("divergences") or []), None)
            if first is None:
                parts.append(f"{c['name']}: {notes}"[:300])
                continue
            prompt_len = first.get("prompt_len") or len(first.get("prompt") or ())
            near = f" ({first['near']})" if first.get("near") else ""
            parts.append(
                f"{c['name']}: prompt of {prompt_len} tokens, position {first['position']}{near}: "
                f"refdec {first['reference']}, {engine} {first['candidate']}"
            )
        elif c["name"].startswith("sampling["):
            bad = [
                f"{k['case']}: {first_line(k['error'])}"
                if k.get("error")
                else f"{k['case']}: {k['impossible']} of {k['samples']} samples impossible"
                for k in d.get("cases") or []
                if k.get("impossible") or k.get("error")
            ]
            parts.append(
                f"sampling: rejected {d.get('rejected')}, no power {d.get('no_power')}"
                + ("; " + "; ".join(bad) if bad else "")
                + (f" ({notes[:300]})" if notes else "")
            )
        elif (d.get("raised") or {}).get("failed"):  # positions: requests that raised, skipped and counted
            r = d["raised"]
            parts.append(
                f"{c['name']}: {r['failed']} of {r['requests']} requests raised: "
                + first_line(r["first_message"])
            )
        else:
            parts.append(f"{c['name']}: {notes[:200]}" if notes else c["name"])
    return " / ".join(parts) or "—"
