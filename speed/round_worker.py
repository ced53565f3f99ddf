"""One side of the paired speed gate (proofs/gates/paired.py): a process that times rounds on request.

The paired gate starts one of these on the checked-out code and one on the reference tree (the
baseline's commit, exported), each importing its own fastdec, and asks them for timed rounds in
turn, so that both trees are timed on the same host within seconds of each other. This file is
the contract between two versions of loopcert: a reference tree answers with its own
PAIRED_PROTOCOL, and the gate refuses a reference whose protocol differs from its own.

Protocol: one JSON object per line on stdin, one reply per line on stdout (nothing else is
written there: everything else this process prints goes to stderr).

    {"op": "setup", "model": NAME_OR_PATH, "seed_weights": 0, "dtype": "float32",
     "prompts": [[ids], ...], "tokens": 32, "seed": 0, "device": "cpu", "settings": [LABEL, ...],
     "modes": ["greedy", "sampling"], "slow": [LABEL, FRACTION] or null}
        -> {"protocol": PAIRED_PROTOCOL, "fingerprint": ..., "source": the folder of its fastdec}
    {"op": "round", "mode": MODE}
        -> {"cpu": {LABEL: decode seconds, process time}, "wall": {LABEL: wall}, "tokens_sha": {LABEL: hash}}
    {"op": "exit"}                       -> {} and the process ends
A request it cannot serve -> {"error": "..."}; it then ends with status 1.

`slow` makes one setting dearer per engine step (speed/slowdown.py): the negative control
of the paired gate, and of proofs.gates.false_alarm --slow.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PAIRED_PROTOCOL = 1


class Worker:
    """The state one worker keeps between requests: its decoders, built once per mode."""

    def __init__(self):
        self.decoders: dict[str, dict] = {}
        self.setup: dict | None = None

    def handle(self, req: dict) -> dict:
        op = req.get("op")
        if op == "setup":
            return self._setup(req)
        if op == "round":
            return self._round(req["mode"])
        if op == "exit":
            return {}
        raise ValueError(f"unknown op {op!r}")

    def _setup(self, req: dict) -> dict:
        import torch

        import fastdec
        from fastdec import Decoder
        from refdec.load import exact_fingerprint, load_model
        from speed.settings import gate_settings
        from speed.slowdown import slow

        torch.set_num_threads(1)  # the gate's clock is process time: one thread, as loopcert bench
        device = req.get("device", "cpu")
        model = load_model(req["model"], seed=req["seed_weights"], dtype=req["dtype"]).to(device)
        by_label = {st.label: st for st in gate_settings(model.cfg.recurrence)}
        missing = [lb for lb in req["settings"] if lb not in by_label]
        if missing:
            raise ValueError(f"this tree has no gate setting {missing}; it has {list(by_label)}")
        slowed, fraction = req.get("slow") or (None, None)
        for mode in req["modes"]:
            decs = {}
            for label in req["settings"]:
                dec = Decoder(model, by_label[label], device=device)
                decs[label] = slow(dec, fraction) if label == slowed else dec
            self.decoders[mode] = decs
        self.setup = req
        return {
            "protocol": PAIRED_PROTOCOL,
            "fingerprint": exact_fingerprint(model),
            "source": str(Path(fastdec.__file__).resolve().parent.parent),
        }

    def _round(self, mode: str) -> dict:
        from speed.timing import MODES, time_runs, tokens_sha

        if self.setup is None:
            raise ValueError("round before setup")
        req = self.setup
        t = time_runs(self.decoders[mode], req["prompts"], req["tokens"], 1, MODES[mode], req["seed"])
        return {
            "cpu": {lb: rec["cpu"][0] for lb, rec in t.items()},
            "wall": {lb: rec["wall"][0] for lb, rec in t.items()},
            "tokens_sha": {lb: tokens_sha(rec["tokens"]) for lb, rec in t.items()},
        }


def main() -> int:
    out = sys.stdout
    sys.stdout = sys.stderr  # stdout carries the replies only
    worker = Worker()
    for line in sys.stdin:
        try:
            req = json.loads(line)
            reply = worker.handle(req)
        except Exception as e:  # reported to the gate, which names this tree
            out.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
            out.flush()
            return 1
        out.write(json.dumps(reply) + "\n")
        out.flush()
        if req.get("op") == "exit":
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
