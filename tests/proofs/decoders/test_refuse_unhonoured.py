"""An engine decoder refuses, by name, what its request cannot carry (proofs.decoders.protocol
refuse_unhonoured, shared by the mlx-lm, llama.cpp and OpenVINO decoders): a field it does not
send, a penalty scope, a penalty sign or a min-p order other than its own; what it can carry
passes."""

from __future__ import annotations

import pytest

from proofs.decoders.protocol import refuse_unhonoured
from refdec.errors import LoopcertError
from refdec.sampling import BY_SIGN, CONTEXT_SCOPE, ENGINE_FIELDS, MIN_P_LAST, SamplingParams

FIELDS = tuple(f for f in ENGINE_FIELDS if f != "min_tokens")
OURS = dict(penalty_scope=CONTEXT_SCOPE, penalty_sign=BY_SIGN, min_p_order=MIN_P_LAST)
RULES = dict(scope=CONTEXT_SCOPE, sign=BY_SIGN, min_p_order=MIN_P_LAST)


def refuse(**params) -> None:
    refuse_unhonoured(SamplingParams(1.0, **{**OURS, **params}), FIELDS, "E", "E has no such field", **RULES)


def test_what_the_engine_carries_passes():
    refuse(
        min_p=0.1, repetition_penalty=1.2, presence_penalty=0.5, frequency_penalty=0.3, logit_bias={3: 1.0}
    )
    # a convention the case does not use is not asked about: no penalty, no min-p
    refuse(penalty_scope="split", penalty_sign="subtract", min_p_order="min-p-first", logit_bias={3: 1.0})


@pytest.mark.parametrize(
    "params, said",
    [
        (dict(min_tokens=2), r"min_tokens=2: E has no such field \(this decoder sends min_p, "),
        (dict(repetition_penalty=1.2, penalty_scope="split"), r"penalty_scope 'split' \(E's is 'context'\)"),
        (
            dict(presence_penalty=0.5, penalty_sign="subtract"),
            r"penalty_sign 'subtract' \(E's is 'by-sign'\)",
        ),
        (dict(min_p=0.1, min_p_order="min-p-first"), r"min_p_order 'min-p-first' \(E's is 'min-p-last'\)"),
    ],
    ids=["field", "scope", "sign", "min-p order"],
)
def test_what_it_cannot_carry_is_refused_by_name(params, said):
    with pytest.raises(LoopcertError, match=said):
        refuse(**params)
