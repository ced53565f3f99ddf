"""trainer.card on a tiny trained model: every section renders, target lines carry the measured
values, and the PASS/FAIL rules flip on figures that miss them."""

import copy
import json

import pytest
from corpus import write_corpus

from trainer.card import TARGETS, main, measure, render, targets
from trainer.train import RECIPES, TrainConfig, train


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    root = write_corpus(tmp_path_factory.mktemp("corpus"), files=60, defs=30)
    out = tmp_path_factory.mktemp("model")
    tc = TrainConfig(
        **(
            dict(RECIPES["huginn"])
            | dict(
                model="tiny-huginn",
                steps=20,
                seq_len=64,
                batch_size=4,
                lr=1e-2,
                warmup=3,
                mean_depth=2.0,
                backprop_k=2,
                log_every=5,
                seq_schedule=((0.0, 64), (0.5, 128)),
                data_root=str(root),
            )
        )
    )
    train(tc, tmp_path_factory.mktemp("ckpt"), out, log=lambda *a, **k: None)
    return out


def test_card_renders_every_section(tiny_model):
    m = measure(tiny_model, n_windows=3, window=64, sample_tokens=8, log=lambda *a: None, long_windows=1)
    text = render(m, {"date": "today", "commit": "abc", "torch": "x", "python": "3"})
    for heading in (
        "## Targets (issue 14)",
        "### Depth profile against depth R",
        "bpb(r) - bpb(R)",
        "### Depth profile by context position",
        "### Huginn's exit rule",
        "### Long context",
        "### State dynamics",
        "Jacobian gain",
        "Sensitivity of the readouts",
        "Raven fit TV",
        "## Greedy samples",
    ):
        assert heading in text, heading
    assert len(m["targets"]) == 7
    R = m["config"]["recurrence"]
    bpb_R = m["eval"]["bpb"][str(R)]
    assert f"{bpb_R:.3f}" in text
    for t in m["targets"]:
        assert ("PASS" if t["pass"] else "FAIL") in text and t["value"] in text
    assert len(m["dynamics"]["step_sizes"]) == 2 * R - 1
    assert sum(int(v) for v in m["eval"]["exit_hist"].values()) == m["eval"]["n_positions"]


def test_target_rules_flip(tiny_model):
    m = measure(
        tiny_model,
        n_windows=2,
        window=32,
        sample_tokens=4,
        log=lambda *a: None,
        long_windows=0,
        samples=False,
    )
    good = copy.deepcopy(m)
    bpb = {1: 2.2, 2: 1.95, 3: 1.9, 4: 1.85, 6: 1.8, 8: 1.79, 16: 1.75}
    good["config"]["recurrence"] = 16
    good["eval"]["bpb"] = {str(r): v for r, v in bpb.items()}
    good["eval"]["agree"] = {"2": 0.85}
    good["envelope"]["alpha"] = 1.2
    good["long_context"] = {"bpb": {"0-256": 2.0, "1024-2048": 1.9}}
    assert all(t["pass"] for t in targets(good)), targets(good)
    bad = copy.deepcopy(good)
    bad["eval"]["bpb"] |= {"16": TARGETS["bpb_R_max"] + 0.01, "3": 1.96}  # misses bpb(R), monotone
    bad["eval"]["agree"] = {"2": 0.95}
    bad["envelope"]["alpha"] = 6.7
    bad["long_context"] = {"bpb": {"0-256": 2.0, "1024-2048": 2.4}}
    assert not any(t["pass"] for t in targets(bad)[:1] + targets(bad)[4:])
    assert not targets(bad)[1]["pass"]


def test_card_cli_writes_atomically(tiny_model, tmp_path):
    out = tmp_path / "CARD.md"
    assert (
        main(
            [
                "--model-dir",
                str(tiny_model),
                "--out",
                str(out),
                "--windows",
                "2",
                "--window",
                "32",
                "--sample-tokens",
                "4",
                "--long-windows",
                "0",
            ]
        )
        == 0
    )
    assert "## Targets (issue 14)" in out.read_text()
    assert json.loads((tmp_path / "card.json").read_text())["targets"]
    assert main(["--model-dir", str(tmp_path / "missing")]) == 2
