import time, torch, refdec, fastdec, sys
import fastdec.compiled as fc
torch.set_num_threads(1)
from refdec.config import get_preset
from refdec.model import LoopedLM
model = LoopedLM(get_preset("tiny-loopcoder")).init_weights(0).eval()
prompt=list(range(10,42))
dec = fastdec.Decoder(model, "autoregressive", compile=True)
eag = fastdec.Decoder(model, "autoregressive")
for d in (dec, eag): d.generate(prompt, 64, refdec.SamplingParams(), seed=0)
import contextlib
real = fc.skip_guards
def rate(d):
    t=time.process_time()
    for _ in range(3): d.generate(prompt, 64, refdec.SamplingParams(), seed=0)
    return 192/(time.process_time()-t)
tot = {"c":0,"e":0,"g":0}
for i in range(6):
    fc.skip_guards = real; tot["c"] += 1/rate(dec)
    tot["e"] += 1/rate(eag)
    fc.skip_guards = contextlib.nullcontext; tot["g"] += 1/rate(dec)
print({k: 6/v for k,v in tot.items()})
