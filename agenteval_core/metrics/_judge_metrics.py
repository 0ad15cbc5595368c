"""The LLM-judge metrics of seeds 000, 002 and 003.

Each metric's stages, output schemas and scoring guides follow its seed; the score is always
composed in code from the judge's structured answers. Facts the trace already records
exactly (the tool calls made, the tools available, the user input) are read from it rather
than asked of the judge.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from ..schema._trace import EvalCase, ToolCall, text_of
from ._judge_base import JudgeMetric, Prompt, _Accounting, describe_trace
from ._protocol import Score
from ._registry import register_metric

__all__ = [
    "AgentMemory",
    "AnswerCorrectness",
    "ArgumentCorrectness",
    "Confidence",
    "PlanAdherence",
    "PlanQuality",
    "StepEfficiency",
    "StepFaithfulness",
    "TaskCompletion",
    "ToolArgumentAccuracy",
    "ToolCallNecessity",
    "ToolCorrectness",
    "TrajectoryEfficiency",
    "TrajectoryJudge",
]

MAX_JUDGED = 8
"""multivon-eval judges at most 8 calls or steps per trace, to bound cost."""

Unit = Field(ge=0.0, le=1.0)
YesNoValue = Literal["yes", "no"]


# --- output schemas (field names as the seeds give them) -----------------------------------


class TaskAndOutcome(BaseModel):
    task: str
    outcome: str


class VerdictScore(BaseModel):
    verdict: float = Unit
    reason: str


class ScoreReason(BaseModel):
    score: float = Unit
    reason: str


class PlanSteps(BaseModel):
    plan: list[str]


class YesNo(BaseModel):
    verdict: YesNoValue
    reason: str | None = None


class Verdicts(BaseModel):
    verdicts: list[YesNo]


class ReasonOnly(BaseModel):
    reason: str


class EfficiencyAnswers(BaseModel):
    no_unnecessary_detours: YesNoValue
    proportionate_step_count: YesNoValue
    no_repeated_steps: YesNoValue
    reason: str


class MemoryAnswers(BaseModel):
    uses_prior_context_correctly: YesNoValue
    avoids_hallucinated_context: YesNoValue
    ignores_stale_information: YesNoValue
    includes_expected_output: Literal["yes", "no", "n/a"]
    reason: str


SCORE_GUIDE = (
    "Score from 0 to 1: 1.0 perfect; 0.75-0.99 mostly right, minor gaps; 0.5-0.74 partial; "
    "0.25-0.49 significant problems; 0-0.24 not meaningfully achieved."
)

EXTRACT_TASK = Prompt(
    "extract_task_outcome",
    "From this agent run, state the user's task and a strictly factual description of what "
    "the agent did and produced. Use no evaluative words such as 'successfully'. "
    'Reply as {"task": "...", "outcome": "..."}.',
    shared=True,
)
"""Task completion's extraction, shared: step efficiency and the plan metrics read the task
from the same answer, so the task is asked once per trace."""

EXTRACT_PLAN = Prompt(
    "extract_plan",
    "List the plan the agent stated or clearly implied in its reasoning, one step per item. "
    "Include only steps supported by the run's text; do not invent any. If there is no plan, "
    'reply with an empty list. Reply as {"plan": ["...", ...]}.',
    shared=True,
)


def _calls_for_judge(calls: list[ToolCall]) -> list[dict[str, Any]]:
    return [{"name": c.name, "parameters": c.arguments} for c in calls]


def _fraction_yes(verdicts: list[YesNo]) -> float:
    return sum(v.verdict == "yes" for v in verdicts) / len(verdicts)


# --- PandaProbe, threshold 0.5 ------------------------------------------------------


@register_metric
class TaskCompletion(JudgeMetric):
    """Whether the agent accomplished the user's task (extract task and outcome, then score)."""

    name = "task_completion"
    reads_end: ClassVar[bool] = True
    prompts = (
        EXTRACT_TASK,
        Prompt(
            "score",
            "Compare the task with the outcome and judge how fully the task was accomplished. "
            f'{SCORE_GUIDE} Reply as {{"verdict": <0-1>, "reason": "..."}}.',
        ),
    )

    async def evaluate(self, case: EvalCase, accounting: _Accounting) -> Score:
        extracted = await self.ask(
            accounting, self.prompts[0], TaskAndOutcome, run=describe_trace(case)
        )
        judged = await self.ask(
            accounting,
            self.prompts[1],
            VerdictScore,
            task=extracted.task,
            outcome=extracted.outcome,
        )
        return Score(
            judged.verdict, judged.reason, {"task": extracted.task, "outcome": extracted.outcome}
        )


@register_metric
class ToolCorrectness(JudgeMetric):
    """Whether the agent chose the right tools: correct, over-, under- and mis-selection."""

    name = "tool_correctness"
    reads_steps: ClassVar[bool] = True
    prompts = (
        Prompt(
            "score",
            "Judge the agent's tool selection for the user's goal: were the tools used appropriate "
            "and sufficient (correct selection), were unnecessary or redundant tools called "
            "(over-selection), were useful available tools ignored (under-selection), were wrong "
            f'tools chosen (mis-selection)? {SCORE_GUIDE} Reply as {{"score": <0-1>, "reason": "..."}}.',
        ),
    )

    async def evaluate(self, case: EvalCase, accounting: _Accounting) -> Score:
        trace_tools = case.trace.tools if case.trace is not None else []
        metadata: dict[str, Any] = {
            "user_input": text_of(case.input),
            "tools_called": _calls_for_judge(case.tool_calls),
            "available_tools": [
                {"name": t.name, "description": t.description} for t in trace_tools
            ],
        }
        judged = await self.ask(accounting, self.prompts[0], ScoreReason, **metadata)
        return Score(judged.score, judged.reason, metadata)


@register_metric
class ArgumentCorrectness(JudgeMetric):
    """Whether each tool call's arguments were right for the task: correct calls / all calls."""

    name = "argument_correctness"
    reads_steps: ClassVar[bool] = True
    prompts = (
        Prompt(
            "verdicts",
            "For each tool call, in order, say whether its arguments correctly address the user's "
            "task. Give exactly one verdict per call, with a reason when the verdict is 'no'. "
            'Reply as {"verdicts": [{"verdict": "yes"|"no", "reason": "..."|null}, ...]}.',
        ),
        Prompt(
            "reason",
            "Explain the score in one or two sentences, using the reasons given for the "
            'incorrect calls. Reply as {"reason": "..."}.',
        ),
    )

    async def evaluate(self, case: EvalCase, accounting: _Accounting) -> Score:
        calls = case.tool_calls
        if not calls:
            return Score(
                1.0,
                "no tool calls: nothing to evaluate",
                {"user_input": text_of(case.input), "verdicts": []},
            )

        def one_per_call(answer: Verdicts) -> str | None:
            if len(answer.verdicts) == len(calls):
                return None
            return (
                f"give exactly {len(calls)} verdicts, one per tool call in order "
                f"(got {len(answer.verdicts)})"
            )

        judged = await self.ask(
            accounting,
            self.prompts[0],
            Verdicts,
            check=one_per_call,
            user_input=case.input,
            tool_calls=[
                {**c, "reasoning": s.thought}
                for s in case.steps
                for c in _calls_for_judge(s.tool_calls)
            ],
        )
        value = _fraction_yes(judged.verdicts)
        wrong = [v.reason for v in judged.verdicts if v.verdict == "no"]
        explained = await self.ask(
            accounting, self.prompts[1], ReasonOnly, score=round(value, 4), incorrect_reasons=wrong
        )
        metadata = {
            "user_input": text_of(case.input),
            "verdicts": [v.model_dump() for v in judged.verdicts],
        }
        return Score(value, explained.reason, metadata)


@register_metric
class StepEfficiency(JudgeMetric):
    """How directly the agent executed the task, penalising redundant or speculative steps."""

    name = "step_efficiency"
    reads_steps: ClassVar[bool] = True
    prompts = (
        EXTRACT_TASK,
        Prompt(
            "score",
            "Score how efficiently the agent executed the task: penalise redundant or duplicate "
            "tool calls, unnecessary intermediate steps, speculative work and verbose reasoning "
            f'that adds nothing. {SCORE_GUIDE} Reply as {{"score": <0-1>, "reason": "..."}}.',
        ),
    )

    async def evaluate(self, case: EvalCase, accounting: _Accounting) -> Score:
        run = describe_trace(case)
        task = await self.ask(accounting, self.prompts[0], TaskAndOutcome, run=run)
        judged = await self.ask(accounting, self.prompts[1], ScoreReason, task=task.task, run=run)
        return Score(judged.score, judged.reason, {"task": task.task})


@register_metric
class Confidence(JudgeMetric):
    """Whether the agent acted decisively and appropriately (a session signal)."""

    name = "confidence"
    prompts = (
        Prompt(
            "score",
            "Judge the agent's confidence across the run: decisiveness (no unnecessary hesitation "
            "or contradictory steps), appropriateness (actions relevant to the goal), consistency "
            "(a coherent strategy), and signs of low confidence (hedging, contradictions, "
            "unnecessary retries, vague outputs, repeated tool calls with identical parameters, "
            "abandoned strategies). 1.0 fully confident and decisive; 0.75 minor hesitation; 0.5 "
            "noticeable indecision; 0.25 significant uncertainty; 0.0 contradictory. "
            'Reply as {"score": <0-1>, "reason": "..."}.',
        ),
    )

    async def evaluate(self, case: EvalCase, accounting: _Accounting) -> Score:
        judged = await self.ask(accounting, self.prompts[0], ScoreReason, run=describe_trace(case))
        return Score(judged.score, judged.reason, {})


class _PlanMetric(JudgeMetric):
    """Task → plan → score; a run without a plan scores 1.0 (nothing to deviate from)."""

    reads_steps: ClassVar[bool] = True

    async def evaluate(self, case: EvalCase, accounting: _Accounting) -> Score:
        run = describe_trace(case)
        task = await self.ask(accounting, self.prompts[0], TaskAndOutcome, run=run)
        plan = await self.ask(accounting, self.prompts[1], PlanSteps, run=run)
        metadata: dict[str, Any] = {"task": task.task, "plan": plan.plan}
        if not plan.plan:
            return Score(1.0, "no plan found in the run", metadata)
        judged = await self.ask(
            accounting, self.prompts[2], ScoreReason, task=task.task, plan=plan.plan, run=run
        )
        return Score(judged.score, judged.reason, metadata)


@register_metric
class PlanAdherence(_PlanMetric):
    """How closely execution followed the agent's own plan (order, completeness, extras)."""

    name = "plan_adherence"
    prompts = (
        EXTRACT_TASK,
        EXTRACT_PLAN,
        Prompt(
            "score",
            "Score how strictly the execution followed the plan: were all planned steps executed, "
            "in the intended order, without extraneous actions or skipped steps? 1.0 matches "
            "exactly; 0.75 nearly all steps in order; 0.5 partial, some skipped or reordered; "
            '0.25 weak; 0.0 unrelated. Reply as {"score": <0-1>, "reason": "..."}.',
        ),
    )


@register_metric
class PlanQuality(_PlanMetric):
    """The intrinsic quality of the agent's plan: complete, coherent, optimal, aligned."""

    name = "plan_quality"
    prompts = (
        EXTRACT_TASK,
        EXTRACT_PLAN,
        Prompt(
            "score",
            "Score the plan itself, whether or not it was followed: completeness, logical "
            "coherence, optimality, level of detail, alignment with the task. 1.0 excellent; "
            "0.75 good, minor flaws; 0.5 adequate but flawed; 0.25 weak; 0.0 inadequate. "
            'Reply as {"score": <0-1>, "reason": "..."}.',
        ),
    )


# --- multivon-eval, threshold 0.7 --------------------------------------------------------


class _PerItemMetric(JudgeMetric):
    """One yes/no judgement per item (at most 8, concurrently); score = share of 'yes'."""

    reads_steps: ClassVar[bool] = True

    default_threshold: ClassVar[float] = 0.7
    empty_reason: ClassVar[str] = ""

    def items(self, case: EvalCase) -> list[dict[str, Any]]:
        """What is judged yes or no, one entry each (the fields its prompt is given);
        empty: nothing to judge."""
        raise NotImplementedError

    async def evaluate(self, case: EvalCase, accounting: _Accounting) -> Score:
        items = self.items(case)
        if not items:
            return Score(1.0, self.empty_reason, {"judged": 0, "total": 0, "verdicts": []})
        judged_items = items[:MAX_JUDGED]
        verdicts = await asyncio.gather(
            *(self.ask(accounting, self.prompts[0], YesNo, **item) for item in judged_items)
        )
        value = _fraction_yes(list(verdicts))
        metadata = {
            "judged": len(judged_items),
            "total": len(items),
            "verdicts": [v.model_dump() for v in verdicts],
        }
        yes = sum(v.verdict == "yes" for v in verdicts)
        return Score(value, f"{yes} of {len(judged_items)} judged {self.unit} passed", metadata)

    unit: ClassVar[str] = "items"


@register_metric
class ToolArgumentAccuracy(_PerItemMetric):
    """Whether each tool call's arguments were appropriate and well-formed (up to 8 calls)."""

    name = "tool_argument_accuracy"
    unit = "tool calls"
    empty_reason = "no tool calls: nothing to evaluate"
    prompts = (
        Prompt(
            "verdict",
            "Are the arguments of this tool call appropriate and well-formed for the task: right "
            "field names, required parameters present, semantically correct values? "
            'Reply as {"verdict": "yes"|"no", "reason": "..."}.',
        ),
    )

    def items(self, case: EvalCase) -> list[dict[str, Any]]:
        return [
            {"task": case.input, "tool_call": {"name": c.name, "arguments": c.arguments}}
            for c in case.tool_calls
        ]


@register_metric
class StepFaithfulness(_PerItemMetric):
    """Whether each step follows from the task and the steps before it (up to 8 steps)."""

    name = "step_faithfulness"
    unit = "steps"
    empty_reason = "no steps: nothing to evaluate"
    prompts = (
        Prompt(
            "verdict",
            "Does this step follow logically from the task and the prior steps, without invented "
            "observations, ignored failures, or actions that contradict earlier tool results? "
            'Reply as {"verdict": "yes"|"no", "reason": "..."}.',
        ),
    )

    def items(self, case: EvalCase) -> list[dict[str, Any]]:
        steps = [s.model_dump() for s in case.steps]
        return [
            {"task": case.input, "prior_steps": steps[:i], "step": step}
            for i, step in enumerate(steps)
        ]


@register_metric
class ToolCallNecessity(_PerItemMetric):
    """Whether each tool call was needed given what earlier calls returned (up to 8 calls)."""

    name = "tool_call_necessity"
    unit = "tool calls"
    empty_reason = "no tool calls: nothing to evaluate"
    prompts = (
        Prompt(
            "verdict",
            "Given what the agent already knows from prior tool calls, was calling this tool "
            "with these arguments strictly necessary to make progress on the task? "
            'Reply as {"verdict": "yes"|"no", "reason": "..."}.',
        ),
    )

    def items(self, case: EvalCase) -> list[dict[str, Any]]:
        calls = [
            {"name": c.name, "arguments": c.arguments, "result": c.result, "error": c.error}
            for c in case.tool_calls
        ]
        return [
            {"task": case.input, "prior_calls": calls[:i], "tool_call": call}
            for i, call in enumerate(calls)
        ]


RECOVERY_PENALTY = 0.2


@register_metric
class TrajectoryEfficiency(JudgeMetric):
    """Mean of three yes/no efficiency questions, minus 0.2 when tool failures went unhandled."""

    name = "trajectory_efficiency"
    reads_steps: ClassVar[bool] = True
    default_threshold: ClassVar[float] = 0.7
    prompts = (
        Prompt(
            "questions",
            "Answer yes or no: (1) did the agent complete the task without unnecessary detours? "
            "(2) is the step count proportionate to the task's complexity? (3) did the agent avoid "
            'repeating steps it had already completed? Reply as {"no_unnecessary_detours": '
            '"yes"|"no", "proportionate_step_count": "yes"|"no", "no_repeated_steps": "yes"|"no", '
            '"reason": "..."}.',
        ),
        Prompt(
            "recovery",
            "Some tool calls failed. Did the agent handle the failures by retrying with different "
            "arguments, switching to an alternative approach, or clearly signalling the failure, "
            'rather than silently continuing as if the call succeeded? Reply as {"verdict": '
            '"yes"|"no", "reason": "..."}.',
        ),
    )

    async def evaluate(self, case: EvalCase, accounting: _Accounting) -> Score:
        run = describe_trace(case)
        answers = await self.ask(accounting, self.prompts[0], EfficiencyAnswers, run=run)
        flags = [
            answers.no_unnecessary_detours,
            answers.proportionate_step_count,
            answers.no_repeated_steps,
        ]
        base = sum(flag == "yes" for flag in flags) / 3
        failed = [c for c in case.tool_calls if c.failed]
        metadata: dict[str, Any] = {
            "answers": answers.model_dump(),
            "base_score": base,
            "failed_tool_calls": len(failed),
        }
        value, reason = base, answers.reason
        if failed:
            recovery = await self.ask(accounting, self.prompts[1], YesNo, run=run)
            metadata["recovered"] = recovery.verdict
            if recovery.verdict == "no":
                value = max(0.0, base - RECOVERY_PENALTY)
                reason = f"{reason} Tool failures were not handled (−{RECOVERY_PENALTY})."
        return Score(value, reason, metadata)


@register_metric
class AgentMemory(JudgeMetric):
    """Whether the agent used prior-session context correctly (needs ``case.context``).

    Score = share of 'yes' among the applicable questions (the expected-output question
    applies only when ``expected_output`` is given).
    """

    name = "agent_memory"
    default_threshold: ClassVar[float] = 0.7
    needs_expectations: ClassVar[bool] = True
    prompts = (
        Prompt(
            "questions",
            "Given the prior context, the current query and the response, answer: does the response "
            "use information from the prior context correctly? does it avoid hallucinating facts "
            "not in the prior context? does it ignore superseded or stale information? does it "
            "include the expected output ('n/a' when none is given)? Reply as "
            '{"uses_prior_context_correctly": "yes"|"no", "avoids_hallucinated_context": '
            '"yes"|"no", "ignores_stale_information": "yes"|"no", "includes_expected_output": '
            '"yes"|"no"|"n/a", "reason": "..."}.',
        ),
    )

    async def evaluate(self, case: EvalCase, accounting: _Accounting) -> Score:
        if not case.context:
            return Score.skip("no memory context: the case gives no context")
        answers = await self.ask(
            accounting,
            self.prompts[0],
            MemoryAnswers,
            prior_context=case.context,
            query=case.input,
            response=case.actual_output,
            expected_output=case.expected_output
            if case.expected_output is not None
            else "(none given)",
        )
        applicable = [
            answers.uses_prior_context_correctly,
            answers.avoids_hallucinated_context,
            answers.ignores_stale_information,
        ]
        if case.expected_output is not None:
            applicable.append(
                "no"
                if answers.includes_expected_output == "n/a"
                else answers.includes_expected_output
            )
        value = sum(a == "yes" for a in applicable) / len(applicable)
        return Score(value, answers.reason, {"answers": answers.model_dump()})


# --- Gaussia (formerly Fair-Forge) ------------------------------------------------------------------------


@register_metric
class AnswerCorrectness(JudgeMetric):
    """How correct the final answer is against the expected answer (feeds ``agentic``)."""

    name = "answer_correctness"
    reads_end: ClassVar[bool] = True
    default_threshold: ClassVar[float] = 0.7
    needs_expectations: ClassVar[bool] = True
    prompts = (
        Prompt(
            "score",
            "Compare the agent's answer with the expected answer for the question. Judge factual "
            f'agreement, not wording. {SCORE_GUIDE} Reply as {{"score": <0-1>, "reason": "..."}}.',
        ),
    )

    async def evaluate(self, case: EvalCase, accounting: _Accounting) -> Score:
        if case.expected_output is None:
            return Score.skip("no expectation: the case gives no expected_output")
        judged = await self.ask(
            accounting,
            self.prompts[0],
            ScoreReason,
            question=case.input,
            answer=case.actual_output,
            expected_answer=case.expected_output,
        )
        return Score(judged.score, judged.reason, {})


# --- reference trajectories (regression cases) ------------------------------------------------


@register_metric
class TrajectoryJudge(JudgeMetric):
    """Whether the run's tool calls do what a reference trajectory does, by an LLM judge: the
    counterpart of the deterministic ``trajectory_match`` for runs that may reach the same end
    by other calls or other wording of the arguments."""

    name = "trajectory_judge"
    reads_steps: ClassVar[bool] = True
    default_threshold: ClassVar[float] = 0.7
    needs_expectations: ClassVar[bool] = True
    prompts = (
        Prompt(
            "score",
            "Compare the agent's tool calls with a reference trajectory that is known to solve "
            "the user's request. Judge whether the agent's calls accomplish what the reference "
            "accomplishes: equivalent calls, arguments with the same meaning, and order where "
            "one call depends on another. Extra harmless calls cost little; a missing or wrong "
            f'essential call costs much. {SCORE_GUIDE} Reply as {{"score": <0-1>, "reason": "..."}}.',
        ),
    )

    async def evaluate(self, case: EvalCase, accounting: _Accounting) -> Score:
        if case.expected_tool_calls is None:
            return Score.skip("no expectation: the case gives no expected_tool_calls")
        reference = [
            {"name": e.name, "parameters": case.reference_for(e)} for e in case.expected_tool_calls
        ]
        made = _calls_for_judge(case.tool_calls)
        if not reference and not made:
            return Score(1.0, "no calls expected and none made", {})
        judged = await self.ask(
            accounting,
            self.prompts[0],
            ScoreReason,
            request=case.input,
            reference_trajectory=reference,
            agent_trajectory=made,
        )
        return Score(judged.score, judged.reason, {"reference": reference, "called": made})
