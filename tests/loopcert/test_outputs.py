"""Nothing a user mistypes costs a finished run: every place a command writes is
checked before any work (a usage error, exit 2, naming the flag, the path and why); a run whose
final write still fails keeps its result where it says; the two report files change together.

The probe's commands: `loopcert certify tiny-raven --quick --out afile` (a file), `--out
afile/sub`, an unwritable place, `--plan-out`, a shard's folder and `loopcert merge --out`: each
ran the whole plan and then died in a traceback (exit 1) before these checks."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from plans import SMALL_PLAN

import loopcert.commands.certify as certify_cmd
import proofs.run.plan as plan_mod
import proofs.run.run as run_mod
import refdec.files as files_mod
from loopcert.cli import main
from refdec.errors import LoopcertError
from refdec.files import check_output_folder, write_together

UNWRITABLE = "/proc/loopcert-nowhere"  # no one, not even root, makes a folder in /proc


class Started(Exception):
    pass


@pytest.fixture
def no_work(monkeypatch):
    """Any run that gets as far as building its checks fails the test: the outputs are checked first."""

    def started(*_a, **_k):
        raise Started("the run started before its outputs were checked")

    monkeypatch.setattr(run_mod.CertifyRun, "__init__", started)


def bad_places(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """name -> (path, what the error must say)."""
    afile = tmp_path / "afile"
    afile.write_text("hi\n")
    return {
        "a file": (str(afile), "is a file, not a folder"),
        "below a file": (str(afile / "sub"), f"{afile} is a file, not a folder"),
        "unwritable": (UNWRITABLE + "/sub", "cannot write there"),
    }


@pytest.mark.parametrize("place", ["a file", "below a file", "unwritable"])
@pytest.mark.parametrize(
    "argv",
    [
        ["certify", "tiny-raven", "--quick"],
        ["certify", "tiny-raven", "--quick", "--shard", "1/2"],
        ["merge", "NOSHARD"],
    ],
    ids=["certify", "shard", "merge"],
)
def test_a_bad_out_is_a_usage_error_before_any_work(tmp_path, capsys, no_work, place, argv):
    path, why = bad_places(tmp_path)[place]
    rc = main([*argv, "--out", path])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"--out {path}: " in err and why in err
    assert "Traceback" not in err
    assert Path(tmp_path / "afile").read_text() == "hi\n"


@pytest.mark.parametrize("place", ["below a file", "unwritable", "a folder"])
def test_a_bad_plan_out_is_a_usage_error_before_any_work(tmp_path, capsys, no_work, place):
    places = bad_places(tmp_path)
    path, why = places[place] if place != "a folder" else (str(tmp_path), "is a folder; give a file name")
    if place != "a folder":
        path += "/plan.json"
    rc = main(["certify", "tiny-raven", "--plan-out", path])
    err = capsys.readouterr().err
    assert rc == 2 and f"--plan-out {path}" in err and why.split(" is a")[0] in err, err


def test_the_check_leaves_nothing_behind(tmp_path):
    out = tmp_path / "a" / "b" / "c"
    assert check_output_folder(out, "--out", ("certificate.json",)) == out
    assert list(tmp_path.iterdir()) == []  # the folders it made to try are gone again
    (tmp_path / "d" / "certificate.json").mkdir(parents=True)
    with pytest.raises(LoopcertError, match=r"certificate.json is a folder, where certificate.json would go"):
        check_output_folder(tmp_path / "d", "--out", ("certificate.json",))


@pytest.mark.tier2
def test_a_certificate_that_cannot_be_written_at_the_end_is_kept_and_named(tmp_path, capsys, monkeypatch):
    """The disk fills during the run: the result is kept in a temporary folder the error names,
    exit 2, the verdict still said."""
    monkeypatch.setitem(plan_mod.PLANS, "quick", SMALL_PLAN)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR is read again
    out = tmp_path / "out"
    real = certify_cmd.write_together

    def full_disk(texts):
        if any(Path(p).parent == out for p in texts):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(texts)

    monkeypatch.setattr(certify_cmd, "write_together", full_disk)
    rc = main(["certify", "tiny-raven", "--quick", "--jobs", "1", "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 2, cap.err
    assert f"cannot write the certificate to {out}: No space left on device" in cap.err
    assert "PASS" in cap.out or "FAIL" in cap.out  # the verdict was said
    kept = Path(cap.err.split("is kept in ")[1].split(":")[0])
    assert kept.parent == tmp_path / "tmp"
    cert = json.loads((kept / "certificate.json").read_text())
    assert cert["verdict"] in ("PASS", "FAIL") and (kept / "certificate.md").is_file()
    assert not out.exists() or not (out / "certificate.json").exists()


def test_the_two_report_files_change_together(tmp_path, monkeypatch):
    """The second rename fails: the first file is put back, so certificate.json (renamed last)
    never stands beside another run's certificate.md, and no temporary file is left."""
    md, js = tmp_path / "certificate.md", tmp_path / "certificate.json"
    write_together({md: "old md", js: "old json"})
    real = os.replace
    calls = []

    def second_fails(src, dst):
        if str(dst) == str(js) and str(src).endswith(".tmp"):
            calls.append(dst)
            raise OSError(errno.EIO, "I/O error")
        return real(src, dst)

    monkeypatch.setattr(files_mod.os, "replace", second_fails)
    with pytest.raises(OSError):
        write_together({md: "new md", js: "new json"})
    assert calls and (md.read_text(), js.read_text()) == ("old md", "old json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["certificate.json", "certificate.md"]
    monkeypatch.setattr(files_mod.os, "replace", real)
    write_together({md: "new md", js: "new json"})
    assert (md.read_text(), js.read_text()) == ("new md", "new json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["certificate.json", "certificate.md"]


def test_a_full_disk_while_writing_leaves_both_old_files(tmp_path, monkeypatch):
    md, js = tmp_path / "certificate.md", tmp_path / "certificate.json"
    write_together({md: "old md", js: "old json"})
    real = Path.write_text

    def full(self, text, *a, **k):
        if text == "new json":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, text, *a, **k)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError):
        write_together({md: "new md", js: "new json"})
    assert (md.read_text(), js.read_text()) == ("old md", "old json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["certificate.json", "certificate.md"]


def test_when_no_temporary_folder_can_be_made_the_result_goes_to_stdout(monkeypatch, capsys):
    """The last resort: never only in memory."""
    import tempfile

    def no_tmp(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkdtemp", no_tmp)
    err = certify_cmd.keep_elsewhere(
        "certificate",
        "cannot write the certificate to out: No space left on device",
        lambda f: print('{"v": 1}'),
    )
    cap = capsys.readouterr()
    assert cap.out == '{"v": 1}\n' and "follows on stdout" in cap.err
    assert str(err).endswith("No space left on device; the certificate was printed on stdout")


def test_the_stamped_command_of_a_planned_run_names_its_plan_file():
    """--plan FILE fixes the cases and N of every check: the stamp's command, which says how to rerun
    the certificate, names it (a rerun without it plans anew, maybe other cases)."""
    import argparse

    p = argparse.ArgumentParser()
    certify_cmd.add_arguments(p)
    for argv, plan in ((["tiny-raven", "--plan", "p.json"], "p.json"), (["tiny-raven"], None)):
        words = certify_cmd.command_line(p.parse_args(argv), "tiny-raven").split()
        assert ("--plan" in words) == (plan is not None)
        if plan:
            assert words[words.index("--plan") + 1] == plan
