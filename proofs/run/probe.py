"""Run one function in a short-lived forked child and return what it returned (pickled back).

Why: `--jobs N` forks N workers from the parent (proofs/run/jobs.py), and an engine's runtime does
not survive a fork: llama.cpp's server, mlx's stream scheduler and OpenVINO's thread pools run
threads that the child does not have, so a worker that reuses the engine its parent started waits
for them forever (tox -e llamacpp's certify rows hung so, their workers asleep on a futex). The
parent still has to know, before it forks, whether the decoder applies to the model and what it
declares (sampler convention, sampling parameters, boundaries): it asks a child built for that one
question, and never starts the engine itself.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable
from typing import Any

from refdec.errors import LoopcertError


def _child(fn: Callable[[], Any], conn) -> None:
    try:
        conn.send(("ok", fn()))
    except BaseException as e:  # noqa: BLE001 - handed back to the parent, which raises it
        try:
            conn.send(("raised", e))
        except Exception:  # noqa: BLE001 - an exception that does not pickle: its text
            conn.send(("text", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:
        conn.close()


def in_child(fn: Callable[[], Any], what: str) -> Any:
    """fn() run in a forked child: its result, or the exception it raised raised here (one that
    does not pickle as a LoopcertError carrying its text). `what` names the question in errors."""
    ctx = multiprocessing.get_context("fork")
    mine, theirs = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(fn, theirs), daemon=True)
    child.start()
    theirs.close()
    try:
        kind, got = mine.recv()
    except EOFError:
        child.join()
        raise LoopcertError(
            f"{what}: the probe process ended without an answer (exit {child.exitcode})"
        ) from None
    finally:
        mine.close()
    child.join()
    if kind == "ok":
        return got
    if kind == "raised":
        raise got
    raise LoopcertError(f"{what}: {got}")
