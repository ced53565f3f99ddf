"""Bad input, found not assumed: hypothesis mutates what a user hands loopcert.

Every entry point a user reaches (refdec.load_model on a folder, refdec.generate,
fastdec.Decoder.generate, the CLI) must end a mutated input in one of two ways: it works, or it
raises refdec.LoopcertError naming the bad value. Never another exception (a torch stack trace),
never a hang (a watchdog alarm fails the example). The `ci` profile keeps each fuzz to a few
seconds; `nightly` runs hundreds of examples per target.

What the fuzz found (each pinned with @example where hypothesis found it):
- a NaN or infinite weight loaded silently (loopcert and published layouts);
- a seed >= 2**64 raised a bare ValueError from torch.Generator.manual_seed;
- a prompt of huge ints, strings or None raised bare ValueError / TypeError / RuntimeError from
  torch.as_tensor;
- absurd sizes in config.json (vocab_size 10**12) allocated before the weights were checked
  against them (MemoryError or minutes of allocation), now checked from the header first;
- config.json holding JSON that is not an object (a list, a number) raised AttributeError;
- loopcert-format safetensors with a shape/dtype header that lies about its data raised from
  inside safetensors;
see the module docstrings of refdec/load.py and refdec/decode.py for the checks that fixed them.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import signal
import struct

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

import refdec
from fastdec import Decoder
from loopcert.cli import main as cli_main
from refdec.checkpoints import write_published
from refdec.errors import LoopcertError
from refdec.sampling import SamplingParams

WATCHDOG_S = 30  # one example: a load of a tiny model or a few tokens takes well under a second
FUZZ = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


class Hang(Exception):
    pass


@contextlib.contextmanager
def watchdog(seconds: int = WATCHDOG_S):
    def fire(*_):
        raise Hang(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def works_or_loopcert_error(fn, *args, **kwargs):
    """fn's result, or the LoopcertError it raised; anything else fails the example."""
    with watchdog():
        try:
            return fn(*args, **kwargs)
        except LoopcertError as e:
            assert str(e), "a LoopcertError must say what was wrong"
            return e


# -- values a user might type, good and bad ------------------------------------------------------
HUGE = st.sampled_from([2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70, 10**30, -(2**63) - 1])
JSON_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 300),
    HUGE,
    st.text(max_size=6),
    st.floats(allow_nan=True, allow_infinity=True),
)
JSON_VALUE = st.recursive(
    JSON_SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


# -- refdec.load_model on a mutated folder ----------------------------------------------------------
class Originals(dict):
    def __repr__(self):  # hypothesis prints the arguments of a failing example: not these bytes
        return "Originals(loopcert=tiny-raven, ouro=tiny-ouro)"


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    """Two good folders: loopcert's own format and a published (Ouro) layout."""
    root = tmp_path_factory.mktemp("fuzz-originals")
    refdec.save_model(refdec.load_model("tiny-raven"), root / "loopcert")
    write_published(refdec.load_model("tiny-ouro"), root / "ouro", "ouro")
    return Originals(
        {kind: {p.name: p.read_bytes() for p in (root / kind).iterdir()} for kind in ("loopcert", "ouro")}
    )


def lay_out(tmp_path, files: dict[str, bytes]):
    folder = tmp_path / "m"
    if folder.exists():
        for p in folder.iterdir():
            p.unlink()
    folder.mkdir(exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def check_loaded(model, folder):
    """A model that loaded must be usable: finite logits at depth 1 for token 0."""
    with watchdog():
        logits = model.depth_logits([0], [1])
    assert bool(torch.isfinite(logits).all()), f"{folder}: loaded, but logits are not finite"


@FUZZ
@given(kind=st.sampled_from(["loopcert", "ouro"]), data=st.data())
@example(kind="loopcert", data=None)  # vocab_size 10**12: must not allocate before checking
def test_mutated_config_json(originals, tmp_path, kind, data):
    files = dict(originals[kind])
    config = json.loads(files["config.json"])
    if data is None:
        config["vocab_size"] = 10**12
    else:
        how = data.draw(st.sampled_from(["set", "delete", "extra", "replace", "truncate", "bytes"]))
        if how == "set":
            config[data.draw(st.sampled_from(sorted(config)))] = data.draw(JSON_VALUE)
        elif how == "delete":
            del config[data.draw(st.sampled_from(sorted(config)))]
        elif how == "extra":
            config[data.draw(st.text(min_size=1, max_size=8))] = data.draw(JSON_VALUE)
        elif how == "replace":
            config = data.draw(JSON_VALUE)
    text = json.dumps(config)  # may hold NaN / Infinity, as Python's json writes them
    if data is not None and how == "truncate":
        text = text[: data.draw(st.integers(0, len(text) - 1))]
    files["config.json"] = text.encode()
    if data is not None and how == "bytes":
        files["config.json"] = data.draw(st.binary(max_size=16))
    folder = lay_out(tmp_path, files)
    got = works_or_loopcert_error(refdec.load_model, folder)
    if not isinstance(got, LoopcertError):
        check_loaded(got, folder)


def _tensor_mutation(data, tensors: dict[str, torch.Tensor]) -> str:
    """Mutate `tensors` in place at the tensor level; returns what was done."""
    how = data.draw(st.sampled_from(["drop", "extra", "dtype", "shape", "nonfinite", "empty"]))
    key = data.draw(st.sampled_from(sorted(tensors)))
    t = tensors[key]
    if how == "drop":
        del tensors[key]
    elif how == "extra":
        tensors[key + data.draw(st.sampled_from([".x", "_", "2"]))] = torch.zeros(3)
    elif how == "dtype":
        dt = data.draw(
            st.sampled_from(
                [
                    torch.int8,
                    torch.int32,
                    torch.int64,
                    torch.bool,
                    torch.uint8,
                    torch.float16,
                    torch.bfloat16,
                    torch.float64,
                ]
            )
        )
        tensors[key] = t.to(dt)
    elif how == "shape":
        n = t.numel()
        shape = data.draw(
            st.sampled_from(
                [
                    s
                    for s in [(n,), (1, n), (n + 1,), (n - 1,), (0,), ()]
                    if s != tuple(t.shape) and min(s, default=0) >= 0
                ]
            )
        )
        tensors[key] = torch.zeros(shape, dtype=t.dtype) if math.prod(shape) != n else t.reshape(shape)
    elif how == "nonfinite":
        t = t.clone()
        t.view(-1)[data.draw(st.integers(0, t.numel() - 1))] = data.draw(
            st.sampled_from([math.nan, math.inf, -math.inf])
        )
        tensors[key] = t
    else:
        tensors[key] = t[:0]
    return f"{how} {key}"


@FUZZ
@given(kind=st.sampled_from(["loopcert", "ouro"]), data=st.data())
def test_mutated_safetensors_tensors(originals, tmp_path, kind, data):
    files = dict(originals[kind])
    folder = lay_out(tmp_path, files)
    tensors = load_file(str(folder / "model.safetensors"))
    what = _tensor_mutation(data, tensors)
    save_file(tensors, str(folder / "model.safetensors"))
    got = works_or_loopcert_error(refdec.load_model, folder)
    if what.startswith(("drop", "extra", "shape", "nonfinite", "empty")) or "int" in what or "bool" in what:
        assert isinstance(got, LoopcertError), f"{what}: loaded without complaint"
        key = what.split(" ", 1)[1]
        assert key.split(".")[-1] in str(got) or "tensor" in str(got), f"{what}: {got}"
    if not isinstance(got, LoopcertError):
        check_loaded(got, folder)


@FUZZ
@given(kind=st.sampled_from(["loopcert", "ouro"]), data=st.data())
def test_mutated_safetensors_bytes(originals, tmp_path, kind, data):
    files = dict(originals[kind])
    raw = bytearray(files["model.safetensors"])
    (header_len,) = struct.unpack("<Q", raw[:8])
    how = data.draw(st.sampled_from(["truncate", "flip", "header-length", "header-json", "append"]))
    if how == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif how == "flip":  # anywhere: the header (names, dtypes, shapes, offsets) or the data
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= data.draw(st.integers(1, 255))
    elif how == "header-length":
        raw[:8] = struct.pack(
            "<Q",
            data.draw(st.sampled_from([0, 1, header_len - 1, header_len + 1, len(raw), 2**40, 2**64 - 1])),
        )
    elif how == "header-json":  # a header that parses but lies: absurd shapes, offsets, dtypes
        header = json.loads(raw[8 : 8 + header_len])
        key = data.draw(st.sampled_from(sorted(k for k in header if k != "__metadata__")))
        field = data.draw(st.sampled_from(["shape", "dtype", "data_offsets"]))
        header[key][field] = data.draw(
            st.sampled_from(
                {
                    "shape": [[2**40, 2**40], [], [0], [-1], [10**12]],
                    "dtype": ["F8_E4M3", "I64", "BOOL", "F64", "Q4", ""],
                    "data_offsets": [[0, 0], [0, 2**62], [10, 5], [-1, 4]],
                }[field]
            )
        )
        blob = json.dumps(header).encode()
        blob += b" " * (-len(blob) % 8)
        raw = struct.pack("<Q", len(blob)) + blob + raw[8 + header_len :]
    else:
        raw += b"\x00" * data.draw(st.integers(1, 64))
    files["model.safetensors"] = bytes(raw)
    folder = lay_out(tmp_path, files)
    got = works_or_loopcert_error(refdec.load_model, folder)
    if not isinstance(got, LoopcertError):
        check_loaded(got, folder)


# -- generate() arguments -------------------------------------------------------------------------
@functools.cache
def tiny_model():
    return refdec.load_model("tiny-raven")


TOKEN = st.one_of(st.integers(-2, 14), HUGE, st.floats(-2, 14), st.text(max_size=2), st.none(), st.booleans())
PROMPT = st.one_of(
    st.lists(st.integers(0, 12), min_size=1, max_size=6),
    st.lists(TOKEN, max_size=4),
    st.text(max_size=4),
    st.none(),
    st.integers(0, 12),
    st.lists(st.integers(0, 12), min_size=1, max_size=3).map(torch.tensor),
    st.lists(st.lists(st.integers(0, 12), min_size=1, max_size=2), min_size=1, max_size=2),
    st.integers(120, 140).map(lambda n: [1] * n),
)  # at and past the context (128)
COUNT = st.one_of(
    st.integers(-2, 4),
    st.sampled_from([127, 128, 129, 10**6]),
    HUGE,
    st.floats(0, 4),
    st.none(),
    st.booleans(),
    st.text(max_size=2),
)
SEED = st.one_of(
    st.integers(0, 2**64 - 1), st.integers(-3, 3), HUGE, st.floats(0, 3), st.none(), st.text(max_size=2)
)
SAMPLING = st.one_of(
    st.just(SamplingParams()),
    st.just(SamplingParams(temperature=0.7, top_k=3)),
    st.none(),
    st.text(max_size=3),
    st.floats(),
)
DEPTH = st.one_of(st.none(), st.integers(-1, 8), HUGE, st.floats(0, 8), st.text(max_size=2))


def _small(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= 4


@FUZZ
@given(prompt=PROMPT, n=COUNT, sampling=SAMPLING, seed=SEED, depth=DEPTH)
@example(prompt=[1, 2], n=2, sampling=SamplingParams(), seed=2**70, depth=None)
@example(prompt=[1, 2], n=2, sampling=SamplingParams(), seed=-1, depth=None)
@example(prompt=[2**70], n=2, sampling=SamplingParams(), seed=0, depth=None)
@example(prompt=["a"], n=2, sampling=SamplingParams(), seed=0, depth=None)
@example(prompt=[None], n=2, sampling=SamplingParams(), seed=0, depth=None)
@example(prompt=[1], n=2, sampling=SamplingParams(), seed=0, depth=2**70)
def test_refdec_generate_arguments(prompt, n, sampling, seed, depth):
    got = works_or_loopcert_error(
        refdec.generate, tiny_model(), prompt, n if not _small(n) or n <= 2 else 2, sampling, seed, depth
    )
    if prompt == [1, 2] and n == 2 and depth is None and seed in (2**70, -1):
        assert isinstance(got, LoopcertError) and f"got {seed}" in str(got)


@FUZZ
@given(
    strategy=st.sampled_from(["autoregressive", "draft-verify", "pipelined"]),
    prompt=PROMPT,
    n=COUNT,
    sampling=SAMPLING,
    seed=SEED,
    eos=st.one_of(st.none(), st.integers(-1, 14), HUGE, st.text(max_size=1)),
)
@example(strategy="pipelined", prompt=[1, 2], n=2, sampling=SamplingParams(), seed=2**64, eos=None)
def test_fastdec_generate_arguments(strategy, prompt, n, sampling, seed, eos):
    tiny = tiny_model()
    dec = Decoder(tiny, strategy, second_depth=4 if strategy == "pipelined" else None)
    got = works_or_loopcert_error(dec.generate, prompt, n, sampling, seed, eos)
    if not isinstance(got, LoopcertError):  # what it did decode is the baseline's
        base = Decoder(tiny).generate(prompt, n, sampling, seed, eos)
        assert (got.tokens == base.tokens) or not sampling.greedy


@FUZZ
@given(
    prompts=st.one_of(st.lists(PROMPT, max_size=3), st.none(), st.integers(), st.text(max_size=2)),
    n=st.one_of(COUNT, st.lists(COUNT, max_size=3)),
    sampling=st.one_of(SAMPLING, st.lists(SAMPLING, max_size=3)),
    seeds=st.one_of(st.lists(SEED, max_size=3), st.none(), st.integers()),
)
@example(prompts=[[1, 2], [3]], n=2, sampling=SamplingParams(), seeds=[0, 2**64])
@example(prompts=[[1, 2], ["x"]], n=[2, 1], sampling=SamplingParams(), seeds=[0, 1])
def test_fastdec_generate_batch_arguments(prompts, n, sampling, seeds):
    dec = Decoder(tiny_model(), "pipelined", max_batch=4)
    got = works_or_loopcert_error(dec.generate_batch, prompts, n, sampling, seeds)
    if not isinstance(got, LoopcertError):
        assert len(got) == len(prompts)


# -- the CLI -------------------------------------------------------------------------------------
CLI_VALUE = st.sampled_from(
    [
        "0",
        "1",
        "2",
        "-1",
        "3.5",
        "",
        "x",
        "1e400",
        "nan",
        str(2**70),
        "99999999",
        "cuda",
        "cuda:7",
        "cpu",
        "float64",
        "bfloat16",
        "int8",
        "tiny-raven",
        "default",
        "/nonexistent",
        "on",
        "off",
        "pipelined",
        "autoregressive",
    ]
)
# the prompt and sampling flags generate and speculate share
DECODE_FLAGS = [
    "--prompt",
    "--prompt-ids",
    "--max-new-tokens",
    "--temperature",
    "--top-k",
    "--top-p",
    "--seed",
]
FLAGS = {
    "generate": [*DECODE_FLAGS, "--seed-weights", "--device", "--dtype", "--depth", "--eos", "--threads"],
    "speculate": [
        *DECODE_FLAGS,
        "--device",
        "--dtype",
        "--strategy",
        "--draft-depth",
        "--depth",
        "--second-depth",
        "--gate",
        "--draft-ahead",
        "--rewind-depth",
        "--fixed-width",
        "--eos",
        "--threads",
    ],
    "inspect": ["--threads"],
    "certify": ["--device", "--dtype", "--seed", "--decoder", "--out", "--threads", "--quick", "--full"],
    "bench": [
        "--device",
        "--dtype",
        "--seed-weights",
        "--tokens",
        "--repeats",
        "--tolerance",
        "--threads",
        "--quick",
        "--gate",
        "--write-baseline",
        "--baseline",
    ],
}
SWITCHES = {"--quick", "--full", "--gate", "--write-baseline"}


class Reached(Exception):
    """certify / bench got past their argument checks: the fuzz stops before the real run."""


@FUZZ
@given(
    command=st.sampled_from(sorted(FLAGS)),
    model=st.sampled_from(["tiny-raven", "tiny-ouro", "nope", ""]),
    data=st.data(),
)
def test_cli_argument_combinations(monkeypatch, tmp_path, command, model, data):
    import loopcert.commands.bench as bench_cmd
    import proofs.run.run as run_mod

    monkeypatch.chdir(tmp_path)  # nothing lands in the repository
    monkeypatch.setattr(run_mod.CertifyRun, "__init__", lambda *a, **k: (_ for _ in ()).throw(Reached()))
    monkeypatch.setattr(bench_cmd, "NaiveKVDecoder", lambda *a, **k: (_ for _ in ()).throw(Reached()))
    argv = [command, model]
    for flag in data.draw(st.lists(st.sampled_from(FLAGS[command]), max_size=5, unique=True)):
        argv.append(flag)
        if flag not in SWITCHES:
            argv.append(data.draw(CLI_VALUE))
    if command in ("generate", "speculate") and "--max-new-tokens" not in argv:
        argv += ["--max-new-tokens", "3"]
    threads = torch.get_num_threads()
    out = io.StringIO()
    with watchdog(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = cli_main(argv)
        except SystemExit as e:  # argparse: a malformed command line
            code = e.code
        except Reached:
            code = 0
        finally:
            torch.set_num_threads(threads)  # --threads applies to the process; the suite runs on one
    assert code in (0, 1, 2), (argv, code, out.getvalue()[-2000:])
    if code == 2:
        assert "error" in out.getvalue(), (argv, out.getvalue()[-2000:])


# -- what the fuzz found, pinned ------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["loopcert", "ouro"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_non_finite_weight_is_named(originals, tmp_path, kind, value):
    folder = lay_out(tmp_path, originals[kind])
    tensors = load_file(str(folder / "model.safetensors"))
    key = sorted(tensors)[-1]
    tensors[key].view(-1)[3] = value
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(LoopcertError, match=rf"{key}'? holds a non-finite value \({value}"):
        refdec.load_model(folder)


def test_a_weight_beyond_the_dtype_is_named(originals, tmp_path):
    folder = lay_out(tmp_path, originals["loopcert"])
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["norm.weight"][0] = 1e6  # finite in float32, inf in float16
    save_file(tensors, str(folder / "model.safetensors"))
    refdec.load_model(folder)
    with pytest.raises(LoopcertError, match="'norm.weight' overflows float16"):
        refdec.load_model(folder, dtype="float16")


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda m: refdec.generate(m, [1], 2, seed=2**64), r"seed must be < 2\*\*64 .*got 1844"),
        (lambda m: Decoder(m).generate([1], 2, seed=2**70), r"got 1180591620717411303424"),
        (lambda m: refdec.generate(m, [2**70], 2), "token ids must be .* integers"),
        (lambda m: refdec.generate(m, "ab", 2), "token ids"),
        (lambda m: refdec.generate(m, [1], 2, depth=2**20), r"depth must be <= 16384"),
        (lambda m: refdec.load_model("tiny-raven", seed=2**64), "weights seed"),
    ],
)
def test_bad_generate_arguments_are_named(call, match):
    with pytest.raises(LoopcertError, match=match):
        call(tiny_model())


@pytest.mark.parametrize("field, value", [("vocab_size", 10**12), ("d_model", 2**63), ("n_core", 2**31)])
def test_absurd_config_sizes_are_refused_before_allocating(originals, tmp_path, field, value):
    folder = lay_out(tmp_path, originals["loopcert"])
    config = json.loads((folder / "config.json").read_text())
    config[field] = value
    (folder / "config.json").write_text(json.dumps(config))
    with watchdog(10), pytest.raises(LoopcertError, match=f"{field}={value}: must be <="):
        refdec.load_model(folder)


# -- shard.json and the certify flags ---------------------------------------------------------------
class ShardText(str):
    def __repr__(self):  # hypothesis prints the arguments of a failing example: not the whole file
        return "ShardText(a tiny-ouro shard 1/6 of the shard plan)"


@pytest.fixture(scope="module")
def a_shard(tmp_path_factory):
    """shard.json of `certify tiny-ouro --shard 1/6` under the shard tests' plan (3 work units:
    a whole check, a sampling unit, a mutant)."""
    from plans import SHARD_PLAN

    import proofs.run.plan as plan_mod

    out = tmp_path_factory.mktemp("fuzz-shard")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(plan_mod.PLANS, "quick", SHARD_PLAN)
        with contextlib.redirect_stdout(io.StringIO()):
            assert cli_main(["certify", "tiny-ouro", "--jobs", "1", "--shard", "1/6", "--out", str(out)]) == 0
    return ShardText((out / "shard.json").read_text())


def _paths(x, at=()):
    """Every (path, value) inside a JSON value: the places a mutation can hit."""
    yield at, x
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _paths(v, (*at, k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _paths(v, (*at, i))


@FUZZ
@given(data=st.data())
@example(data=None)  # the probe's: one sampling result replaced by {}
def test_a_mutated_shard_is_read_or_refused_by_name(a_shard, tmp_path, data):
    """read_shard + combine on a mutated shard.json: it is read (and combines), or a LoopcertError
    names the folder; never a KeyError, IndexError or TypeError from inside merge."""
    from proofs.run.shards import combine, read_shard

    shard = json.loads(a_shard)
    if data is None:
        uid = next(u for u in shard["results"] if u.startswith("sampling/"))
        shard["results"][uid] = {}
        text = json.dumps(shard)
    else:
        how = data.draw(st.sampled_from(["set", "delete", "extra", "truncate", "bytes", "swap"]))
        places = [(p, v) for p, v in _paths(shard) if p]
        path, _ = data.draw(st.sampled_from(places))
        parent = shard
        for k in path[:-1]:
            parent = parent[k]
        if how == "set":
            parent[path[-1]] = data.draw(JSON_VALUE)
        elif how == "delete":
            del parent[path[-1]]
        elif how == "extra" and isinstance(parent, dict):
            parent[data.draw(st.text(min_size=1, max_size=8))] = data.draw(JSON_VALUE)
        elif how == "swap" and isinstance(parent, list) and len(parent) > 1:
            parent.reverse()
        text = json.dumps(shard)
        if how == "truncate":
            text = text[: data.draw(st.integers(0, len(text) - 1))]
    folder = tmp_path / "s1"
    folder.mkdir(exist_ok=True)
    (folder / "shard.json").write_bytes(
        data.draw(st.binary(max_size=32)) if data and how == "bytes" else text.encode()
    )
    got = works_or_loopcert_error(lambda: combine([read_shard(folder)]))
    if isinstance(got, LoopcertError):
        assert str(folder) in str(got) or "shard" in str(got), got
    if data is None:
        assert isinstance(got, LoopcertError) and f"{folder}: shard.json: results[" in str(got)


BAD_PLACES = ["afile", "afile/sub", "/proc/loopcert-nowhere/x", "out", ""]
CERTIFY_VALUES = {
    "--out": BAD_PLACES,
    "--plan-out": [*BAD_PLACES, "afile/sub/plan.json", "."],
    "--plan": ["afile", "/nonexistent", "out"],
    "--decoder": [
        "http://127.0.0.1:abc/v1",
        "http://[::1",
        "http://127.0.0.1:99999/v1",
        "http:///v1",
        "https://:0/v1",
        "mlx-lm:draft=",
        "nomodule:nofactory",
        "x",
        "",
    ],
    "--relative-to": ["http://127.0.0.1:abc/v1", "http://[::1", "x:y", ""],
    "--shard": ["0/3", "4/3", "1/0", "x", "1-3", "2/2", "1/1", "1/99999"],
    "--jobs": ["0", "-1", "1", "2", "x", "99999"],
    "--time-budget": ["0", "-1", "nan", "inf", "x", "1e400", "0.5"],
    "--seed": ["-1", str(2**63), "x", "0"],
    "--executor": ["local", "ray", "x"],
    "--ray-address": ["x", "127.0.0.1:1"],
    "--server": ["auto", "vllm", "x"],
    "--http-timeout": ["0", "-1", "nan", "x"],
    "--api-key": ["", "k"],
    "--served-model": ["x"],
    "--decoder-dtype": ["float64", "int8"],
    "--device": ["cpu", "cuda:7", "x"],
    "--dtype": ["float64", "int8", ""],
    "--threads": ["0", "1", "x"],
}


@FUZZ
@given(model=st.sampled_from(["tiny-raven", "nope"]), data=st.data())
@example(model="tiny-raven", data=None)  # the probe's: --out afile
def test_certify_flags_end_in_a_clean_usage_error_or_start(monkeypatch, tmp_path, model, data):
    """Any combination of certify's flags with mistyped values: a usage error (exit 2, one line
    naming what is wrong), argparse's exit 2, or a run that starts (stopped here before its
    first check); never a traceback, never a run that would end in one at its last write."""
    import proofs.run.run as run_mod

    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("hi\n")
    monkeypatch.setattr(run_mod.CertifyRun, "__init__", lambda *a, **k: (_ for _ in ()).throw(Reached()))
    argv = ["certify", model]
    if data is None:
        argv += ["--out", "afile"]
    else:
        for flag in data.draw(st.lists(st.sampled_from(sorted(CERTIFY_VALUES)), max_size=4, unique=True)):
            argv += [flag, data.draw(st.sampled_from(CERTIFY_VALUES[flag]))]
    threads = torch.get_num_threads()
    out = io.StringIO()
    with watchdog(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = cli_main(argv)
        except SystemExit as e:
            code = e.code
        except Reached:
            code = 0
        finally:
            torch.set_num_threads(threads)
    said = out.getvalue()
    assert code in (0, 2), (argv, code, said[-2000:])
    assert "Traceback" not in said, (argv, said[-2000:])
    if code == 2:
        assert "error" in said, (argv, said[-2000:])
    out_value = argv[argv.index("--out") + 1] if "--out" in argv else None
    if out_value in ("afile", "afile/sub", "/proc/loopcert-nowhere/x") and "--plan-out" not in argv:
        assert code == 2, (argv, said)  # a run that could not write its result never starts
    if data is None:
        assert code == 2 and "--out afile: is a file, not a folder" in said
