"""What --executor ray says without a cluster, in the default run (no ray needed): a missing ray
is one line naming the extra; units beyond the cluster's resources are counted as waiting."""

from __future__ import annotations

import sys

from loopcert.cli import main
from proofs.run.ray_executor import RAY_EXTRA, waiting_line


def test_without_ray_one_line_names_the_extra(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    assert main(["certify", "tiny-ouro", "--executor", "ray", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert RAY_EXTRA in err and RAY_EXTRA == "pip install 'loopcert[ray]'" and len(err.splitlines()) == 1
    assert not (tmp_path / "certificate.json").exists()


def test_units_beyond_the_cluster_wait_and_are_counted():
    assert waiting_line(4, 1, 10, "GPU", {"GPU": 1.0, "CPU": 16.0}) == (
        "  1/10 work units done, 4 submitted: 3 waiting for resources (1 GPU each; the cluster has 1)"
    )
    assert "4 waiting" in waiting_line(4, 0, 10, "GPU", {"CPU": 16.0})  # no GPU at all: all wait
    assert waiting_line(2, 0, 10, "CPU", {"CPU": 2.0}) is None  # every unit in flight runs


def test_ray_address_needs_the_ray_executor(tmp_path, capsys):
    assert main(["certify", "tiny-ouro", "--ray-address", "h:1", "--out", str(tmp_path)]) == 2
    assert "--executor ray" in capsys.readouterr().err
