"""`loopcert certify --shard i/n` + `loopcert merge`: the merged certificate is the unsharded one
apart from timings; shards of different runs, missing or repeated shards are refused, named.
A reduced plan keeps each run to seconds."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from plans import SHARD_PLAN, untimed

import proofs.run.plan as plan_mod
from loopcert.cli import main
from proofs.run.shards import Shard
from refdec.errors import LoopcertError

N = 3  # shards of the run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One unsharded run and N shard runs of the same plan and seed."""
    mp = pytest.MonkeyPatch()
    mp.setitem(plan_mod.PLANS, "quick", SHARD_PLAN)
    root = tmp_path_factory.mktemp("shards")
    argv = ["certify", "tiny-ouro", "--seed", "2"]
    try:
        rc = main([*argv, "--out", str(root / "whole")])
        rcs = [main([*argv, "--shard", f"{i}/{N}", "--out", str(root / f"s{i}")]) for i in range(1, N + 1)]
    finally:
        mp.undo()
    return rc, rcs, root


def merge(root, *names, out="merged"):
    return main(["merge", *[str(root / n) for n in names], "--out", str(root / out)])


def test_merged_shards_equal_the_unsharded_certificate(runs):
    rc, rcs, root = runs
    assert rcs == [0] * N
    shards = [json.loads((root / f"s{i}" / "shard.json").read_text()) for i in range(1, N + 1)]
    units = shards[0]["units"]
    assert sum(len(s["results"]) for s in shards) == len(units) and len(units) > N
    assert sum(u.startswith("sampling/") for u in units) == 6  # 3 settings x 2 cases
    mutants = [u for u in units if u.startswith("mutant/")]
    assert mutants == ["mutant/always-accept", "mutant/greedy-near-miss"]  # one unit per mutant
    for i, s in enumerate(shards):  # a deterministic 1/N: round robin over the plan order
        assert sorted(s["results"]) == sorted(u for k, u in enumerate(units) if k % N == i)
    assert not (root / "s1" / "certificate.json").exists()
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(plan_mod.PLANS, "quick", SHARD_PLAN)
        assert merge(root, "s3", "s1", "s2") == rc  # any order
    whole = json.loads((root / "whole" / "certificate.json").read_text())
    merged = json.loads((root / "merged" / "certificate.json").read_text())
    assert untimed(merged) == untimed(whole)
    assert merged["verdict"] == whole["verdict"] == "PASS"
    assert merged["stamp"]["command"] == whole["stamp"]["command"]
    md = (root / "merged" / "certificate.md").read_text()
    assert md.startswith("# loopcert certificate: PASS")


def _tamper(root, src: str, dst: str, key: str, value) -> None:
    shutil.copytree(root / src, root / dst, dirs_exist_ok=True)
    data = json.loads((root / dst / "shard.json").read_text())
    data["identity"][key] = value
    (root / dst / "shard.json").write_text(json.dumps(data))


@pytest.mark.parametrize(
    "key,value",
    [
        ("seed", 99),
        ("plan_hash", "0" * 16),
        ("model", "tiny-raven"),
        ("commit", "deadbeef"),
        ("model_fingerprint", "f" * 64),
        ("decoder", "http://127.0.0.1:1/v1"),
    ],
)
def test_shards_of_different_runs_are_refused_naming_shard_and_field(runs, key, value, capsys):
    _, _, root = runs
    _tamper(root, "s2", f"bad-{key}", key, value)
    assert merge(root, "s1", f"bad-{key}", "s3", out=f"m-{key}") == 2
    err = capsys.readouterr().err
    assert f"shard 2/{N}" in err and f"has {key} {value!r}" in err
    assert not (root / f"m-{key}" / "certificate.json").exists()


def test_missing_and_repeated_shards_are_named(runs, capsys):
    _, _, root = runs
    assert merge(root, "s1", "s3", out="m-missing") == 2
    assert f"missing shard(s) 2/{N}" in capsys.readouterr().err
    assert merge(root, "s1", "s1", "s2", "s3", out="m-twice") == 2
    assert f"shard 1/{N} given twice" in capsys.readouterr().err
    assert merge(root, "whole", out="m-none") == 2  # a certificate folder is not a shard
    assert "no shard.json" in capsys.readouterr().err


def test_shards_that_planned_other_units_are_refused_naming_the_first_difference(runs, capsys):
    """The full plan picks its cases per machine from float64 laws (proofs.run.cases.choose_case): a
    shard that chose another case plans other unit ids, and merge names the first of them."""
    _, _, root = runs
    shutil.copytree(root / "s2", root / "bad-units", dirs_exist_ok=True)
    data = json.loads((root / "bad-units" / "shard.json").read_text())
    # a unit another shard runs (one of its own would also be a result no unit names: refused first)
    k = next(k for k, u in enumerate(data["units"]) if u.startswith("sampling/") and u not in data["results"])
    good = data["units"][k]
    data["units"][k] = good.rsplit("/", 1)[0] + "/T=0.3"
    (root / "bad-units" / "shard.json").write_text(json.dumps(data))
    assert merge(root, "s1", "bad-units", "s3", out="m-units") == 2
    err = capsys.readouterr().err
    assert f"shard 2/{N}" in err and "plans other work units" in err
    assert f"unit {k + 1}: {data['units'][k]!r} against {good!r}" in err
    assert not (root / "m-units" / "certificate.json").exists()


def _first(data: dict, prefix: str) -> str:
    return next(u for u in data["results"] if u.startswith(prefix))


def _del(key):
    return lambda d: d.pop(key)


def _set(key, value):
    return lambda d: d.__setitem__(key, value)


def _result(prefix, value):
    return lambda d: d["results"].__setitem__(_first(d, prefix), value)


def _drop_a_bin(d):
    t = d["results"][_first(d, "sampling/")]
    t["counts"][0] = t["counts"][0][:-1]


def _overcount(d):
    t = d["results"][_first(d, "sampling/")]
    t["counts"][0][0] += t["samples"] + 1


# the corruptions a probe of the CLI found: each raised KeyError / IndexError / TypeError, or was merged
# into a certificate whose check "could not run: KeyError: 'impossible'" without naming the shard
CORRUPT = {
    "no identity": (_del("identity"), "identity must be a JSON object"),
    "no results": (_del("results"), "'results' must be a JSON object"),
    "shard [2]": (_set("shard", [2]), "'shard' must be [i, n]"),
    "units null": (_set("units", None), "'units' must be a non-empty list"),
    "identity without seed": (lambda d: d["identity"].pop("seed"), "identity lacks 'seed'"),
    "seed a string": (lambda d: d["identity"].__setitem__("seed", "2"), "identity.seed has a bad value"),
    "sampling result {}": (_result("sampling/", {}), "lacks 'samples'"),
    "sampling result a list": (_result("sampling/", []), "must be a JSON object, got list"),
    "check result {}": (_result("check/", {}), "lacks field(s)"),
    "mutant row {}": (_result("mutant/", {}), "lacks field(s)"),
    "a negative count": (
        lambda d: d["results"][_first(d, "sampling/")]["counts"][0].__setitem__(0, -1),
        "counts has a bad value",
    ),
    "a unit of another shard": (
        lambda d: d["results"].__setitem__(d["units"][0], {"unit_error": "x"}),
        "does not take",
    ),
    "a missing unit": (lambda d: d["results"].pop(_first(d, "check/")), "results lacks unit(s)"),
    "a bin too few": (_drop_a_bin, "bins per view, its law has"),
    "more counted than drawn": (_overcount, "samples of"),
}


@pytest.mark.parametrize("name", sorted(CORRUPT))
def test_a_corrupt_shard_is_named_with_its_folder_and_field_and_nothing_is_written(runs, capsys, name):
    _, _, root = runs
    corrupt, said = CORRUPT[name]
    bad = "bad-" + name.replace(" ", "-").replace("{}", "empty").replace("[", "").replace("]", "")
    for victim in ("s2", "s1", "s3"):  # the first shard that holds what the corruption needs
        data = json.loads((root / victim / "shard.json").read_text())
        try:
            corrupt(data)
        except StopIteration:
            continue
        break
    else:
        raise AssertionError(f"no shard holds what {name!r} corrupts")
    shutil.copytree(root / victim, root / bad, dirs_exist_ok=True)
    (root / bad / "shard.json").write_text(json.dumps(data))
    out = root / f"m-{bad}"
    folders = [bad if s == victim else s for s in ("s1", "s2", "s3")]
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(plan_mod.PLANS, "quick", SHARD_PLAN)
        rc = merge(root, *folders, out=out.name)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"{root / bad}: shard.json" in err and said in err, err
    assert "Traceback" not in err and not out.exists()


@pytest.mark.parametrize("spec", ["0/3", "4/3", "1/0", "x", "1-3"])
def test_bad_shard_spec(spec):
    with pytest.raises(LoopcertError, match="--shard"):
        Shard.parse(spec)


def test_shard_spec():
    s = Shard.parse(" 2/3 ")
    assert (s.index, s.count, str(s)) == (2, 3, "2/3")
    assert [k for k in range(9) if s.takes(k)] == [1, 4, 7]


def test_a_shard_with_non_finite_values_is_written_and_read_back(tmp_path):
    """A mutant row below the plan's power carries detectable_tv = inf: the shard is written with
    the one artefact rule (strict JSON, "inf" as a string, as certificate.json writes it) and read
    back; before, json.dumps(allow_nan=False) raised and the shard's work was lost."""
    from proofs.run.shards import write_shard
    from refdec.files import read_json

    data = {"shard": [3, 8], "identity": {}, "units": ["mutant/a"], "results": {"mutant/a": {"tv": math.inf}}}
    path = write_shard(tmp_path / "s3", data)
    text = path.read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert read_json(path, "shard")["results"] == {"mutant/a": {"tv": "inf"}}  # (a bare dict: not a
    # whole shard, which read_shard would refuse field by field)


def test_a_shard_that_cannot_be_written_exits_2_naming_it(tmp_path, capsys, monkeypatch):
    """Not exit 1 (a FAIL verdict): a usage-class error naming the folder and why, before the run."""
    monkeypatch.setitem(plan_mod.PLANS, "quick", SHARD_PLAN)
    blocker = tmp_path / "taken"
    blocker.write_text("a file where the shard folder should go\n")
    rc = main(["certify", "tiny-ouro", "--jobs", "1", "--shard", "1/40", "--out", str(blocker)])
    err = capsys.readouterr().err
    assert rc == 2 and f"--out {blocker}: is a file, not a folder" in err


def test_a_shard_whose_write_fails_at_the_end_is_kept_and_named(tmp_path, capsys, monkeypatch):
    """The folder was fine at the start and the disk is full at the end: the shard is kept in a
    temporary folder the error names (exit 2), never lost."""
    import errno
    import os
    import tempfile

    import refdec.files as files_mod

    monkeypatch.setitem(plan_mod.PLANS, "quick", SHARD_PLAN)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    out = tmp_path / "s1"
    real = files_mod.write_json

    def full(path, data):
        if path.parent == out:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, data)

    monkeypatch.setattr(files_mod, "write_json", full)
    rc = main(["certify", "tiny-ouro", "--jobs", "1", "--shard", "1/40", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and f"cannot write the shard to {out / 'shard.json'}" in err and "No space left" in err
    kept = Path(err.split("is kept in ")[1].split(":")[0])
    assert kept.parent == tmp_path / "tmp"
    assert json.loads((kept / "shard.json").read_text())["shard"] == [1, 40]


@pytest.mark.slow
def test_all_8_shards_of_the_quick_plan_merge_into_the_unsharded_certificate(tmp_path):
    """The real quick plan on tiny-raven in 8 shards, mutants below the plan's power included
    (their rows carry detectable_tv = inf, which once made a shard lose its work): every shard is
    written, and the merge equals the unsharded certificate apart from timings. Minutes of CPU:
    nightly (tox -e nightly)."""
    argv = ["certify", "tiny-raven", "--quick", "--jobs", "1", "--seed", "0"]
    assert [main([*argv, "--shard", f"{i}/8", "--out", str(tmp_path / f"s{i}")]) for i in range(1, 9)] == [
        0
    ] * 8
    texts = [(tmp_path / f"s{i}" / "shard.json").read_text() for i in range(1, 9)]
    assert any('"inf"' in t for t in texts)  # the case that used to crash the writer is in the run
    assert merge(tmp_path, *[f"s{i}" for i in range(1, 9)]) == 0
    assert main([*argv, "--out", str(tmp_path / "whole")]) == 0
    whole = json.loads((tmp_path / "whole" / "certificate.json").read_text())
    merged = json.loads((tmp_path / "merged" / "certificate.json").read_text())
    assert untimed(merged) == untimed(whole) and merged["verdict"] == "PASS"
