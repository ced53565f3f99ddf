"""refdec/files.py's one artefact writer and reader: strict JSON with non-finite floats as
strings, the previous file kept when a value cannot be written, unreadable files named."""

import json
import math

import pytest

from refdec.errors import LoopcertError
from refdec.files import json_text, read_json, write_json


def test_non_finite_floats_are_written_as_strings_in_strict_json(tmp_path):
    path = write_json(tmp_path / "a.json", {"x": math.inf, "y": [-math.inf, math.nan], "z": (1, 2)})
    assert json.loads(path.read_text(), parse_constant=pytest.fail) == {
        "x": "inf",
        "y": ["-inf", "nan"],
        "z": [1, 2],
    }
    assert read_json(path, "report") == {"x": "inf", "y": ["-inf", "nan"], "z": [1, 2]}
    assert json_text({"x": 1}) == '{\n "x": 1\n}\n'


def test_the_old_file_stays_when_the_text_cannot_be_made(tmp_path):
    path = tmp_path / "a.json"
    path.write_text("old\n")

    class Unwritable:
        def tolist(self):
            raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        write_json(path, {"x": Unwritable()})
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_a_missing_or_broken_file_is_named(tmp_path):
    with pytest.raises(LoopcertError, match=r"nope\.json: no such shard file"):
        read_json(tmp_path / "nope.json", "shard file")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(LoopcertError, match=r"bad\.json: cannot read this certificate"):
        read_json(tmp_path / "bad.json", "certificate")


def test_numbers_come_back_from_their_strings(tmp_path):
    from refdec.values import numbers_back

    data = {"gain": math.nan, "tv": [0.5, math.inf, -math.inf], "label": "x"}
    back = numbers_back(read_json(write_json(tmp_path / "m.json", data), "report"))
    assert math.isnan(back["gain"]) and back["tv"] == [0.5, math.inf, -math.inf] and back["label"] == "x"
