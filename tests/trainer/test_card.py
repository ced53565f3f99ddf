"""trainer.card on a tiny trained model: every section renders (reports.model_card), target lines carry
the measured values, and the PASS/FAIL rules flip on figures that miss them."""

import dataclasses
import json

import pytest
from corpus import tiny_run, write_corpus

from refdec.errors import LoopcertError
from reports.model_card import ModelCard, render_card
from trainer.card import TARGETS, main, measure, targets
from trainer.train import train

STAMP = {"date": "today", "commit": "abc", "torch": "x", "python": "3"}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    root = write_corpus(tmp_path_factory.mktemp("corpus"), files=60, defs=30)
    out = tmp_path_factory.mktemp("model")
    tc = tiny_run(root, "huginn", steps=20, mean_depth=2.0, seq_schedule=((0.0, 64), (0.5, 128)))
    train(tc, tmp_path_factory.mktemp("ckpt"), out, log=lambda *a, **k: None)
    return out


def test_card_renders_every_section(tiny_model):
    card = measure(tiny_model, n_windows=3, window=64, sample_tokens=8, log=lambda *a: None, long_windows=1)
    text = render_card(card, STAMP)
    for heading in (
        "## Targets\n",
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
    assert "issue" not in text.lower()
    assert len(card.targets) == 7
    R = card.config["recurrence"]
    bpb_R = card.eval["bpb"][str(R)]
    assert f"{bpb_R:.3f}" in text
    for t in card.targets:
        assert ("PASS" if t["pass"] else "FAIL") in text and t["value"] in text
    assert len(card.dynamics["step_sizes"]) == 2 * R - 1
    assert sum(int(v) for v in card.eval["exit_hist"].values()) == card.eval["n_positions"]
    # the recipe has no shallow loss: the loss table has no shallow column; with one, it has
    assert "shallow bpb" not in text
    aux = [h | {"aux_bpb": 1.5} for h in card.history]
    with_aux = render_card(dataclasses.replace(card, history=aux), STAMP)
    assert "shallow bpb" in with_aux and "shallow = aux depth s" in with_aux
    # card.json round-trips to the same card and the same markdown; a foreign dict is refused by name
    again = ModelCard.from_dict(json.loads(json.dumps({"stamp": STAMP, **card.to_dict()})))
    assert render_card(again, STAMP) == text
    with pytest.raises(LoopcertError, match="missing keys.*'targets'.*unknown keys.*'extra'"):
        ModelCard.from_dict({k: v for k, v in card.to_dict().items() if k != "targets"} | {"extra": 1})


def test_target_rules_flip(tiny_model):
    card = measure(
        tiny_model,
        n_windows=2,
        window=32,
        sample_tokens=4,
        log=lambda *a: None,
        long_windows=0,
        samples=False,
    )
    bpb = {1: 2.2, 2: 1.95, 3: 1.9, 4: 1.85, 6: 1.8, 8: 1.79, 16: 1.75}
    good = dataclasses.replace(
        card,
        config=card.config | {"recurrence": 16},
        eval=card.eval | {"bpb": {str(r): v for r, v in bpb.items()}, "agree": {"2": 0.85}},
        envelope=card.envelope | {"alpha": 1.2},
        long_context={"bpb": {"0-256": 2.0, "1024-2048": 1.9}},
    )
    assert all(t["pass"] for t in targets(good)), targets(good)
    bad = dataclasses.replace(
        good,
        # misses bpb(R) and the monotone line
        eval=good.eval | {"bpb": good.eval["bpb"] | {"16": TARGETS["bpb_R_max"] + 0.01, "3": 1.96}},
        envelope=good.envelope | {"alpha": 6.7},
        long_context={"bpb": {"0-256": 2.0, "1024-2048": 2.4}},
    )
    bad = dataclasses.replace(bad, eval=bad.eval | {"agree": {"2": 0.95}})
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
    saved = json.loads((tmp_path / "card.json").read_text())
    assert saved["targets"] and "## Targets\n" in out.read_text()
    assert render_card(ModelCard.from_dict(saved), saved["stamp"]) == out.read_text()
    assert main(["--model-dir", str(tmp_path / "missing")]) == 2
