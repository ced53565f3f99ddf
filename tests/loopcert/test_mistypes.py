"""What a user mistypes ends in one clear usage error (exit 2) before any work, and what fails is
said on the console with its reason (the commands of a probe of the CLI, each reproduced here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from plans import SMALL_PLAN

import proofs.run.plan as plan_mod
import proofs.run.run as run_mod
from loopcert.cli import main
from proofs.decoders.protocol import NotApplicable
from refdec.sampling import sample, transform


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


# -- a decoder that does not apply is a usage error; a failed check says why on the console -------
class Shallow:
    """A wrong decoder: every token decided at depth 1 instead of R."""

    def __init__(self, model):
        self.model = model

    def generate(self, prompt, max_new_tokens, sampling, seed):
        ids, gen = list(prompt), torch.Generator().manual_seed(seed)
        for _ in range(max_new_tokens):
            law = transform(self.model.depth_logits(ids, [1])[0, -1], sampling)
            ids.append(int(law.argmax()) if sampling.greedy else sample(law, gen))
        return ids[len(prompt) :]


def declines(model):
    raise NotApplicable(f"mlx-lm cannot load {model.cfg.name}: no such architecture")


@pytest.fixture
def importable(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    monkeypatch.setitem(plan_mod.PLANS, "quick", SMALL_PLAN)


def _old_certificate(folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    files = {"certificate.md": "# loopcert certificate: PASS\n", "certificate.json": '{"old": true}\n'}
    for name, text in files.items():
        (folder / name).write_text(text)
    return files


def test_a_decoder_that_declines_the_certified_model_is_a_usage_error(tmp_path, capsys, importable):
    """Before: every check failed with the NotApplicable, and the FAIL certificate replaced the good
    one in --out. Now: exit 2 naming the decoder and why, the old certificate kept."""
    old = _old_certificate(tmp_path)
    rc = main(["certify", "tiny-raven", "--decoder", "test_mistypes:declines", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "test_mistypes:declines does not apply to the certified model tiny-raven" in err
    assert "mlx-lm cannot load tiny-raven: no such architecture" in err
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == old


@pytest.mark.tier2
def test_the_console_says_why_each_failed_check_failed(tmp_path, capsys, importable):
    rc = main(["certify", "tiny-raven", "--decoder", "test_mistypes:Shallow", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 1
    cert = json.loads((tmp_path / "certificate.json").read_text())
    said = [ln for ln in out.splitlines() if ln.startswith("failed: ")]
    lines = {name: next(ln for ln in said if ln.startswith(f"failed: {name}: ")) for name in cert["failed"]}
    assert len(said) == len(cert["failed"]) and "greedy_float64" in lines
    greedy = lines["greedy_float64"]
    assert "real bug(s)" in greedy and "new token" in greedy and "the reference's" in greedy, greedy
    for name, line in lines.items():  # every one with a reason, on one line
        assert len(line) > len(f"failed: {name}: ") + 10, line
