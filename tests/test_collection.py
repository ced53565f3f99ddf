"""Every test module runs somewhere: some tox environment's pytest command collects it, with the
engine it needs (tests/tox_envs.py reads tox.ini, pyproject's pytest options and each module's
marks). A module that only skips everywhere -- an engine's test outside that engine's environment,
a test marked both slow and gpu -- is a test that never runs; this fails on it.

The controls: a small tree with its own tox.ini holds each way a module can be left out (an mlx-marked
module beyond the mlx environment's paths, an unmarked module that skips itself without mlx, slow and
gpu together, a module without tests) and each must be reported; the marks the checker reads are
compared with what pytest itself collects on that tree.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tox_envs import module_paths, read_module, selects, tox_runs, where_tests_run

ROOT = Path(__file__).resolve().parents[1]


def test_every_test_module_is_collected_by_a_tox_environment():
    table = where_tests_run(ROOT)
    nowhere = [module for module, envs in table.items() if not envs]
    assert not nowhere, f"test modules no tox environment collects (tox.ini; tests/tox_envs.py): {nowhere}"
    # the checker sees the tree: the suite's modules, the benchmarks, the engines' environments
    assert len(table) > 100, len(table)
    assert table["tests/test_collection.py"] == ["gpu", "nightly", "portable", "py"]
    # a module with tier2 tests: its default-tier tests in py, its tier2 ones in tier2, all in portable
    assert table["tests/proofs/run/test_jobs.py"] == ["gpu", "nightly", "portable", "py", "tier2"]
    assert table["benchmarks/test_bench.py"] == ["bench"]
    assert table["tests/fastdec/test_gpu.py"] == ["gpu"]
    assert table["tests/proofs/run/test_slurm_recipe.py"] == ["nightly"]  # slow
    assert table["tests/proofs/run/test_ray.py"] == ["ray"]
    assert table["tests/refdec/test_mlx_sampler.py"] == ["mlx"]
    assert table["tests/proofs/engines/test_vllm_certify.py"] == ["vllm"]
    assert table["tests/proofs/engines/test_llamacpp_decoder.py"] == ["llamacpp"]
    assert table["tests/proofs/engines/test_openvino_certify.py"] == ["openvino"]


PYPROJECT = """
[tool.pytest.ini_options]
testpaths = ["tests"]
markers = ["slow: s", "gpu: g", "mlx: m"]
addopts = "-m 'not slow and not gpu and not mlx' -p no:cacheprovider"
"""

TOX = """
[tox]
envlist = py

[testenv]
set_env =
    OMP_NUM_THREADS = 1
commands = pytest {posargs:-q}

[testenv:nightly]
commands = python .ci/capabilities.py -m "not gpu and not mlx" {posargs:-q}

[testenv:gpu]
commands =
    python -c "print('a command that is not pytest')"
    pytest -m "not slow" {posargs:-q}

[testenv:mlx]
set_env =
    {[testenv]set_env}
    LOOPCERT_REQUIRE_MLX = 1
commands = pytest -m "mlx and not slow" tests/engines {posargs:-q -rA}

[testenv:lint]
commands = ruff check .
"""

ONE_TEST = "import pytest\n{}\ndef test_a():\n    pass\n"  # {}: the module's marks and skips

MODULES = {
    "tests/test_plain.py": "def test_a():\n    pass\n",
    "tests/test_gpu_only.py": ONE_TEST.format("pytestmark = pytest.mark.gpu"),
    "tests/test_slow_alias.py": ONE_TEST.format("slow = pytest.mark.slow\n@slow"),
    "tests/test_params.py": """
        import pytest
        @pytest.mark.parametrize(
            "x", [pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=[pytest.mark.gpu])]
        )
        def test_x(x):
            pass
    """,
    "tests/test_class.py": """
        import pytest
        @pytest.mark.slow
        class TestA:
            def test_m(self):
                pass
    """,
    "tests/engines/test_mlx_engine.py": ONE_TEST.format("pytestmark = pytest.mark.mlx"),
    # left out: marked mlx, beyond the mlx environment's paths
    "tests/refdec/test_mlx_elsewhere.py": ONE_TEST.format("pytestmark = [pytest.mark.mlx]"),
    # left out: unmarked, so the environments without mlx collect it, and it skips there
    "tests/refdec/test_skips_itself.py": ONE_TEST.format("mx = pytest.importorskip('mlx.core')"),
    # left out: the gpu environment runs "not slow", nightly "not gpu"
    "tests/test_slow_gpu.py": ONE_TEST.format("@pytest.mark.slow\n@pytest.mark.gpu"),
    "tests/test_empty.py": "X = 1\n",  # left out: no tests
    "tests/helpers.py": "def test_not_a_module():\n    pass\n",  # not a test module
    ".tox/py/test_installed.py": "def test_a():\n    pass\n",  # not the project's
}

EXPECTED = {
    "tests/engines/test_mlx_engine.py": ["mlx"],
    "tests/refdec/test_mlx_elsewhere.py": [],
    "tests/refdec/test_skips_itself.py": [],
    "tests/test_class.py": ["nightly"],
    "tests/test_empty.py": [],
    "tests/test_gpu_only.py": ["gpu"],
    "tests/test_params.py": ["gpu", "nightly"],
    "tests/test_plain.py": ["gpu", "nightly", "py"],
    "tests/test_slow_alias.py": ["nightly"],
    "tests/test_slow_gpu.py": [],
}


def write_tree(root: Path, tox: str = TOX, modules: dict[str, str] = MODULES) -> Path:
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "tox.ini").write_text(tox)
    for rel, text in modules.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


def test_a_module_no_environment_collects_is_reported(tmp_path):
    root = write_tree(tmp_path)
    assert where_tests_run(root) == EXPECTED
    # the mlx environment reaching tests/refdec collects the mlx-marked module there, but not the
    # unmarked one ("mlx and not slow"): it must carry the mark too
    tox = TOX.replace("tests/engines {posargs", "tests/engines tests/refdec {posargs")
    write_tree(root, tox)
    table = where_tests_run(root)
    assert table["tests/refdec/test_mlx_elsewhere.py"] == ["mlx"]
    assert table["tests/refdec/test_skips_itself.py"] == []
    marked = ONE_TEST.format("pytestmark = pytest.mark.mlx\nmx = pytest.importorskip('mlx.core')")
    write_tree(root, tox, {**MODULES, "tests/refdec/test_skips_itself.py": marked})
    assert where_tests_run(root)["tests/refdec/test_skips_itself.py"] == ["mlx"]


def test_the_marks_read_agree_with_what_pytest_collects(tmp_path):
    """Differential: pytest's own --collect-only, run with each environment's arguments on the
    small tree, collects exactly the modules the checker says it selects (those that skip
    themselves without an engine aside)."""
    root = write_tree(tmp_path)
    engines = frozenset({"mlx"})
    modules = [read_module(root, rel, engines) for rel in module_paths(root)]
    runs = [r for r in tox_runs(root) if not r.engines]
    assert sorted(r.env for r in runs) == ["gpu", "nightly", "py"]
    for run in runs:
        out = subprocess.run(
            [sys.executable, "-m", "pytest", *run.args, "--collect-only", "-q", "-p", "no:cacheprovider"],
            cwd=root,
            capture_output=True,
            text=True,
        )
        assert out.returncode in (0, 5), out.stdout + out.stderr  # 5: nothing collected
        # node ids (path::test) under -q, "path: count" under -qq
        collected = {m.group(1) for m in re.finditer(r"^(\S+\.py)(?:::|: \d+$)", out.stdout, re.M)}
        predicted = {m.path for m in modules if not m.skips_without and selects(run, m)}
        assert collected - {"tests/refdec/test_skips_itself.py"} == predicted, (run.env, out.stdout)
