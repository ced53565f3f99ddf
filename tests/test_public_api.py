"""The public surface holds (docs/decoders.md, "The public surface").

PUBLIC is frozen here, by hand: every name a user's decoder, script or test may import, at the
path the docs give. Each must import from there, without a warning; one that disappears fails
`test_every_public_name_imports_from_its_place` unless an alias still answers it with a
DeprecationWarning naming the new path. loopcert.api may not grow a name this list lacks. The old
paths of the 2026-12-01 redesign (proofs/moved.py) answer every name the README of that day named,
with the warning, until REMOVED_IN; nothing of loopcert imports them; every first-party import of
the README's and docs' code imports as written.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
import warnings
from pathlib import Path

import pytest

import loopcert.api
from proofs.moved import MOVED, PUBLIC_HOME, REMOVED_IN, MovedWarning

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = ("refdec", "fastdec", "analysis", "speed", "proofs", "reports", "trainer", "loopcert")

# frozen: add a name when it becomes public; never remove one (move it behind an alias instead).
# A package's names stand by kind (constants and functions, classes), each line sorted
PUBLIC: dict[str, tuple[str, ...]] = {
    "loopcert.api": (
        "BatchDecoder",
        "Certificate",
        "CertifyPlan",
        "PositionsPlan",
        "QUICK_PLAN",
        "FULL_PLAN",
        "SMOKE_PLAN",
        "CheckResult",
        "DETAIL_KINDS",
        "Decoder",
        "Details",
        "Factory",
        "HTTPOptions",
        "ENGINE_FIELDS",
        "LoopcertError",
        "LoopedLM",
        "NotApplicable",
        "Prediction",
        "Refused",
        "SAMPLER_ORDERS",
        "SamplingParams",
        "SamplingSupport",
        "Seeds",
        "Stamp",
        "Transport",
        "batch_call_limit",
        "certify",
        "declared_compute_dtype",
        "declared_max_batch",
        "declared_sampler_order",
        "declared_sampling",
        "load_model",
        "predict",
        "read_certificate",
        "render_certificate",
    ),
    # a decoder author's own tests (docs/decoders.md "Certify from Python and from your tests")
    "loopcert.testing": ("SMOKE_PLAN", "assert_lossless", "CertifyPlan"),
    # the protocols at the path docs/decoders.md named before loopcert.api existed
    "proofs.decoders.protocol": (
        "BatchDecoder",
        "Decoder",
        "NotApplicable",
        "batch_call_limit",
        "declared_compute_dtype",
        "declared_max_batch",
        "declared_sampler_order",
    ),
    "refdec": (
        *("PRESETS", "generate", "get_preset", "load_model", "save_model", "transform"),
        *("LoopcertError", "LoopedLM", "ModelConfig", "SamplingParams"),
    ),
    # what docs/checkpoints.md tells users to call
    "refdec.checkpoints": ("load_checkpoint", "write_published"),
    "trainer.export": ("default_prompts",),
    "fastdec": (
        *("LOSSLESS", "STRATEGIES", "WIDTHS", "default_draft_depth"),
        *("ContinuousBatch", "DecodeConfig", "Decoder", "Engine", "GenerateResult", "Lane", "Stats"),
    ),
}

# the old paths and the names of each that the README of 2026-12-01 (ad636ea) named, with every
# public name of the old proofs/protocol.py (git show 1b7a993^:proofs/protocol.py)
OLD: dict[str, tuple[str, ...]] = {
    "proofs.protocol": (
        "Decoder",
        "Factory",
        "NotApplicable",
        "build_decoder",
        "check_decoder",
        "load_factory",
        "run_generate",
        "tokens_of",
    ),
    "proofs.certify": ("certify", "CertifyPlan", "FULL_CASES", "choose_case", "verdict_of"),
    "proofs.distribution": ("evaluate",),
    "proofs.checks.sampling": ("evaluate",),
    "proofs.naive_kv": ("NaiveKVDecoder",),
    "proofs.sampler": ("draw",),
    "proofs.depth_profile": ("DepthProfile", "depth_profile", "window_profile"),
    "proofs.state_dynamics": ("step_sizes", "iteration_gain", "init_sensitivity", "summarize_steps"),
    "proofs.speed.batch": ("batch_table",),
    # speed measurement left proofs/ (2026-12-05): the modules benchmarks/, docs/speed.md and the
    # engine tests imported, each with a name of it
    "proofs.speed": (),
    "proofs.speed.batch_table": ("batch_table", "judge_batch"),
    "proofs.speed.context": ("context_sweep",),
    "proofs.speed.costs": ("call_parts",),
    "proofs.speed.engines": ("NEW_TOKENS", "prompts", "rates"),
    "proofs.speed.measure": ("bench",),
    "proofs.speed.report": ("PLANS", "SpeedReport"),
    "proofs.speed.round_worker": ("PAIRED_PROTOCOL",),
    "proofs.speed.rows": ("GridRow",),
    "proofs.speed.settings": ("BASELINE", "gate_settings"),
    "proofs.speed.slowdown": ("slow",),
    "proofs.speed.targets": ("judge",),
    "proofs.speed.theorem2_vs_measured": ("theorem2_compare",),
    "proofs.speed.timing": ("GREEDY", "MODES", "Workload", "aggregate", "time_runs", "trimmed_ratio"),
    "proofs.speed.check": ("check_speed",),
    "proofs.speed.gates": ("read_baseline",),
    "proofs.speed.paired": ("PAIRED_TOL",),
    "proofs.speed.false_alarm": ("main",),
    "proofs.progress": ("Progress", "quiet"),
    "proofs.stamp": ("stamp",),
    "proofs.run.cut_estimate": ("estimate", "time_cut", "decide", "PREDICT_LIMIT"),
    "proofs.run.predict": ("predict", "probe_plan", "cut_first"),
    "proofs.run.kv_need": ("certify_caches", "certify_buffers"),
}


# public names read through an alias of a module that still exists (a module __getattr__ that
# warns), until REMOVED_IN: trainer.train re-exported default_prompts after its split
ALIASED: dict[str, tuple[str, ...]] = {"trainer.train": ("default_prompts",)}


def resolve(module: str, name: str) -> tuple[object, list[warnings.WarningMessage]]:
    """getattr(import module, name) and the warnings it raised; LookupError when it fails."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return getattr(importlib.import_module(module), name), caught
        except (ImportError, AttributeError) as e:
            raise LookupError(f"{module}.{name}: {type(e).__name__}: {e}") from None


def lost(frozen: dict[str, tuple[str, ...]]) -> list[str]:
    """The frozen names that neither import from their place nor through an alias that warns
    naming a path they do import from."""
    out = []
    for module, names in frozen.items():
        for name in names:
            try:
                obj, caught = resolve(module, name)
            except LookupError as e:
                out.append(f"{e} (gone without an alias)")
                continue
            moved = [w for w in caught if issubclass(w.category, DeprecationWarning)]
            for w in moved:  # an alias: it must name a place the same object imports from, quietly
                new = re.search(r"import (\w+) from ([\w.]+)", str(w.message))
                if new is None or resolve(new[2], new[1]) != (obj, []):
                    out.append(f"{module}.{name}: its warning names no working new path: {w.message}")
    return out


@pytest.mark.parametrize("module,name", [(m, n) for m, names in PUBLIC.items() for n in names])
def test_every_public_name_imports_from_its_place(module, name):
    obj, caught = resolve(module, name)
    assert obj is not None and caught == [], [str(w.message) for w in caught]


def test_the_check_reports_a_name_gone_without_an_alias():
    assert lost({"loopcert.api": ("NotApplicable", "NoSuchName")}) == [
        "loopcert.api.NoSuchName: AttributeError: module 'loopcert.api' has no attribute 'NoSuchName' "
        "(gone without an alias)"
    ]
    assert lost({"proofs.protocol": ("NotApplicable",)}) == []  # an alias that warns counts
    assert lost(PUBLIC) == [] and lost(OLD) == [] and lost(ALIASED) == []


def test_the_short_place_imports_as_the_docs_write_it():
    from loopcert.api import (  # noqa: F401
        BatchDecoder,
        Certificate,
        CheckResult,
        Decoder,
        NotApplicable,
        SamplingParams,
        certify,
        load_model,
        read_certificate,
    )
    from proofs.decoders.protocol import NotApplicable as Declined
    from proofs.run.certify import certify as run_certify

    assert NotApplicable is Declined and certify is run_certify


def test_loopcert_api_exports_only_frozen_names():
    assert sorted(loopcert.api.__all__) == sorted(PUBLIC["loopcert.api"])


@pytest.mark.parametrize("old", sorted(OLD))
def test_an_old_path_answers_with_the_new_object_and_a_warning_naming_where(old):
    for name in OLD[old]:
        obj, caught = resolve(old, name)
        [w] = caught
        assert w.category is MovedWarning and issubclass(MovedWarning, DeprecationWarning)
        where = PUBLIC_HOME if name in PUBLIC[PUBLIC_HOME] else None
        new = re.search(r"import (\w+) from ([\w.]+)", str(w.message))
        assert new[1] == name and (where is None or new[2] == where), str(w.message)
        assert str(w.message).startswith(f"{old}.{name} is deprecated: import {name} from ")
        assert f"loopcert {REMOVED_IN} removes the old path" in str(w.message)
        assert resolve(new[2], name) == (obj, [])
    assert sorted(OLD) == sorted(MOVED)  # every alias is tested here


@pytest.mark.parametrize("module,name", [(m, n) for m, names in ALIASED.items() for n in names])
def test_an_aliased_name_answers_with_the_object_and_a_warning_naming_where(module, name):
    obj, caught = resolve(module, name)
    [w] = caught
    assert w.category is MovedWarning, w.category
    new = re.search(r"import (\w+) from ([\w.]+)", str(w.message))
    assert str(w.message).startswith(f"{module}.{name} is deprecated: import {name} from ")
    assert f"loopcert {REMOVED_IN} removes the old path" in str(w.message)
    assert new[1] == name and resolve(new[2], name) == (obj, [])
    assert [new[2]] == [m for m, names in PUBLIC.items() if name in names]  # where it is public now
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = importlib.import_module(module).nothing  # other names: the module's usual error


def test_the_old_speed_paths_import_as_benchmarks_wrote_them():
    import speed.timing

    with pytest.warns(MovedWarning, match=r"^proofs\.speed\.timing\.Workload is deprecated: import Workload"):
        from proofs.speed.timing import Workload
    assert Workload is speed.timing.Workload
    from proofs.speed import gates  # a submodule of the old package

    with pytest.warns(MovedWarning, match=r"import read_baseline from proofs\.gates\.baseline "):
        assert callable(gates.read_baseline)


def test_the_old_protocol_path_reads_as_a_user_writes_it():
    with pytest.warns(
        MovedWarning,
        match=r"^proofs\.protocol\.NotApplicable is deprecated: import NotApplicable from loopcert\.api ",
    ):
        from proofs.protocol import NotApplicable
    assert NotApplicable is loopcert.api.NotApplicable
    with pytest.raises(ImportError, match="nothing"):
        from proofs.protocol import nothing  # noqa: F401
    with pytest.raises(ModuleNotFoundError):  # the finder answers the moved paths only
        importlib.import_module("proofs.never_was")


def test_the_aliases_are_removed_when_their_version_comes():
    version = tuple(int(p) for p in importlib.metadata.version("loopcert").split(".")[:3])
    assert version < tuple(int(p) for p in REMOVED_IN.split(".")), (
        f"loopcert {version} reached {REMOVED_IN}: remove proofs/moved.py's aliases and OLD here"
    )


def test_nothing_of_loopcert_imports_an_old_path():
    found = []
    for pkg in (*FIRST_PARTY, "benchmarks"):
        for f in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text(), str(f))):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                aliased = [f"{m}.{n}" for m, ns in ALIASED.items() for n in ns]
                found += [f"{f.relative_to(ROOT)}: {n}" for n in names if n in MOVED or n in aliased]
    assert found == []


def doc_imports() -> list[tuple[str, str]]:
    """(file, line) for each first-party import statement in the ```python blocks of the README
    and docs/."""
    out = []
    for f in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```python\n(.*?)```", f.read_text(), re.S):
            for line in block.splitlines():
                m = re.match(r"(?:from|import) (\w+)", line)
                if m and m[1] in FIRST_PARTY:
                    out.append((f.name, line.split("#")[0].strip()))
    return out


def test_the_docs_import_what_exists_at_the_paths_they_name():
    lines = doc_imports()
    assert ("decoders.md", "from loopcert.api import NotApplicable") in lines  # the parse sees them
    for _where, line in lines:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            exec(line, {})  # noqa: S102 - the docs' own import lines


def test_docs_decoders_lists_every_public_name():
    text = (ROOT / "docs" / "decoders.md").read_text()
    section = text[text.index("## The public surface") :]
    section = section[: section.index("\n## ", 1)]
    missing = [n for n in loopcert.api.__all__ if f"`{n}`" not in section]
    assert missing == []
