"""The trainer's model shapes (CONFIGS), its named recipes (RECIPES: TrainConfig defaults, explicit
flags override them) and the validated TrainConfig. trainer.train's docstring says what each recipe
does and why."""

from __future__ import annotations

from dataclasses import dataclass

from refdec.config import ModelConfig
from refdec.errors import LoopcertError
from refdec.validate import is_int, is_number

V1 = ModelConfig(
    family="raven",
    block="sandwich",
    rope="half",
    vocab_size=256,
    d_model=128,
    n_heads=4,
    n_kv_heads=1,  # MQA: one KV timeline per lane per depth (docs/design.md section 5)
    head_dim=32,
    intermediate_size=352,
    n_prelude=1,
    n_core=2,
    n_coda=1,
    recurrence=32,
    max_seq_len=4096,
    init_state="zeros",
    name="default",
)
TINY = V1.replace(  # a few steps train it in seconds (the tests' model)
    d_model=32, head_dim=8, intermediate_size=64, n_core=1, recurrence=4, max_seq_len=512, name="tiny-trained"
)
# The huginn recipe's block, initial state and readout (Huginn-0125; see "huginn" below)
HUGINN_CORE = dict(block="prenorm", ln_f_before_coda=True, init_state="seeded")
CONFIGS = {
    "default": V1,
    # the default with a 1-block core: each iteration does less (a try at a less flat depth profile)
    "core1": V1.replace(n_core=1, name="core1"),
    # the huginn recipe's model (Huginn-0125, Geiping et al. 2025): a pre-norm residual core (the
    # sandwich core contracted to a fixed point within a few iterations), GQA with 2 KV heads, the
    # initial state a seeded truncated normal (trained on fresh noise each step: like-init).
    "huginn": V1.replace(
        **HUGINN_CORE, d_model=192, n_heads=6, n_kv_heads=2, intermediate_size=512, n_core=1
    ),
    "tiny": TINY,
    "tiny-huginn": TINY.replace(**HUGINN_CORE, name="tiny-huginn"),
}

# Named recipes: TrainConfig defaults per recipe (explicit flags override). "v1" reproduces the
# first shipped model; "huginn" the shipped one: no shallow loss, fresh-noise initial state,
# r ~ Poisson(LogNormal(log mean - s^2/2, s)) + 1, gradient through the last min(8, r)
# iterations, windows growing 256 -> 1024 -> 2048 bytes at constant bytes per step.
# Mean depth 32 (Huginn's): at a smaller mean the core converged well before R and depth stopped
# mattering, while mean 32 used its depth and reached a lower bpb(R) too, although each step costs
# more. Sigma 0.5 (Huginn's): a wider sigma with a smaller mean drew many shallow depths and its
# depth profile stayed flat (docs/measurements.md has the runs).
RECIPES: dict[str, dict] = {
    "v1": {},
    "huginn": dict(
        model="huginn",
        seq_len=256,
        batch_size=8,
        mean_depth=32.0,
        depth_sigma=0.5,
        depth_offset=1,
        backprop_k=8,
        aux_max_depth=0,
        noise_init=True,
        lr=2e-3,
        warmup=50,
        threads=1,
        seq_schedule=((0.0, 256), (0.35, 1024), (0.85, 2048)),
    ),
}


@dataclass(frozen=True)
class TrainConfig:
    model: str = "default"  # key of CONFIGS
    seq_len: int = 256  # training window (bytes); longer contexts decode but are unseen
    batch_size: int = 8
    steps: int = 100000  # upper bound; with max_minutes the clock usually ends the run
    max_minutes: float | None = None
    lr: float = 3e-3
    min_lr_frac: float = 0.1
    warmup: int = 30
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    mean_depth: float = 16.0  # E[r]; R/2 for R = 32
    depth_sigma: float = 0.5  # Huginn's; larger gives more shallow (and very deep) draws
    backprop_k: int = 4
    aux_max_depth: int = 3  # 0 disables the shallow auxiliary loss
    aux_weight: float = 0.5
    depth_offset: int = 0  # r = Poisson(tau) + depth_offset (Huginn: 1); 0 clips r = 0 up to 1
    max_depth: int | None = None  # r is clipped to this; None = 2R
    noise_init: bool = False  # Huginn's like-init: h(0) fresh noise each step (init_state "seeded")
    # ((progress_from, seq_len), ...): the window grows with training progress at constant
    # bytes per step (batch = batch_size * seq_len // window); () = seq_len throughout
    seq_schedule: tuple = ()
    seed: int = 0
    threads: int = 2
    log_every: int = 10
    ckpt_minutes: float = 3.0
    data_root: str | None = None  # default: the running interpreter's stdlib

    def __post_init__(self):
        if self.model not in CONFIGS:
            raise LoopcertError(f"TrainConfig.model={self.model!r}: choose one of {sorted(CONFIGS)}")
        for name in ("seq_len", "batch_size", "steps", "backprop_k", "threads", "log_every"):
            v = getattr(self, name)
            if not is_int(v, 1):
                raise LoopcertError(
                    f"TrainConfig.{name}={v!r} (--{name.replace('_', '-')}): must be an integer >= 1"
                )
        if self.max_minutes is not None and not is_number(self.max_minutes, 0, low_open=True):
            raise LoopcertError(f"TrainConfig.max_minutes={self.max_minutes!r}: must be a finite number > 0")
        if not is_number(self.mean_depth, 1):
            raise LoopcertError(
                f"TrainConfig.mean_depth={self.mean_depth!r} (--mean-depth): must be a finite number >= 1"
            )
        if not is_number(self.depth_sigma, 0):
            raise LoopcertError(
                f"TrainConfig.depth_sigma={self.depth_sigma!r} (--depth-sigma): must be a finite number >= 0"
            )
        if not is_int(self.aux_max_depth, 0):
            raise LoopcertError(f"TrainConfig.aux_max_depth={self.aux_max_depth!r}: must be an integer >= 0")
        cfg = CONFIGS[self.model]
        if self.seq_len + 1 > cfg.max_seq_len:
            raise LoopcertError(
                f"TrainConfig.seq_len={self.seq_len} (--seq-len): the window + 1 exceeds "
                f"the model's max_seq_len={cfg.max_seq_len}"
            )
        if self.depth_offset not in (0, 1):
            raise LoopcertError(f"TrainConfig.depth_offset={self.depth_offset!r}: must be 0 or 1")
        md = self.max_depth
        if md is not None and not is_int(md, 1):
            raise LoopcertError(f"TrainConfig.max_depth={md!r} (--max-depth): must be an integer >= 1")
        if self.mean_depth > self.depth_cap:
            raise LoopcertError(
                f"TrainConfig.mean_depth={self.mean_depth!r} (--mean-depth) exceeds the "
                f"max depth {self.depth_cap}"
            )
        if self.backprop_k > self.depth_cap:
            raise LoopcertError(
                f"TrainConfig.backprop_k={self.backprop_k!r} (--backprop-k) exceeds the "
                f"max depth {self.depth_cap} (--max-depth)"
            )
        if self.noise_init and cfg.init_state != "seeded":
            raise LoopcertError(
                f"TrainConfig.noise_init: model {self.model!r} has init_state="
                f"{cfg.init_state!r}; like-init noise needs 'seeded'"
            )
        sched = tuple(tuple(x) for x in self.seq_schedule)
        object.__setattr__(self, "seq_schedule", sched)
        if sched:
            froms = [f for f, _ in sched]
            in_range = all(is_number(f, 0, 1, high_open=True) for f in froms)
            if not in_range or froms[0] != 0.0 or froms != sorted(froms):
                raise LoopcertError(
                    f"TrainConfig.seq_schedule={sched!r} (--seq-schedule): progress points "
                    "must start at 0 and increase within [0, 1)"
                )
            for _, t in sched:
                if not is_int(t, 1) or t + 1 > cfg.max_seq_len:
                    raise LoopcertError(
                        f"TrainConfig.seq_schedule window {t!r} (--seq-schedule): must be "
                        f"an integer >= 1 with window + 1 <= max_seq_len={cfg.max_seq_len}"
                    )

    @property
    def depth_cap(self) -> int:
        return self.max_depth if self.max_depth is not None else 2 * CONFIGS[self.model].recurrence

    def window_at(self, progress: float) -> tuple[int, int]:
        """(window bytes, batch size) at training progress in [0, 1]."""
        if not self.seq_schedule:
            return self.seq_len, self.batch_size
        t = [w for f, w in self.seq_schedule if progress >= f][-1]
        return t, max(1, self.batch_size * self.seq_len // t)
