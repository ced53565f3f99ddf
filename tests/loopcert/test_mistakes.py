"""The mistakes a decoder author makes, each ending in a one-line usage error (exit 2)
before any check runs, or in a failure line that says its cause: a factory of the wrong shape, a
generate() that returns no token ids or the prompt too, a wrong declaration, a module not on the
path; and the small ones: markdown cells, `inspect default`, `--help`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import proofs.run.certify as certify_mod
from loopcert.cli import main
from loopcert.testing import SMOKE_PLAN
from proofs.run.certify import certify
from refdec.errors import LoopcertError
from reports.markdown import table

PLAN = SMOKE_PLAN  # positions=None in the smoke plan: seconds on tiny-ouro


class Started(Exception):
    pass


@pytest.fixture
def no_checks(monkeypatch):
    """Any check starting is a test failure: the error must come before the plan runs."""

    def started(*_a, **_k):
        raise Started("the plan ran before the decoder was checked")

    monkeypatch.setattr(certify_mod, "plan_units", started)


class Echo:
    """A greedy decoder that answers token 1 at every step; `returns` shapes what generate gives."""

    def __init__(self, returns=list, prompt_too=False):
        self.returns, self.prompt_too = returns, prompt_too

    def generate(self, prompt, max_new_tokens, sampling, seed):
        out = [1] * max_new_tokens
        return self.returns((list(prompt) if self.prompt_too else []) + out)


def certify_tiny(decoder, **kw):
    return certify("tiny-ouro", decoder, plan=PLAN, **kw)


def two_args(model, extra):
    return Echo()


def returns_none(model):
    return None


class NoGenerate:
    def __init__(self, model):
        self.model_name = model.cfg.name


def one_line(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize(
    "factory, said",
    [
        (two_args, "a factory is called as factory(model) -> decoder, and two_args(model, extra) cannot"),
        (returns_none, "returned None, not a decoder"),
        (NoGenerate, "returned a 'NoGenerate', not a decoder"),
    ],
)
def test_a_factory_of_the_wrong_shape_is_a_usage_error_before_any_check(no_checks, factory, said):
    with pytest.raises(LoopcertError) as e:
        certify_tiny(factory)
    assert said in one_line(e)


def test_a_factory_of_the_wrong_shape_exits_2_on_the_command_line(tmp_path, monkeypatch, capsys, no_checks):
    (tmp_path / "wrongdec.py").write_text("def make(model):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["certify", "tiny-ouro", "--decoder", "wrongdec:make", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "returned None, not a decoder" in err and len(err.strip().splitlines()) == 1


def test_a_module_not_on_the_path_gets_a_pythonpath_hint(no_checks):
    with pytest.raises(LoopcertError) as e:
        certify_tiny("no_such_decoder_module:make")
    assert "cannot import 'no_such_decoder_module'" in one_line(e) and "PYTHONPATH" in str(e.value)


def test_a_generate_with_the_wrong_arguments_or_returns_is_refused_before_any_check(no_checks):
    class TwoArgs:
        def generate(self, prompt, max_new_tokens):
            return [1] * max_new_tokens

    with pytest.raises(LoopcertError, match=r"generate must take \(prompt, max_new_tokens, sampling, seed\)"):
        certify_tiny(TwoArgs())
    with pytest.raises(LoopcertError) as e:
        certify_tiny(Echo(prompt_too=True))
    assert "returned 2 tokens, expected 1 (the prompt included?" in one_line(e)
    with pytest.raises(LoopcertError, match="not token ids"):
        certify_tiny(Echo(returns=lambda toks: " ".join(map(str, toks))))
    with pytest.raises(LoopcertError, match="non-integer token 1.0"):
        certify_tiny(Echo(returns=lambda toks: np.array(toks, dtype=np.float32)))


class Greedy:
    """refdec's greedy tokens, returned through `returns` (docs/decoders.md: a 1-D numpy array or
    torch tensor of integers is converted, as a list is read)."""

    def __init__(self, model, returns):
        self.model, self.returns = model, returns

    def generate(self, prompt, max_new_tokens, sampling, seed):
        from refdec.decode import generate

        return self.returns(generate(self.model, prompt, max_new_tokens, sampling, seed))


@pytest.mark.parametrize(
    "returns",
    [lambda t: np.array(t, dtype=np.int64), lambda t: torch.tensor(t, dtype=torch.int32)],
    ids=["numpy", "torch"],
)
def test_integer_arrays_and_tensors_are_converted_before_the_run(monkeypatch, returns):
    import proofs.decoders.declared as declared_mod

    asked = []
    probe = declared_mod.probe_generate
    monkeypatch.setattr(declared_mod, "probe_generate", lambda d, w: asked.append(w) or probe(d, w))
    monkeypatch.setattr(certify_mod, "plan_units", lambda *_a, **_k: (_ for _ in ()).throw(Started()))
    with pytest.raises(Started):  # through the probe, to the plan
        certify_tiny(lambda model: Greedy(model, returns), label="arrays")
    assert asked == ["arrays"]


@pytest.mark.parametrize(
    "attribute, value, said",
    [
        ("max_batch", 0, "max_batch must be an int >= 1, got 0"),
        ("max_batch", "8", "max_batch must be an int >= 1, got '8'"),
        ("compute_dtype", "float33", "compute_dtype must be a floating torch.dtype or its name"),
        ("compute_dtype", torch.int64, "compute_dtype must be a floating torch.dtype"),
        ("sampling_fields", ("min_p", "top_q"), "sampling_fields names top_q"),
    ],
)
def test_a_wrong_declaration_is_an_error_naming_it(no_checks, attribute, value, said):
    dec = Echo()
    setattr(dec, attribute, value)
    with pytest.raises(LoopcertError) as e:
        certify_tiny(dec)
    assert said in one_line(e) and attribute in str(e.value)


def test_a_pipe_in_a_cell_does_not_break_the_table():
    out = table([["T=1 | top-k=2", "x\ny"]], ["case | view", "v"])
    lines = out.splitlines()
    assert r"T=1 \| top-k=2" in out and r"case \| view" in out and "x y" in out
    assert len(lines) == 3 and {line.replace(r"\|", "").count("|") for line in lines} == {3}


def test_inspect_default_reads_the_shipped_model(capsys):
    assert main(["inspect", "default"]) == 0
    assert "recognised as" in capsys.readouterr().out


def test_help_is_complete_sentences(capsys):
    from loopcert.cli import build_parser

    text = build_parser().format_help()
    description = text.split("\n\n")[1]
    assert " ".join(description.split()).endswith(".") and "COMMAND --help" in description


def test_a_decoder_returning_the_prompt_too_is_told_so_in_its_failure_line():
    """The greedy check's line names the length (the probe catches it first on a 1-token request;
    a decoder that gets that one right and adds the prompt later still reads why)."""
    import refdec
    from proofs.checks.greedy import check_greedy
    from proofs.stats.exact_laws import Oracle
    from refdec.decode import generate
    from reports.console import failure_line

    model = refdec.load_model("tiny-ouro", dtype="float64")

    class PromptToo:
        def generate(self, prompt, n, sampling, seed):
            return list(prompt) + generate(model, prompt, n, sampling, seed)

    runs = [("tiny-ouro", "prompt-too", PromptToo(), Oracle(model), torch.float64)]
    c = check_greedy("greedy_float64", runs, lambda _o: [[5, 6, 7]], 4)
    line = failure_line(c)
    assert not c.passed and "tokens, expected 4 (the prompt included?" in line, line


def test_an_exception_reads_as_what_generate_raised_not_none():
    from proofs.details import Divergence
    from reports.console import divergence_text

    v = Divergence(
        "tiny-ouro", "mine", (1, 2), "float32", 0, None, None, None, None, "real bug", "ValueError: boom"
    )
    assert divergence_text(v) == "generate() raised ValueError: boom"


def test_the_speed_row_gives_each_settings_own_ratio_and_flags_a_slowdown():
    """A decoder at half the baseline's speed reads x0.5 (measured), never the baseline's 1."""
    import time

    import refdec
    from fastdec.config import DecodeConfig
    from proofs.checks.speed import check_speed
    from proofs.decoders.candidates import Candidate, fastdec_candidate
    from refdec.decode import generate
    from reports.render import status
    from speed.timing import Workload

    class Slow:
        def generate(self, prompt, n, sampling, seed):
            until = time.process_time() + 0.2  # busy: far slower than fastdec, on any clock
            while time.process_time() < until:
                pass
            return generate(self.model, prompt, n, sampling, seed)

    def build(model):
        dec = Slow()
        dec.model = model
        return dec

    model = refdec.load_model("tiny-ouro")
    base = fastdec_candidate(DecodeConfig("autoregressive"))
    c = check_speed("speed", [Candidate("slow", build)], base, model, [[1, 2, 3]], Workload(1, 3, 2, 1))
    assert c.measured < 1, c.measured
    _, note = status(c)
    assert note.startswith("slow x0.") and "(slower than the baseline)" in note, note


def test_greedy_at_depth_says_where_and_which_tokens_not_a_count_against_zero():
    """`greedy_depth: measured 3 against bound 0` (2026-12-07, mlx-lm with a near draft) told a user
    nothing: the line names the first real divergence's placement, position, boundary and tokens."""
    from certificates import depth

    from proofs.details import DepthRun
    from proofs.result import CheckResult
    from reports.console import failure_line

    c = CheckResult("greedy_depth", 1, 0, False, depth())
    line = failure_line(c)
    assert line == (
        "1 real bug(s) in 1 divergence(s) at depth; first: pipelined d1=1 d2=2 (float32), prompt of 7 "
        "token(s) + 4: position 9 (loop_window_size 8 wraps (position 8) + 1): the reference's 3, the "
        "decoder's 5"
    ), line
    run = DepthRun("mine", "float32", 0, 0, 0, "TypeError: boom")
    broken = depth(divergences=(), real_bugs=0, runs=(run,))
    assert failure_line(CheckResult("greedy_depth", 1, 0, False, broken)) == (
        "mine (float32) could not run: TypeError: boom"
    )
