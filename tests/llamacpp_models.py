"""What the llamacpp-marked tests share (tests/proofs/engines/test_llamacpp_*.py): the skip rule.

xllamacpp lives in its own environment (constraints-llamacpp.txt, `tox -e llamacpp`): outside it the
tests skip, unless LOOPCERT_REQUIRE_LLAMACPP=1 (tox -e llamacpp sets it), which turns a missing
xllamacpp or gguf into an error.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest


def require_llamacpp() -> None:
    """Skip the calling module when xllamacpp / gguf are missing; fail under LOOPCERT_REQUIRE_LLAMACPP=1."""
    missing = [m for m in ("xllamacpp", "gguf") if importlib.util.find_spec(m) is None]
    if not missing:
        return
    if os.environ.get("LOOPCERT_REQUIRE_LLAMACPP") == "1":
        raise RuntimeError(
            f"tox -e llamacpp: {', '.join(missing)} not installed in {sys.executable}'s environment"
        )
    pytest.skip("xllamacpp is not installed here (tox -e llamacpp installs it)", allow_module_level=True)
