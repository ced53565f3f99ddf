"""What a user mistypes ends in one clear usage error (exit 2) before any work, and what fails is
said on the console with its reason (issue 41: the probe's commands, each reproduced here)."""

from __future__ import annotations

import pytest

import proofs.run.run as run_mod
from loopcert.cli import main


class Started(Exception):
    pass


@pytest.fixture
def no_work(monkeypatch):
    def started(*_a, **_k):
        raise Started("the run started before its arguments were checked")

    monkeypatch.setattr(run_mod.CertifyRun, "__init__", started)


@pytest.mark.parametrize(
    "url, said",
    [
        ("http://127.0.0.1:abc/v1", "is not a URL (Port could not be cast to integer value as 'abc')"),
        ("http://[::1", "is not a URL (Invalid IPv6 URL)"),
        ("http://127.0.0.1:99999/v1", "is not a URL (Port out of range 0-65535)"),
        ("http://127.0.0.1:0/v1", "port 0 is outside 1..65535"),
        ("http:///v1", "has no valid host"),
        ("http://:8000/v1", "has no valid host"),
        ("http://a b:8000/v1", "has no valid host"),
    ],
)
@pytest.mark.parametrize("flag", ["--decoder", "--relative-to"])
def test_a_bad_decoder_url_is_a_usage_error_before_any_work(tmp_path, capsys, no_work, url, said, flag):
    argv = ["certify", "tiny-raven", "--out", str(tmp_path)]
    argv += ["--decoder", url] if flag == "--decoder" else ["--decoder", "tests.x:y", "--relative-to", url]
    if flag == "--relative-to":  # the decoder itself must be fine: a server spec checked the same way
        argv[argv.index("tests.x:y")] = "http://127.0.0.1:1/v1"
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"decoder URL {url!r}" in err and said in err and "the form is http://HOST:PORT/v1" in err
    assert "Traceback" not in err
