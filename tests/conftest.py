import os

import pytest
import torch
from hypothesis import HealthCheck, settings

# Derandomized in CI (reproducible failures); randomized nightly (new examples each run).
settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "nightly",
    derandomize=False,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Tiny models: one thread is fastest, and CI has 2 cores shared with pytest itself.
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="CUDA is not available")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
