"""Run pytest once under each ATEN_CPU_CAPABILITY this CPU supports (tox -e nightly).

torch dispatches reductions (sum, matmul, softmax) to kernels picked by CPU capability, and
those kernels sum in different orders: a test that compares such results with `==` passes on
one CPU and fails on another. Running the suite under each capability catches that here.

    python .ci/capabilities.py [PYTEST ARGS...]     # exit 0 only if every supported pass is green

A capability is supported when torch, started with ATEN_CPU_CAPABILITY=<cap>, reports it
(torch falls back to the best the CPU has, with a warning, for one it lacks); unsupported ones
are named as skipped, never dropped silently.
"""

from __future__ import annotations

import os
import subprocess
import sys

CAPABILITIES = ("default", "avx2", "avx512")
PROBE = "import torch; print(torch.backends.cpu.get_cpu_capability())"


def supported(cap: str) -> bool:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": cap}
    got = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", PROBE], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    return got.lower() == cap


def main(argv: list[str]) -> int:
    runs, skipped = [], []
    for cap in CAPABILITIES:
        (runs if supported(cap) else skipped).append(cap)
    if skipped:
        print(f"capabilities: skipped {', '.join(skipped)} (this CPU lacks them)", flush=True)
    results = {}
    for cap in runs:
        print(f"=== pytest under ATEN_CPU_CAPABILITY={cap}", flush=True)
        env = {**os.environ, "ATEN_CPU_CAPABILITY": cap}
        results[cap] = subprocess.run([sys.executable, "-m", "pytest", *argv], env=env).returncode
    print(
        "capabilities: "
        + ", ".join(f"{c} {'passed' if rc == 0 else f'FAILED (exit {rc})'}" for c, rc in results.items())
        + (f"; skipped {', '.join(skipped)}" if skipped else ""),
        flush=True,
    )
    return max(results.values(), default=1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
