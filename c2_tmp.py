import time, torch, refdec, fastdec
from fastdec.engine import Engine
torch.set_num_threads(1)
torch._dynamo.config.cache_size_limit = 64
from refdec.config import get_preset
from refdec.model import LoopedLM
model = LoopedLM(get_preset("tiny-loopcoder")).init_weights(0).eval()
prompt=list(range(10,42))
orig = Engine.run_phase
def run_phase(self, kind, lanes, width=None):
    inp, order, plan = self.phase_inputs(kind, lanes, width)
    comp = self.__dict__.setdefault("_comp", {})
    key = (kind, inp["pos"].shape[0])
    fn = comp.get(key)
    if fn is None:
        t=time.perf_counter()
        fn = comp[key] = torch.compile(lambda inp, kind=kind: self.phase_fn(kind, inp), fullgraph=True, dynamic=False)
        with torch.inference_mode(): fn(inp)
        print("compiled", key, time.perf_counter()-t)
        inp, order, plan = self.phase_inputs(kind, lanes, width)
    with torch.inference_mode():
        return order, fn(inp)
Engine.run_phase = run_phase
dec = fastdec.Decoder(model, fastdec.DecodeConfig("autoregressive"), reads="gather")
ref = fastdec.Decoder(model, fastdec.DecodeConfig("autoregressive"), reads="gather")
t=time.perf_counter(); out0 = dec.generate(prompt, 8, refdec.SamplingParams(), seed=0); print("warm", time.perf_counter()-t)
t=time.perf_counter(); out=dec.generate(prompt, 64, refdec.SamplingParams(), seed=0); dt=time.perf_counter()-t
print("compiled", 64/dt, "tok/s")
print(out.tokens[:20])
import copy; print(refdec.generate(copy.deepcopy(model).double(), prompt, 20))
for i in range(2):
    t=time.perf_counter(); out=dec.generate(prompt, 64, refdec.SamplingParams(), seed=0); dt=time.perf_counter()-t
    print("compiled steady", 64/dt, "tok/s")
for reads in ["view"]:
    d2 = fastdec.Decoder(model, fastdec.DecodeConfig("autoregressive"), reads=reads)
    Engine.run_phase = orig
    d2.generate(prompt, 64, refdec.SamplingParams(), seed=0)
    t=time.perf_counter(); out=d2.generate(prompt, 64, refdec.SamplingParams(), seed=0); dt=time.perf_counter()-t
    print("eager", reads, 64/dt, "tok/s")
