"""Mutation power (docs/design.md section 6, check 4): wrong decoders must be rejected, lossless
but unusual ones must not.

The mutants are `proofs.decoders.specref.SpecRef` with one bug switched on (independent of fastdec's
engine), plus fastdec's lossy `adaptive-verify`. Each is run through the same greedy check
(proofs/checks/greedy.py) and the same sampling check, planned by the same target TV
(proofs/checks/distribution.py), as a candidate, on the setting where its bug shows. Each mutant's
exact TV shift is computed by enumeration (`SpecRef.sequence_law`), over whole sequences and as
each view of the test sees it, and set against the view's detectable TV: a mutant is *promised*
to be caught when some view's binned shift is at least that view's detectable TV. The quick
plan must kill every promised mutant and reports the others as below its power; the full plan
must kill them all. Enumerable entries are sampled from their exact law (proofs/decoders/exact_law.py),
the fastdec entry through fastdec itself.

The controls change efficiency, never the law (docs/design.md section 4: the gate is free; the
draft may use any law as long as it is scored with the law it was drawn from); each is run on
every sampling case, and its exact TV shift must be 0 up to float64 rounding. The check fails
if a mutant the plan must kill survives or any control is flagged.
"""

from __future__ import annotations

import copy
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

import refdec
from proofs.boundaries import collect as collect_boundaries
from proofs.checks.depth import check_depth, horizon_for, placements
from proofs.checks.distribution import Target, case_spec, check_distribution
from proofs.checks.greedy import check_greedy
from proofs.checks.seed_invariance import check_seed_invariance
from proofs.decoders.batch_stream import BatchStreams
from proofs.decoders.edges import EdgeBugs, EdgeSpec
from proofs.decoders.exact_law import LawSampler
from proofs.decoders.penalty_rollback import PenaltyRollback
from proofs.decoders.specref import Bugs, SpecRef
from proofs.details import MutantRow, MutationDetails
from proofs.prompts import long_prompt
from proofs.result import CheckResult
from proofs.stats.exact_laws import Oracle
from proofs.stats.views import Case, CaseLaw, case_law
from refdec.errors import LoopcertError
from refdec.progress import Progress
from refdec.sampling import SamplingParams

MODEL = "tiny-ouro"
WIDE = "tiny-ouro at V=61"  # the top_k=50 default is invisible below 51 tokens
LOOPCODER64 = "tiny-loopcoder at window 64"  # the boundary mutants' model (greedy at depth)
WHY_MODEL = (
    "R=4, vocab 13 (and 61 for the top-k default): every law is enumerated exactly, so each "
    "mutant's TV shift is known and its sampling costs microseconds"
)
PROMPT = (1, 2, 3)
CASES = (
    Case("T=0.5", SamplingParams(temperature=0.5), PROMPT),
    Case("top-k=2", SamplingParams(temperature=1.0, top_k=2), PROMPT),
    Case("top-p=0.5", SamplingParams(temperature=1.0, top_p=0.5), PROMPT),
    Case("T=1.5 n=2", SamplingParams(temperature=1.5), PROMPT, 2),  # on WIDE only: 61^2 sequences
    # -- the engines' other parameters; token 3 is the likeliest after PROMPT (p 0.29) --
    Case("min-p=0.3", SamplingParams(temperature=1.0, min_p=0.3), PROMPT),
    Case("bias 4 +1", SamplingParams(temperature=1.0, logit_bias={4: 1.0}), PROMPT),
    Case(
        "penalties",
        SamplingParams(temperature=1.0, repetition_penalty=2.5, frequency_penalty=1.0, presence_penalty=0.5),
        PROMPT,
    ),
    Case("stop 3 min-tokens=1", SamplingParams(temperature=1.0, stop_token_ids=[3], min_tokens=1), PROMPT),
    Case("T=1.5 top-k=4 top-p=0.6", SamplingParams(temperature=1.5, top_k=4, top_p=0.6), PROMPT),
    # penalties strong enough that a rejected draft counted by them shows (at the
    # "penalties" case's T=1 the shift sits at the quick plan's detectable TV, here 8x past it)
    Case(
        "T=0.5 penalties",
        SamplingParams(temperature=0.5, repetition_penalty=2.5, frequency_penalty=2.0, presence_penalty=1.0),
        PROMPT,
    ),
)
GREEDY_PROMPTS = ((1, 2, 3), (4, 7, 11, 2), (0, 5), (12, 3, 8, 6, 9), (2,), (9, 9, 1))
GREEDY_TOKENS = 12
# seed invariance of the batch entries: PROMPT beside four of the greedy prompts, 6 tokens at T=1,
# three seeds (proofs/checks/seed_invariance.py; the quick plan's own check uses REPRO_TOKENS = 6)
BATCH_SAMPLING, BATCH_TOKENS, BATCH_SEEDS = SamplingParams(temperature=1.0), 6, (0, 1, 2)
CONTROL_TV_TOL = 1e-9  # a control's exact TV shift is float64 rounding only


MUTANT_ID = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")


@dataclass(frozen=True)
class Mutant:
    id: str  # lowercase words joined by hyphens, saying what is wrong; a control's starts "control-"
    description: str  # the same in a short sentence
    bug: str  # what is wrong (or, for a control, what is unusual), precisely
    specref: dict = field(default_factory=dict)  # SpecRef kwargs; empty for a fastdec entry
    fastdec: dict | None = None  # fastdec.Decoder kwargs
    case: str | None = None  # sampling case the bug shows in; None: every case (controls)
    control: bool = False  # lossless: must NOT be rejected
    model: str = MODEL  # MODEL, WIDE or LOOPCODER64
    edge: dict | None = None  # proofs.decoders.edges.EdgeSpec kwargs: a boundary mutant (greedy at depth)
    cls: type | None = None  # a SpecRef subclass the specref kwargs build (None: SpecRef)
    batch: bool = False  # a generate_batch decoder: also decoded beside others (seed invariance)

    def __post_init__(self):
        if not MUTANT_ID.fullmatch(self.id):
            raise LoopcertError(f"a mutant id is lowercase words joined by hyphens, got {self.id!r}")
        if self.control != self.id.startswith("control-"):
            raise LoopcertError(
                f"mutant {self.id!r}: a control's id, and only a control's, starts 'control-'"
            )

    def build(self, oracle: Oracle):
        if self.edge is not None:  # float32, as an engine computes: ties within float32's tolerance
            return EdgeSpec(copy.deepcopy(oracle.model).float(), **self.edge)
        if self.fastdec is not None:
            from fastdec import Decoder

            return Decoder(oracle.model, **self.fastdec)
        return (self.cls or SpecRef)(oracle, **self.specref)


LIBRARY = (
    Mutant(
        "always-accept",
        "the first proposal is always accepted",
        "u = 0: the first proposal is accepted whenever p_R(x1) > 0",
        {"d1": 1, "bugs": Bugs(always_accept=True)},
        case="top-p=0.5",
    ),
    Mutant(
        "resample-target",
        "a rejection resamples from the target",
        "after a rejection the token is drawn from p_R, not p_R (-) q1",
        {"d1": 3, "bugs": Bugs(resample_target=True)},
        case="top-p=0.5",
    ),
    Mutant(
        "target-no-temperature",
        "the target lacks the temperature",
        "temperature applied to the draft but not to p_R",
        {"d1": 1, "bugs": Bugs(target_missing="temperature")},
        case="T=0.5",
    ),
    Mutant(
        "target-no-top-k",
        "the target lacks top-k",
        "top-k applied to the draft but not to p_R",
        {"d1": 1, "bugs": Bugs(target_missing="top_k")},
        case="top-k=2",
    ),
    Mutant(
        "target-no-top-p",
        "the target lacks top-p",
        "top-p applied to the draft but not to p_R",
        {"d1": 1, "bugs": Bugs(target_missing="top_p")},
        case="top-p=0.5",
    ),
    Mutant(
        "scored-other-depth",
        "the draft is scored at another depth",
        "x1 drawn from p_2 but scored (ratio and residual) with p_3",
        {"d1": 2, "bugs": Bugs(score_depth=3)},
        case="top-k=2",
    ),
    Mutant(
        "second-wrong-base",
        "the second proposal is scored against the wrong law",
        "x2 drawn from p_d2 (-) p_d1 but scored with p_d2",
        {"d1": 1, "d2": 2, "gate": "on", "bugs": Bugs(second_scored_as_p_d2=True)},
        case="top-p=0.5",
    ),
    Mutant(
        "unnormalised-residual",
        "the residual is not normalised",
        "x2's ratio uses [p_R - q1]_+ without normalising it",
        {"d1": 2, "d2": 3, "gate": "off", "bugs": Bugs(unnormalised_residual=True)},
        case="T=0.5",
    ),
    Mutant(
        "stale-kv",
        "a rejected token stays in the context",
        "after rejecting x1 the context keeps x1 (stale KV after rollback)",
        {"d1": 1, "bugs": Bugs(stale_kv=True)},
        case="top-k=2",
    ),
    Mutant(
        "greedy-near-miss",
        "greedy accepts a near miss",
        "greedy accepts x1 whose p_R logit is within 0.25 of the max",
        {"d1": 1, "bugs": Bugs(greedy_near_miss=0.25)},
        case=None,
    ),
    # -- from serving stacks' speculative samplers ----------------------------------------------
    Mutant(
        "draft-int8-scored-exact",
        "draft int8, scored exact",
        "x1 drawn from the int8-quantised q1 (scale max p / 127), scored with the exact q1",
        {"d1": 1, "bugs": Bugs(draft_rounding="int8")},
        case="T=0.5",
    ),
    Mutant(
        "reported-q-not-sampled-q",
        "reported q is not the sampled q",
        "x1 drawn from the top-k filtered q1, scored with q1 before top-k",
        {"d1": 1, "bugs": Bugs(scored_unfiltered=True)},
        case="top-k=2",
    ),
    Mutant(
        "accept-iff-equals-target-sample",
        "accept iff equal to a target sample",
        "x1 accepted iff it equals an independent y ~ p_R; residual on rejection",
        {"d1": 1, "bugs": Bugs(accept_if_equal=True)},
        case="T=0.5",
    ),
    Mutant(
        "first-draft-unverified",
        "first draft unverified",
        "rounds of 4 tokens; the first drafted token of each round is committed without verification",
        {"d1": 3, "bugs": Bugs(first_unverified=4)},
        case="T=0.5",
    ),
    Mutant(
        "rejected-lane-left-in-place",
        "rejected lane left in place",
        "after x2 is rejected the context keeps x2 (its lane's state not rolled back)",
        {"d1": 1, "d2": 3, "bugs": Bugs(stale_second=True)},
        case="T=0.5",
    ),
    Mutant(
        "target-top-k-default",
        "target top-k default",
        "p_R carries top_k=50 the user never asked for (transformers' generate() default)",
        {"d1": 1, "bugs": Bugs(target_top_k_default=50)},
        case="T=1.5 n=2",
        model=WIDE,
    ),
    # -- the recovery draw, the acceptance test and the engines' other parameters -------------------
    Mutant(
        "residual-rejecting-uniform",
        "the residual is drawn with the rejecting uniform",
        "after rejecting x1 on u >= p_R/q1, the residual token is the inverse CDF at that same u "
        "(vLLM Model Runner V2's one stream for draft, acceptance and recovery, PR #47386)",
        {"d1": 1, "bugs": Bugs(residual_same_uniform=True)},
        case="T=0.5",
    ),
    Mutant(
        "recovery-draft-noise",
        "the recovery token reuses the draft's noise",
        "after a rejection the residual token is drawn with the uniform x1 was drawn with (a Gumbel "
        "trick's noise reused)",
        {"d1": 1, "bugs": Bugs(recovery_draft_noise=True)},
        case="T=0.5",
    ),
    Mutant(
        "coarse-uniform-accept",
        "acceptance on u <= p/q with a coarse u",
        "accept iff u <= p_R/q1 with u on a grid of 8 steps, so u = 0 accepts a token of target "
        "probability 0 (sglang #35771)",
        {"d1": 1, "draft_filter": False, "bugs": Bugs(coarse_uniform=8)},
        case="top-k=2",
    ),
    Mutant(
        "penalty-state-per-step",
        "penalty and min_tokens state updated once per step",
        "rounds of 3 tokens: penalties and min_tokens count the output up to the round's start, "
        "not the tokens accepted before the position (sglang PR #33643)",
        {"d1": 1, "bugs": Bugs(stale_penalty=3)},
        case="penalties",
    ),
    Mutant(
        "min-p-draft-only",
        "min_p on the draft (the bonus token) only",
        "min_p applied to the draft but not to the law acceptance and recovery use (vllm #42744)",
        {"d1": 1, "bugs": Bugs(target_missing="min_p")},
        case="min-p=0.3",
    ),
    Mutant(
        "logit-bias-draft-only",
        "logit bias on the draft (the bonus token) only",
        "logit_bias applied to the draft but not to the verify side (vllm #42744)",
        {"d1": 1, "bugs": Bugs(target_missing="logit_bias")},
        case="bias 4 +1",
    ),
    Mutant(
        "penalties-draft-only",
        "penalties on the draft only",
        "repetition / frequency / presence penalties dropped on the verify side (vllm #18902)",
        {"d1": 1, "bugs": Bugs(target_missing="penalties")},
        case="penalties",
    ),
    Mutant(
        "verify-other-filter-order",
        "the verify side composes top-k and top-p otherwise",
        "p_R's top-k and top-p both judged on the tempered law, the draft's top-p on the top-k law "
        "renormalised (sglang PR #36173: the two sides disagree)",
        {"d1": 1, "bugs": Bugs(verify_joint_filters=True)},
        case="T=1.5 top-k=4 top-p=0.6",
    ),
    Mutant(
        "tokens-after-stop",
        "tokens after a stop committed",
        "a stop token accepted inside a block does not end the sequence (transformers #47912, sglang #31599)",
        {"d1": 1, "bugs": Bugs(commit_past_stop=True)},
        case="stop 3 min-tokens=1",
    ),
    Mutant(
        "argmax-recovery",
        "the argmax committed at T > 0",
        "after a rejection the argmax of the residual is committed instead of a draw from it",
        {"d1": 1, "bugs": Bugs(argmax_recovery=True)},
        case="T=0.5",
    ),
    # -- the field's newer classes, each on the model where it lives --------------------------------
    Mutant(
        "ratio-on-input-token",
        "the acceptance ratio read at the wrong token",
        "x1 accepted iff u < p_R(c)/q1(c) with c the context's last token: the verify row's input "
        "id gathered instead of its output id (the acceptance ratio on the wrong token)",
        {"d1": 1, "bugs": Bugs(ratio_previous_token=True)},
        case="T=0.5",
    ),
    Mutant(
        "rejection-handled-one-step-late",
        "a rejected draft dropped one step late",
        "after x1 is rejected the token committed in its place is the target's draw after x1, "
        "p_R(. | ctx + x1), not the residual's (openvino.genai #4190)",
        {"d1": 1, "bugs": Bugs(late_rejection=True)},
        case="top-k=2",
    ),
    Mutant(
        "penalty-counts-rejected-drafts",
        "the penalty state keeps rejected drafts",
        "after x1 is rejected, the repetition / frequency / presence penalties of every later "
        "position count x1 as well as the token emitted (sampler state not rolled back with the "
        "draft: llama.cpp's per-sequence penalty ring under speculative checkpoints)",
        {"d1": 1, "rolled_back": False},
        case="T=0.5 penalties",
        cls=PenaltyRollback,
    ),
    Mutant(
        "one-stream-for-the-batch",
        "one random stream shared by the rows of a batch",
        "generate_batch draws every row from torch.Generator(seeds[0]), row after row at each "
        "step: each row's law is right, its tokens depend on its neighbours (TensorRT-LLM #19487)",
        {"d1": 1, "shared": True},
        cls=BatchStreams,
        batch=True,
    ),
    Mutant(
        "fastdec-adaptive-verify",
        "fastdec adaptive-verify",
        "lossy by design: verifies at depth 2 < R, escalates on disagreement",
        fastdec={"strategy": "adaptive-verify", "draft_depth": 1, "rewind_depth": 2},
        case="top-k=2",
    ),
    # -- at boundaries: greedy at depth on a LoopCoder of the published window 64 -----------------
    Mutant(
        "window-cache-untrimmable",
        "a rotating window cache that cannot be trimmed once it wrapped",
        "past the window (64), a rejected draft stays in the context (mlx-lm 0.32.2's RotatingKVCache)",
        edge={"bugs": EdgeBugs(window_untrimmable=True)},
        model=LOOPCODER64,
    ),
    Mutant(
        "positions-not-rewound-at-block-edge",
        "position ids not rewound after a rejection that crossed a block edge",
        "after a rejection whose drafts crossed a multiple of the KV block (16), positions run on",
        edge={"bugs": EdgeBugs(block=16)},
        model=LOOPCODER64,
    ),
    Mutant(
        "k-plus-1-prompt-as-verify",
        "a prompt of exactly k+1 tokens routed as a verify step",
        "a prompt of k+1 = 4 tokens: the first token is the verify row of the wrong position (vLLM #53051)",
        edge={"bugs": EdgeBugs(k1_prompt_verify=True)},
        model=LOOPCODER64,
    ),
    Mutant(
        "page-edge-off-by-one",
        "an off-by-one at a cache page edge",
        "the last slot of each 128-slot cache page is written one slot late",
        edge={"bugs": EdgeBugs(page=128)},
        model=LOOPCODER64,
    ),
    Mutant(
        "lossy-past-undeclared-position",
        "lossy only past a position nobody declared",
        "past position 200 (declared by no one) drafts are committed unverified",
        edge={"bugs": EdgeBugs(lossy_after=200)},
        model=LOOPCODER64,
    ),
    Mutant(
        "window-trimmed-per-token",
        "a window cache trimmed as if one token came per call",
        "the loop window's cache keeps W - 1 = 63 keys before each call, so row j of a 4-row verify "
        "sees 64 + j keys of its pass (mlx-lm #1914, transformers PR #48280)",
        edge={"bugs": EdgeBugs(window_per_call=True)},
        model=LOOPCODER64,
    ),
    # -- controls: lossless, must pass ------------------------------------------------------------
    Mutant(
        "control-gate-inverted",
        "control: gate inverted",
        "second proposal exactly when LoopSpec's gate is closed",
        {"d1": 1, "d2": 2, "gate": "inverted"},
        control=True,
    ),
    Mutant(
        "control-gate-off",
        "control: gate off",
        "second proposal whenever q2 has mass",
        {"d1": 1, "d2": 3, "gate": "off"},
        control=True,
    ),
    Mutant(
        "control-unfiltered-draft",
        "control: unfiltered draft",
        "draft without top-k / top-p, scored with that same law",
        {"d1": 1, "draft_filter": False},
        control=True,
    ),
    Mutant(
        "control-other-depths",
        "control: other depths",
        "d1 = 3 = R - 1, no second proposal",
        {"d1": 3},
        control=True,
    ),
    Mutant(
        "control-edge-spec",
        "control: the boundary mutants' decoder without a bug",
        "greedy speculation of 3 drafts at depth 1 over refdec, context and positions rolled back "
        "exactly; each verify row masked to its own window of 64 keys (window-trimmed-per-token's twin)",
        edge={"row_windows": True},
        model=LOOPCODER64,
        control=True,
    ),
    Mutant(
        "control-penalty-state-rolled-back",
        "control: penalty-counts-rejected-drafts' decoder with its state rolled back",
        "penalties count the emitted tokens only, the draft and the target both under them",
        {"d1": 1, "rolled_back": True},
        case="T=0.5 penalties",
        cls=PenaltyRollback,
        control=True,
    ),
    Mutant(
        "control-one-stream-per-row",
        "control: one-stream-for-the-batch's decoder with a stream per row",
        "generate_batch draws row i from torch.Generator(seeds[i]), rows stepped together",
        {"d1": 1},
        cls=BatchStreams,
        batch=True,
        control=True,
    ),
)


def loopcoder64() -> refdec.LoopedLM:
    """tiny-loopcoder at the published loop window 64 (max_seq_len 512: room for two windows past
    the quick plan's horizon), random weights (seed 0), float64."""
    cfg = refdec.get_preset("tiny-loopcoder").replace(loop_window_size=64, max_seq_len=512, name=LOOPCODER64)
    return refdec.LoopedLM(cfg).init_weights(0).to(torch.float64).eval()


def wide_model() -> refdec.LoopedLM:
    """tiny-ouro's architecture at a 61-token vocabulary (random weights, seed 0), float64."""
    cfg = replace(refdec.get_preset(MODEL), vocab_size=61, name=WIDE)
    return refdec.LoopedLM(cfg).init_weights(0).to(torch.float64).eval()


def exact_shift(decoder, law: CaseLaw) -> dict:
    """TV between the mutant's exact law (enumerated) and refdec's: whole sequences, and per view."""
    if not isinstance(decoder, SpecRef):
        return {"tv": None, "view_tv": {}, "how": "black box: not enumerable"}
    c = law.case
    mine = decoder.sequence_law(c.prompt, c.n, c.sampling)
    ref = SpecRef(decoder.oracle, d1=decoder.oracle.R).sequence_law(c.prompt, c.n, c.sampling)  # = p_R
    tv = 0.5 * sum(abs(mine.get(s, 0.0) - ref.get(s, 0.0)) for s in set(mine) | set(ref))
    return {"tv": tv, "view_tv": {v.name: v.binned_tv(mine) for v in law.views}, "how": "enumerated"}


def _rejects(dist: CheckResult | None) -> bool:
    """The sampling check rejected the law (Holm, an impossible sample, a decoder error or a request
    that raised), as opposed to failing for want of power."""
    return dist is not None and any(
        v.holm_rejected or c.impossible or c.error or c.raised for c in dist.details.cases for v in c.views
    )


def sampler_for(dec) -> object:
    """Enumerable entries are sampled from their exact law; fastdec through itself."""
    if isinstance(dec, SpecRef):
        return LawSampler(lambda p, n, s: dec.sequence_law(p, n, s))
    return dec


class MutantRun:
    """The models, oracles and exact laws the mutants share (built lazily, once), and one
    mutant at a time: `row(m)` is one work unit of certify (`mutant/<id>`), `result(rows)`
    assembles the check from the rows in library order (any shard's)."""

    def __init__(
        self,
        target: Target,
        base_seed: int,
        model=None,
        progress: Progress | None = None,
        blackbox_samples: int = 300,
        require_all: bool = False,
        depth: tuple[int, int] = (256, 1024),
    ):
        self.depth = depth  # the plan's depth_context, depth_cap (the boundary mutants' horizon)
        self.target, self.base_seed, self.progress = target, base_seed, progress
        self.blackbox_samples, self.require_all = blackbox_samples, require_all
        self.models = {MODEL: refdec.load_model(MODEL, dtype=torch.float64) if model is None else model}
        self.oracles: dict[str, Oracle] = {}
        self.laws: dict[tuple[str, str], CaseLaw] = {}
        self.references: dict = {}
        self.cases = {c.name: c for c in CASES}

    def oracle_of(self, model_name: str) -> Oracle:
        if model_name not in self.oracles:
            if model_name not in self.models:
                self.models[model_name] = loopcoder64() if model_name == LOOPCODER64 else wide_model()
            self.oracles[model_name] = Oracle(self.models[model_name])
        return self.oracles[model_name]

    def law_of(self, model_name: str, case_name: str) -> CaseLaw:
        self.oracle_of(model_name)
        if (model_name, case_name) not in self.laws:
            self.laws[model_name, case_name] = case_law(self.oracles[model_name], self.cases[case_name])
        return self.laws[model_name, case_name]

    def row(self, m: Mutant) -> dict:
        """Run one mutant: greedy, then sampling on its cases. -> the raw result of the work unit
        `mutant/<id>` (plain data, it crosses processes and shards): its MutantRow's fields and,
        under "laws", the exact laws its cases were tested on (merged across rows by `result`)."""
        t0 = time.perf_counter()
        if m.edge is not None:
            return self.edge_row(m, t0)
        self.law_of(m.model, "T=0.5" if m.case is None else m.case)
        oracle = self.oracles[m.model]
        dec = m.build(oracle)
        greedy = check_greedy(
            f"greedy[{m.id}]",
            [(oracle.cfg.name, m.id, dec, oracle, torch.float64)],
            lambda _o: GREEDY_PROMPTS,
            GREEDY_TOKENS,
            references=self.references,
        )
        seeds = None
        if m.batch:
            seeds = check_seed_invariance(
                f"seed_invariance[{m.id}]",
                dec,
                m.id,
                PROMPT,
                GREEDY_PROMPTS[1:5],
                BATCH_TOKENS,
                BATCH_SAMPLING,
                BATCH_SEEDS,
            )
        names = (
            ["T=0.5", "top-k=2", "top-p=0.5"]
            if m.case is None and m.control
            else ([m.case] if m.case else [])
        )
        dist, shifts = None, []
        if names:
            case_laws = [self.law_of(m.model, c) for c in names]
            fixed = None if m.fastdec is None else [self.blackbox_samples] * len(names)
            dist = check_distribution(
                f"sampling[{m.id}]", sampler_for(dec), case_laws, self.target, self.base_seed, samples=fixed
            )
            shifts = [exact_shift(dec, cl) for cl in case_laws]
        rejected_by = (
            (["greedy"] if not greedy.passed else [])
            + (["seed_invariance"] if seeds is not None and not seeds.passed else [])
            + (["sampling"] if _rejects(dist) else [])
        )
        killed = bool(rejected_by)
        tvs = [s["tv"] for s in shifts if s["tv"] is not None]
        cases = () if dist is None else dist.details.cases
        views = [v for c in cases for v in c.views]
        seen = [
            (s["view_tv"].get(v.view), v.detectable_tv)
            for s, c in zip(shifts, cases, strict=False)
            for v in c.views
        ]
        margin = max((t / d for t, d in seen if t is not None and d and math.isfinite(d)), default=None)
        promised = bool(names) and margin is not None and margin >= 1.0
        if m.control:
            ok = not killed and all(t <= CONTROL_TV_TOL for t in tvs)
        elif m.case is None or m.fastdec is not None:
            ok = killed  # greedy-only and black-box entries: no TV to weigh, must die
        else:
            ok = killed or (not promised and not self.require_all)
        row = MutantRow(
            id=m.id,
            bug=m.bug,
            control=m.control,
            model=oracle.cfg.name,
            settings=_settings(m),
            cases=tuple(names),
            rejected_by=tuple(rejected_by),
            rejected=killed,
            ok=ok,
            promised=promised if not m.control else None,
            power_margin=margin,
            greedy_real_bugs=greedy.details.real_bugs,
            greedy_divergences=len(greedy.details.divergences),
            p_value=None if dist is None else dist.measured,
            alpha_case=None if dist is None else dist.bound,
            tv=max(tvs) if tvs else None,
            binned_tv=max((t for s in shifts for t in s["view_tv"].values()), default=None),
            empirical_binned_tv=max(
                (v.empirical_tv for v in views if v.empirical_tv is not None), default=None
            ),
            detectable_tv=None if dist is None else dist.details.detectable_tv,
            n_samples=max((c.samples for c in cases), default=0),
            seconds=time.perf_counter() - t0,
        )
        laws = {
            f"{c} on {oracle.cfg.name}": self.law_of(m.model, c).describe()
            for c in ["T=0.5" if m.case is None else m.case, *names]
        }
        if self.progress:
            verdict = ("rejected by " + " + ".join(rejected_by)) if killed else "not rejected"
            self.progress(f"  mutation {m.id}: {verdict} ({'ok' if row.ok else 'WRONG'})")
        return {**row.to_plain(), "laws": laws}

    def edge_row(self, m: Mutant, t0: float) -> dict:
        """A boundary mutant: the plan's greedy-at-depth check (proofs/checks/depth.py) at the
        boundaries the mutant declares, on LOOPCODER64; it must die there (a control must not)."""
        oracle = self.oracle_of(m.model)
        dec = m.build(oracle)
        cfg = oracle.cfg
        h = horizon_for(collect_boundaries(cfg, dec, 2), *self.depth, cfg.max_seq_len)
        bounds = collect_boundaries(cfg, dec, h)
        places = placements(bounds, h, cfg.max_seq_len)
        depth = check_depth(
            f"greedy_depth[{m.id}]",
            cfg.name,
            [(m.id, dec, torch.float32)],
            oracle,
            lambda n: long_prompt(oracle.model, cfg.name, n),
            places,
            bounds,
            h,
            cache=self.references,
            until_bug=True,
        )
        killed = not depth.passed
        first = next((d for d in depth.details.divergences if d.classified == "real bug"), None)
        row = MutantRow(
            id=m.id,
            bug=m.bug + (f"; first found at position {first.position} ({first.near})" if first else ""),
            control=m.control,
            model=cfg.name,
            settings="edges " + ", ".join(f"{k}={v}" for k, v in _edge_settings(dec).items() if v),
            cases=(),
            rejected_by=("greedy_depth",) if killed else (),
            rejected=killed,
            ok=killed != m.control,
            promised=None,
            power_margin=None,
            greedy_real_bugs=depth.details.real_bugs,
            greedy_divergences=len(depth.details.divergences),
            p_value=None,
            alpha_case=None,
            tv=None,
            binned_tv=None,
            empirical_binned_tv=None,
            detectable_tv=None,
            n_samples=0,
            seconds=time.perf_counter() - t0,
        )
        if self.progress:
            verdict = "rejected by greedy_depth" if killed else "not rejected"
            self.progress(f"  mutation {m.id}: {verdict} ({'ok' if row.ok else 'WRONG'})")
        return {**row.to_plain(), "laws": {}}

    def result(self, raws: Sequence[dict]) -> CheckResult:
        """The check from every mutant's raw row (`row`'s, in library order, any shard's)."""
        target, laws, rows = self.target, {}, []
        for raw in raws:
            raw = dict(raw)
            laws.update(raw.pop("laws", {}))
            rows.append(MutantRow.from_plain(raw, f"mutant {raw.get('id')!r}"))
        bad = [r.id for r in rows if not r.ok]
        details = MutationDetails(
            model=MODEL,
            why_this_model=WHY_MODEL,
            rows=tuple(rows),
            survivors=sum(1 for r in rows if not r.control and not r.rejected),
            below_power=tuple(r.id for r in rows if not r.control and not r.rejected and r.ok),
            controls_flagged=sum(1 for r in rows if r.control and not r.ok),
            target_tv=target.tv,
            power_level=target.power,
            require_all=self.require_all,
            n_samples=max((r.n_samples for r in rows), default=0),
            alpha=target.alpha,
            seeds=f"{self.base_seed} + i for sample i of each case",
            greedy_prompts=GREEDY_PROMPTS,
            greedy_tokens=GREEDY_TOKENS,
            cases=tuple(case_spec(c) for c in CASES),
            laws=laws,
            wrong=tuple(bad),
        )
        return CheckResult("mutation", len(bad), 0, not bad, details)


def check_mutants(
    target: Target,
    base_seed: int,
    library: Sequence[Mutant] = LIBRARY,
    model=None,
    progress: Progress | None = None,
    blackbox_samples: int = 300,
    require_all: bool = False,
) -> CheckResult:
    """measured = mutants that had to die and survived + flagged controls; bound 0.

    N per case is planned from `target` like any candidate's; the fastdec entries, which cost far
    more per sample and sit far off the law, take `blackbox_samples`. `require_all`: every mutant
    must die (the full plan), not only those some view has the power to see."""
    run = MutantRun(target, base_seed, model, progress, blackbox_samples, require_all)
    return run.result([run.row(m) for m in library])


def _edge_settings(dec: EdgeSpec) -> dict:
    return {**vars(dec.bugs), "row_windows": dec.row_windows}


def _settings(m: Mutant) -> str:
    if m.fastdec is not None:
        return "fastdec " + ", ".join(f"{k}={v}" for k, v in m.fastdec.items())
    parts = [f"{k}={v}" for k, v in m.specref.items() if k != "bugs"]
    bugs = m.specref.get("bugs")
    if bugs is not None and not bugs.lossless:
        parts += [f"{k}={v}" for k, v in vars(bugs).items() if v not in (None, False, 0.0)]
    return ("specref " if m.cls is None else f"{m.cls.__name__} ") + ", ".join(parts)
