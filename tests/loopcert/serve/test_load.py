"""The bounded loopback load test of `loopcert serve`: nothing lost or duplicated,
every response equal to generate for its seed. The default run is short (8 clients, a few
seconds); the 32-client, 30-second run is slow-marked (and `loopcert bench --serve-load`)."""

from __future__ import annotations

import json

import pytest

for extra in ("httpx", "fastapi", "uvicorn"):  # the serve extra; tox's py env installs it
    pytest.importorskip(extra)

from loopcert.cli import main  # noqa: E402
from loopcert.serve.loadtest import percentile  # noqa: E402


def run_bench(tmp_path, clients: int, seconds: int, requests: int, tokens: int) -> tuple[int, dict]:
    argv = [
        "bench",
        "default",
        "--serve-load",
        "--clients",
        str(clients),
        "--seconds",
        str(seconds),
        "--requests",
        str(requests),
        "--load-tokens",
        str(tokens),
        "--out",
        str(tmp_path),
    ]
    rc = main(argv)
    return rc, json.loads((tmp_path / "serve-load.json").read_text())


def check(res: dict, clients: int) -> None:
    s = res["summary"]
    assert s["completed"] == s["sent"] > 0 and s["failed"] == 0
    assert s["lost"] == [] and s["duplicated"] == []
    assert res["mismatch_count"] == 0 and res["verify"]["checked"] == s["completed"]
    assert s["latency_p50_s"] <= s["latency_p99_s"] <= s["latency_max_s"]
    assert s["tokens_per_s"] > 0 and res["in_process"]["sequential_tokens_per_s"] > 0
    assert 1 <= s["largest_batch"] <= clients
    h = res["server_health"]
    assert h["waiting"] == 0 and h["running"] == 0


@pytest.mark.tier2
def test_short_load(tmp_path):
    rc, res = run_bench(tmp_path, clients=8, seconds=3, requests=40, tokens=8)
    assert rc == 0 and res["passed"]
    check(res, 8)
    md = (tmp_path / "serve-load.md").read_text()
    assert md.startswith("# loopcert serve under load: pass") and "latency p50 / p99" in md
    # a compiled server compiles on its first requests: the report says its figures include that
    from reports.serve_load import render

    assert "include those compiles" not in md
    assert "include those compiles" in render({**res, "command_args": [*res["command_args"], "--compile"]})


@pytest.mark.slow
def test_32_clients_30_seconds(tmp_path):
    rc, res = run_bench(tmp_path, clients=32, seconds=30, requests=100000, tokens=16)
    assert rc == 0 and res["passed"]
    check(res, 32)
    assert res["summary"]["largest_batch"] > 1  # requests that waited together were batched


def test_percentile_is_nearest_rank():
    xs = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(xs, 50) == 3.0 and percentile(xs, 99) == 5.0 and percentile(xs, 0) == 1.0
    assert percentile(list(range(1, 101)), 99) == 99
