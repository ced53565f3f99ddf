import time, torch, refdec, fastdec, cProfile, pstats
from fastdec.engine import Engine
torch.set_num_threads(1)
torch._dynamo.config.cache_size_limit = 64
from refdec.config import get_preset
from refdec.model import LoopedLM
model = LoopedLM(get_preset("tiny-loopcoder")).init_weights(0).eval()
import os, json; OPTS=json.loads(os.environ.get("OPTS","{}"))
prompt=list(range(10,42))
def run_phase(self, kind, lanes, width=None):
    inp, order, plan = self.phase_inputs(kind, lanes, width)
    comp = self.__dict__.setdefault("_comp", {})
    key = (kind, inp["pos"].shape[0])
    fn = comp.get(key)
    if fn is None:
        fn = comp[key] = torch.compile(lambda inp, kind=kind: self.phase_fn(kind, inp), fullgraph=True, dynamic=False, options=OPTS)
    with torch.inference_mode():
        return order, fn(inp)
Engine.run_phase = run_phase
dec = fastdec.Decoder(model, fastdec.DecodeConfig("autoregressive"), reads="gather")
dec.generate(prompt, 64, refdec.SamplingParams(), seed=0)
dec.generate(prompt, 64, refdec.SamplingParams(), seed=0)
t=time.perf_counter()
for _ in range(3): dec.generate(prompt, 64, refdec.SamplingParams(), seed=0)
print(192/(time.perf_counter()-t), "tok/s")
pr=cProfile.Profile(); pr.enable()
for _ in range(3): dec.generate(prompt, 64, refdec.SamplingParams(), seed=0)
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(25)
