import time, torch, refdec, fastdec, cProfile, pstats
torch.set_num_threads(1)
from refdec.config import get_preset
from refdec.model import LoopedLM
model = LoopedLM(get_preset("tiny-loopcoder")).init_weights(0).eval()
prompt=list(range(10,42))
dec = fastdec.Decoder(model, fastdec.DecodeConfig("autoregressive"))
dec.generate(prompt, 64, refdec.SamplingParams(), seed=0)
pr=cProfile.Profile(); pr.enable()
for _ in range(3): dec.generate(prompt, 64, refdec.SamplingParams(), seed=0)
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(25)
