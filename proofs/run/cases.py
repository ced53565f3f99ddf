"""The cases a sampling check samples on one model: the sampled model's own law picks them
(docs/design.md section 7, case choice).

Each entry of a plan's sampling_cases is a fixed case or a path's options; choose_case takes
one option per path from the exact law of this model at the most informative prompt
(pick_prompt), and N per case follows from the plan's target TV at the Holm level of all the
cases together. Every case is judged under the sampler convention the certified decoder
declares (refdec.sampling.SAMPLER_ORDERS: the plan's SamplingParams with that `order`).
SamplingSetup is what a run keeps of that, per sampled model.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from proofs.boundaries import SPECULATION, Boundary, within
from proofs.checks.distribution import (
    Case,
    CaseLaw,
    alpha_per_test,
    capped,
    case_law,
    planned_samples,
    relative_samples,
)
from proofs.decoder_attributes import ALL_FIELDS, SamplingSupport
from proofs.prompts import long_prompt, model_prompts
from proofs.run.plan import CaseSpec, CertifyPlan, case_options
from proofs.stats.exact_laws import Oracle
from refdec.errors import LoopcertError
from refdec.model import LoopedLM
from refdec.sampling import ENGINE_FIELDS, TEMPERATURE_FIRST, SamplingParams

PROMPT_CANDIDATES = 6  # the prompts pick_prompt chooses among


@dataclass(frozen=True)
class SamplingSetup:
    """What every sampling check on one model shares, built once per model and process."""

    laws: tuple[CaseLaw, ...]  # one per plan entry: the case it samples here, with its views
    samples: tuple[int, ...]  # N of each case (0: no view has 2 bins, no power)
    model: LoopedLM  # the model the decoders sample: float64 in a float64 run, else float32
    # N of each case per decoder of the engine-relative check (proofs/checks/relative.py)
    relative: tuple[int, ...] = ()

    def law(self, case_name: str) -> CaseLaw:
        return next(law for law in self.laws if law.case.name == case_name)


def entry_fields(entry: CaseSpec | tuple[CaseSpec, ...]) -> tuple[str, ...]:
    """The engines' other parameters (refdec.sampling.ENGINE_FIELDS) one plan entry sets, in any
    of its options, its Picks included."""
    found = set()
    for spec in case_options(entry):
        found |= set(spec[1].engine_fields())
        found |= {pick.field for pick in (spec[3] if len(spec) > 3 else ())}
    return tuple(f for f in ENGINE_FIELDS if f in found)


# fields a case may be sampled without when the decoder does not declare them: the case's law is
# then the one without them, and the case is named for it, so the fields the decoder does offer are
# still sampled (mlx-lm and llama.cpp have no min_tokens: without it the quick plan's engine case's
# stop may end a sample at the first token; OpenVINO GenAI has no logit bias, and its penalties
# would otherwise never be sampled). min-p and the penalties are the case's point: never dropped
DROPPABLE = ("logit_bias", "stop_token_ids", "min_tokens")


def without(entry: CaseSpec | tuple[CaseSpec, ...], fields: Sequence[str]) -> CaseSpec | tuple[CaseSpec, ...]:
    """`entry` with `fields` at SamplingParams' defaults and without the Picks that would set them,
    each case named "... without <fields>"."""
    default = {f: SamplingParams.__dataclass_fields__[f].default for f in fields}
    said = f" without {', '.join(fields)}"

    def one(s: CaseSpec) -> CaseSpec:
        picks = tuple(p for p in (s[3] if len(s) > 3 else ()) if p.field not in fields)
        return (s[0] + said, replace(s[1], **default), s[2], *((picks,) if len(s) > 3 else ()))

    options = tuple(one(s) for s in case_options(entry))
    return options[0] if isinstance(entry[0], str) else options


def declared_plan(plan: CertifyPlan, support: SamplingSupport) -> tuple[CertifyPlan, tuple[str, ...]]:
    """(the plan with only the entries whose parameters the decoder declares it honours, each left
    out entry as "<case> (<fields it does not declare>)"): a decoder is never judged against a
    law it was not declared to sample (proofs.decoder_attributes.declared_sampling). An entry that
    misses only DROPPABLE fields is kept without them, and said so ("<case> (sampled without ...)")."""
    kept, left = [], []
    for entry in plan.sampling_cases:
        missing = [f for f in entry_fields(entry) if f not in support.fields]
        name = case_options(entry)[0][0]
        if missing and all(f in DROPPABLE for f in missing):
            kept.append(without(entry, missing))
            left.append(f"{name} (sampled without {', '.join(missing)})")
        elif missing:
            left.append(f"{name} ({', '.join(missing)})")
        else:
            kept.append(entry)
    if not left:
        return plan, ()
    return replace(plan, sampling_cases=tuple(kept)), tuple(left)


PLAIN_REACH = 36  # the plain cases' prompts (at most 32 tokens, proofs/prompts.py) and tokens reach this


def boundary_positions(
    boundaries: Sequence[Boundary], horizon: int, count: int, max_len: int | None = None
) -> list[Boundary]:
    """The boundaries the plan's boundary cases are placed at (count at most): every window first
    (where rotating caches wrap), then the other declared ones (a cache page, a capacity, a server
    block) past what the plain cases reach; each in ascending position, one case per position,
    within the horizon. A speculation width is the greedy-at-depth check's (a prompt of k + 1), and
    the model's last positions (max_len - 2 and on) its long continuation's and the per-position
    test's: a case there re-reads the longest prompt for every sample (OpenVINO's SDPA pipeline
    could not sample it within the quick plan's time)."""
    last = math.inf if max_len is None else max_len - 2
    usable = [
        b for b in within(boundaries, horizon) if b.declared and b.source != SPECULATION and b.position < last
    ]
    windows = [b for b in usable if b.window]
    others = [b for b in usable if not b.window and b.position > PLAIN_REACH]
    out: dict[int, Boundary] = {}
    for b in windows + others:
        if len(out) < count and b.position >= 2 and b.position not in out:
            out[b.position] = b
    return list(out.values())


def boundary_cases(
    oracle: Oracle,
    plan: CertifyPlan,
    at: Sequence[Boundary],
    prompt_of,
    order: str,
    support: SamplingSupport,
) -> tuple[CaseLaw, ...]:
    """The plan's first entry (choose_case: a path's option chosen at this prompt) after a prompt of
    b - 1 tokens for each boundary b: its first tokens sit at positions b - 1 and b, across it
    (prompt_of(n): a prompt of n tokens); named "<case> @ b (what changes there)"."""
    out = []
    for b in at:
        prompt = tuple(prompt_of(b.position - 1))
        law = choose_case(oracle, prompt, plan.sampling_cases[0], plan, order, support)
        name = f"{law.case.name} @ {b.position} ({b.what})"
        out.append(replace(law, case=replace(law.case, name=name)))
    return tuple(out)


def chosen_cases(
    oracle: Oracle,
    name: str,
    plan: CertifyPlan,
    order: str = TEMPERATURE_FIRST,
    support: SamplingSupport = ALL_FIELDS,
    at: Sequence[Boundary] = (),
) -> tuple[tuple[CaseLaw, ...], tuple[int, ...]]:
    """(law, N) of every plan entry on the model `oracle` holds (named `name`): its cases at the
    most informative of its prompts under sampler convention `order` and the decoder's other
    conventions (`support`: min-p order, penalty scope), then the first entry's case at each
    boundary of `at` (boundary_cases); N at the Holm level of all of them."""
    prompt = pick_prompt(oracle, model_prompts(oracle.model, name, PROMPT_CANDIDATES))
    laws = tuple(choose_case(oracle, prompt, entry, plan, order, support) for entry in plan.sampling_cases)
    if at and plan.sampling_cases:
        laws += boundary_cases(
            oracle,
            plan,
            at,
            lambda n: long_prompt(oracle.model, name, n),
            order,
            support,
        )
    alpha = alpha_per_test(laws, plan.target)
    laws = tuple(capped(law, plan.target, alpha, plan.case_samples_cap) for law in laws)
    return laws, tuple(planned_samples(law, plan.target, alpha) for law in laws)


def relative_plan(laws: Sequence[CaseLaw], plan: CertifyPlan) -> tuple[int, ...]:
    """N per decoder of each case of the engine-relative check, at the Holm level of all the
    cases' views (the same family as the sampling check's)."""
    alpha = alpha_per_test(laws, plan.target)
    return tuple(relative_samples(law, plan.target, alpha) for law in laws)


def pick_prompt(oracle: Oracle, prompts: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """The prompt whose next-token law (T=1) has the most entropy: the most informative test."""

    def entropy(p):
        law = oracle.law(p, oracle.R, SamplingParams(temperature=1.0))
        return float(-(law * law.clamp_min(1e-300).log()).sum())

    return max(prompts, key=entropy)


def option_samples(law: CaseLaw, plan: CertifyPlan) -> int:
    """N of one option of a path, judged at the Holm level of one such case per plan entry."""
    return planned_samples(law, plan.target, plan.alpha / (len(plan.sampling_cases) * max(1, len(law.views))))


def resolve_case(
    oracle: Oracle, prompt: tuple[int, ...], spec: CaseSpec, order: str, support: SamplingSupport = ALL_FIELDS
) -> tuple:
    """(name, params, n) of one case spec on this model under convention `order` and the decoder's
    other conventions (`support`; they change only a case that sets min-p or a penalty): the tokens its
    Picks name taken from the model's T=1 law after `prompt` (ranked, ties by lower id), and
    written into the name ("... (bias token 17 +1.5, stop 32)")."""
    name, sp, k = spec[:3]
    picks = spec[3] if len(spec) > 3 else ()
    if picks:
        law = oracle.law(prompt, oracle.R, SamplingParams(temperature=1.0))
        ranked = sorted(range(law.numel()), key=lambda t: (-float(law[t]), t))
        said = []
        for pick in picks:
            tok = ranked[pick.rank]
            if pick.field == "logit_bias":
                sp = replace(sp, logit_bias=sp.logit_bias + ((tok, pick.value),))
                said.append(f"bias token {tok} {pick.value:+g}")
            elif pick.field == "stop_token_ids":
                sp = replace(sp, stop_token_ids=sp.stop_token_ids + (tok,))
                said.append(f"stop {tok}")
            else:
                raise LoopcertError(f"a Pick names field logit_bias or stop_token_ids, not {pick.field!r}")
        name = f"{name} ({', '.join(said)})"
    if sp.min_p > 0 or sp.penalized:
        sp = support.apply(sp)
    return name, sp.with_order(order), k


def choose_case(
    oracle: Oracle,
    prompt: tuple[int, ...],
    entry: CaseSpec | tuple[CaseSpec, ...],
    plan: CertifyPlan,
    order: str = TEMPERATURE_FIRST,
    support: SamplingSupport = ALL_FIELDS,
) -> CaseLaw:
    """The law of the case one entry of the plan samples on this model: a fixed case as it is; of a
    path's options, the first that is eligible (it has power, N > 0, and a view past the first
    token: a view of token 1 alone never sees a token drawn after a rejection) and needs at most
    plan.case_cap samples; else the eligible one that needs the fewest; else the one with power on
    its first token alone that needs the fewest; else the first (which then fails as no power); N
    as option_samples judges it. The law's `chosen` says which rule chose and what was passed over."""
    options = tuple(resolve_case(oracle, prompt, spec, order, support) for spec in case_options(entry))
    if len(options) == 1:
        name, sp, k = options[0]
        return case_law(oracle, Case(name, sp, prompt, k))
    cap = plan.case_cap if plan.case_cap is not None else math.inf
    tried: list[tuple[CaseLaw, int, str]] = []  # (law, N, why passed over; "" = fits)
    for name, sp, k in options:
        law = case_law(oracle, Case(name, sp, prompt, k))
        n = option_samples(law, plan)
        if n == 0:
            why = "no view with 2 bins (no power)"
        elif all(v.position == 0 for v in law.views):
            why = f"tests only the first token (N {n:,})"
        else:
            why = f"N {n:,} > {cap:,}" if n > cap else ""
        tried.append((law, n, why))
        if not why:
            break
    past_first = [t for t in tried if t[1] > 0 and any(v.position != 0 for v in t[0].views)]
    powered = [t for t in tried if t[1] > 0]
    if not tried[-1][2]:
        law = tried[-1][0]
        rule = f"the first of {len(options)} options with power past the first token and N <= {cap:,}"
    elif past_first:
        law = min(past_first, key=lambda t: t[1])[0]
        rule = f"no option has N <= {cap:,}: of those with power past the first token, the one needing fewest"
    elif powered:
        law = min(powered, key=lambda t: t[1])[0]
        rule = "no option has power past the first token: of those with power on it, the one needing fewest"
    else:
        law = tried[0][0]
        rule = "no option has power: the first"
    passed = "; ".join(f"{t[0].case.name}: {t[2]}" for t in tried if t[0] is not law)
    return replace(law, chosen=rule + (f"; passed over {passed}" if passed else ""))


# -- one plan for every machine (docs/design.md section 8): the choices above as data ----------


def support_digest(law: CaseLaw) -> str:
    """A digest of what the views count by: each view's name, position, prefix and bins (token ->
    bin, sequence -> bin), not the bins' probabilities. Two machines whose float64 laws differ
    in the last bits bin the same samples alike exactly when this agrees."""
    h = hashlib.sha256()
    for v in law.views:
        h.update(repr((v.name, v.position, v.prefix, v.labels, v.rest)).encode())
        if v.token_bins is not None:
            h.update(v.token_bins.astype("<i8").tobytes())
        if v.seq_bins is not None:
            h.update(repr(sorted(v.seq_bins.items())).encode())
    return h.hexdigest()[:16]


def setup_record(laws: Sequence[CaseLaw], samples: Sequence[int], relative: Sequence[int] = ()) -> dict:
    """The planning choices of one sampled model as plain data: the prompt, and per plan entry the
    case chosen (with why), its sampler convention, its N (and the engine-relative check's, when
    given) and the digest of its views' bins (planned_cases reads it)."""
    return {
        "prompt": list(laws[0].case.prompt) if laws else [],
        "cases": [
            {
                "name": law.case.name,
                "temperature": law.case.sampling.temperature,
                "top_k": law.case.sampling.top_k,
                "top_p": law.case.sampling.top_p,
                "order": law.case.sampling.order,
                **_more_params(law.case.sampling),
                # a case after its own prompt (at a boundary): the record's prompt is the others'
                **({"prompt": list(law.case.prompt)} if law.case.prompt != laws[0].case.prompt else {}),
                "tokens": law.case.n,
                "samples": n,
                **({"relative_samples": relative[i]} if relative else {}),
                "chosen": law.chosen,
                **({"target_tv": law.target_tv} if law.target_tv is not None else {}),
                "bins": support_digest(law),
            }
            for i, (law, n) in enumerate(zip(laws, samples, strict=True))
        ],
    }


def _more_params(s: SamplingParams) -> dict:
    """The engines' other parameters of a case, when it sets any ({"params": {field: value}}):
    a record of the old three fields stays as it was."""
    more = {k: v for k, v in s.describe().items() if k not in ("temperature", "top_k", "top_p")}
    return {"params": more} if more else {}


def planned_cases(oracle: Oracle, name: str, record: dict) -> tuple[tuple[CaseLaw, ...], tuple[int, ...]]:
    """(law, N) of every plan entry as `record` (setup_record, made where the run was planned)
    says: its cases, convention and N as chosen there, never rechosen here; the laws computed
    here must bin as there, else a LoopcertError names the case (this machine cannot run that
    plan). A record written before conventions were recorded is temperature-first."""
    laws, samples = [], []
    for c in record["cases"]:
        sp = SamplingParams(
            temperature=c["temperature"],
            top_k=c["top_k"],
            top_p=c["top_p"],
            order=c.get("order", TEMPERATURE_FIRST),
            **c.get("params", {}),
        )
        prompt = tuple(c.get("prompt", record["prompt"]))
        law = replace(
            case_law(oracle, Case(c["name"], sp, prompt, c["tokens"])),
            chosen=c["chosen"],
            target_tv=c.get("target_tv"),
        )
        if support_digest(law) != c["bins"]:
            raise LoopcertError(
                f"case {c['name']} on {name}: this machine's exact law bins its samples otherwise than "
                f"the plan's (bins {support_digest(law)} against {c['bins']}): its float64 maths "
                "differ beyond the last bits; run this part on a machine like the planner's"
            )
        laws.append(law)
        samples.append(int(c["samples"]))
    return tuple(laws), tuple(samples)


def planned_relative(record: dict) -> tuple[int, ...] | None:
    """The engine-relative check's N per case as `record` says (None: it planned none)."""
    got = [c.get("relative_samples") for c in record["cases"]]
    return None if any(n is None for n in got) else tuple(int(n) for n in got)


def recorded_order(record: dict) -> str:
    """The sampler convention a record's cases were planned under (one per run)."""
    orders = {c.get("order", TEMPERATURE_FIRST) for c in record["cases"]}
    if len(orders) > 1:
        raise LoopcertError(f"a sampling plan mixes sampler conventions {sorted(orders)}")
    return orders.pop() if orders else TEMPERATURE_FIRST
