"""refdec.stamp: one stamp, one format, for the certificate, the speedup report, the gate baseline
and the model card."""

import datetime

import torch

from proofs.run.certify import certificate_stamp
from proofs.run.plan import QUICK
from refdec import stamp as stamp_mod

KEYS = {
    "commit",
    "date",
    "python",
    "torch",
    "numpy",
    "cuda",
    "platform",
    "device",
    "device_name",
    "threads",
    "cpu_count",
    "dtype",
    "model",
    "seeds",
}


def test_stamp_fields():
    s = stamp_mod.stamp("tiny-raven", "cpu", torch.float64, {"prompt i": "i"})
    assert set(s) == KEYS
    assert s["dtype"] == "float64" and s["device"] == "cpu" and s["model"] == "tiny-raven"
    assert s["torch"] == torch.__version__ and s["threads"] == torch.get_num_threads()
    assert datetime.datetime.fromisoformat(s["date"]).tzinfo is not None  # UTC, ISO 8601
    assert s["commit"] == "unknown" or len(s["commit"].split()[0]) == 40  # full sha (+ dirty note)


def test_git_commit_outside_a_checkout(monkeypatch, tmp_path):
    monkeypatch.setattr(stamp_mod, "ROOT", tmp_path)
    assert stamp_mod.git_commit() == "unknown"


def test_the_certificate_extends_the_one_stamp():
    s = certificate_stamp("m", "fastdec", "cpu", torch.float32, QUICK, 3)
    assert KEYS <= set(s) and (s["seed"], s["mode"], s["decoder"]) == (3, "quick", "fastdec")
    assert s["seeds"]["sampling"] == "3 + i for sample i of each case"
    assert s["seeds"]["mutants"] == "3 + i for sample i of each mutant case"
