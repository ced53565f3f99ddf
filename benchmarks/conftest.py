import os

import torch

# One thread: the default model is small and per-op overhead dominates; more threads only add
# contention (and the gate's clock, process time, would sum them).
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
