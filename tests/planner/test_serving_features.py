"""Serving features per model family (recipes/model-families.yaml): the pure decision and the plan.

``serving_features`` is judged on every branch (not chat, unknown family, each family of the shipped
table through its examples, each class setting, a chat template); the plan carries what was compiled
into its args, its status and its trace.
"""

from __future__ import annotations

import itertools
import json

import pytest
from pydantic import ValidationError

from inference_api.plan import OrderFacts
from inference_api.types import ModelPolicy, ServingFeature
from planner.planning import PlanningRequest, plan_launch_traced
from planner.recipes import (
    AUTO_TOOL_CHOICE,
    CHAT_TEMPLATE,
    REASONING_PARSER,
    TOOL_CALL_PARSER,
    ModelFamilies,
    ModelFamily,
    load_recipe_book,
    render_args,
    resolve_recipe,
    serving_features,
)
from tests.planner.helpers import DEFAULT_LLM, arg, planned, sim_snapshot
from tests.planner.helpers import plan as plan_of

BOOK = load_recipe_book()
FAMILIES = BOOK.models
STRUCTURED = "--structured-outputs-config"
STRICT_LEVEL = "--tool-strict-level"

# (model family, example model): every example of the shipped table.
EXAMPLES = [(name, model) for name, family in FAMILIES.families.items() for model in family.examples]
SETTINGS = [list(c) for n in range(3) for c in itertools.combinations(list(ServingFeature), n)]


def facts(model: str, *disabled: ServingFeature) -> OrderFacts:
    return OrderFacts(modelName=model, parameterCount="7B", disabledFeatures=list(disabled))


def test_the_shipped_table_names_the_families_the_issue_asks_for() -> None:
    named = set(FAMILIES.families)
    assert {"qwen2.5", "qwen3", "llama-3", "mistral", "deepseek-r1", "deepseek-r1-distill", "gpt-oss"} <= named
    assert {"gemma", "phi"} <= named


@pytest.mark.parametrize(("family", "model"), EXAMPLES)
def test_each_example_is_named_by_its_own_family(family: str, model: str) -> None:
    # The first match wins: a family listed earlier must not swallow a later family's models.
    assert FAMILIES.family_of(model) == family


@pytest.mark.parametrize(("family", "model"), EXAMPLES)
@pytest.mark.parametrize("disabled", SETTINGS, ids=lambda d: "+".join(d) or "all-on")
def test_a_chat_recipe_compiles_the_family_parsers_the_class_leaves_on(
    family: str, model: str, disabled: list[ServingFeature]
) -> None:
    row = FAMILIES.families[family]
    args, features = serving_features(FAMILIES, facts(model, *disabled), serves_chat=True)
    tool = None if ServingFeature.TOOL_CALLING in disabled else row.toolCallParser
    reasoning = None if ServingFeature.REASONING in disabled else row.reasoningParser
    assert features.modelFamily == family
    assert features.toolCallParser == tool
    assert features.reasoningParser == reasoning
    assert args.get(TOOL_CALL_PARSER) == tool
    # Auto tool choice goes with a parser, never alone (vLLM refuses the flag without one).
    assert args.get(AUTO_TOOL_CHOICE) is (True if tool else None)
    assert args.get(REASONING_PARSER) == reasoning
    # A tool-call parser brings the structured-output backend its grammars need and the strict level.
    assert args[STRUCTURED] == (FAMILIES.toolCallArgs if tool else FAMILIES.chatArgs)[STRUCTURED]
    assert args.get(STRICT_LEVEL) == (FAMILIES.toolCallArgs[STRICT_LEVEL] if tool else None)
    status = features.status()
    assert (status.toolCalling, status.reasoning) == (tool is not None, reasoning is not None)
    if row.toolCallParser and tool is None:
        assert "the class turns tool calling off" in features.note
    if row.reasoningParser is None:
        assert f"family {family} has no reasoning parser" in features.note


def test_the_shipped_structured_output_and_tool_args_are_the_engine_checked_ones() -> None:
    # tests/engine: llguidance's JSON strings are strict JSON (xgrammar 0.2.8 lets raw control characters
    # into a string with a length bound); xgrammar compiles the structural tags of a named or required tool
    # choice (llguidance answers 400); `parameter` makes a call's arguments follow its function's schema.
    assert json.loads(str(FAMILIES.chatArgs[STRUCTURED])) == {"backend": "guidance", "disable_any_whitespace": True}
    assert json.loads(str(FAMILIES.toolCallArgs[STRUCTURED])) == {"backend": "xgrammar", "disable_any_whitespace": True}
    assert FAMILIES.toolCallArgs[STRICT_LEVEL] == "parameter"


def test_the_tool_call_args_follow_the_parser_and_auto_tool_choice_stays_with_it() -> None:
    args, _ = serving_features(FAMILIES, facts("Qwen/QwQ-32B"), serves_chat=True)
    rendered = " ".join(render_args(args))
    assert f"{AUTO_TOOL_CHOICE} {TOOL_CALL_PARSER} hermes {STRICT_LEVEL} parameter" in rendered
    assert rendered.count(STRUCTURED) == 1
    assert rendered.startswith(STRUCTURED)


def test_an_unknown_family_gets_the_chat_args_only_and_says_why() -> None:
    args, features = serving_features(FAMILIES, facts("ai-inference-dev/tiny-chat"), serves_chat=True)
    assert args == FAMILIES.chatArgs
    assert features.modelFamily is None
    assert not features.status().toolCalling
    assert not features.status().reasoning
    assert "no model family the recipes know" in features.note
    assert "400" in features.note


def test_a_recipe_that_is_not_chat_gets_nothing_whatever_the_name() -> None:
    args, features = serving_features(FAMILIES, facts("Qwen/Qwen3-Embedding-8B"), serves_chat=False)
    assert args == {}
    assert features.modelFamily is None
    assert "not a chat recipe" in features.note


def test_a_family_chat_template_is_compiled() -> None:
    table = ModelFamilies(families={"x": ModelFamily(namePatterns=["x-"], examples=["o/x-1"], chatTemplate="/t.jinja")})
    args, features = serving_features(table, facts("o/x-1"), serves_chat=True)
    assert args == {CHAT_TEMPLATE: "/t.jinja"}
    assert features.chatTemplate == "/t.jinja"
    assert features.toolCallParser is None


def test_a_family_row_is_validated() -> None:
    with pytest.raises(ValidationError):
        ModelFamily(namePatterns=["("], examples=["a"])
    with pytest.raises(ValidationError):
        ModelFamily(namePatterns=[], examples=["a"])
    with pytest.raises(ValidationError):
        ModelFamily.model_validate({"namePatterns": ["a"], "examples": ["a"], "toolParser": "hermes"})


def test_the_class_setting_is_a_set_of_known_features() -> None:
    policy = ModelPolicy.model_validate({"allowedEndpointTypes": ["Chat"], "disabledFeatures": ["ToolCalling"]})
    assert policy.disabledFeatures == [ServingFeature.TOOL_CALLING]
    with pytest.raises(ValidationError):
        ModelPolicy.model_validate({"allowedEndpointTypes": ["Chat"], "disabledFeatures": ["StructuredOutput"]})


@pytest.mark.parametrize(
    ("model", "family"),
    [("Qwen/Qwen2.5-7B-Instruct", "hopper"), ("intfloat/multilingual-e5-large", "hopper"), ("Qwen/Qwen3-8B", "ampere")],
)
def test_resolve_recipe_puts_the_features_after_the_table_args(model: str, family: str) -> None:
    choice = resolve_recipe(BOOK, family, facts(model), fallback_enabled=True).choice
    assert choice is not None
    rendered = render_args(choice.args)
    assert choice.features is not None
    if choice.taxonomy == "chat":
        assert rendered[-len(render_args(serving_features(FAMILIES, facts(model), True)[0])) :] == render_args(
            serving_features(FAMILIES, facts(model), True)[0]
        )
    else:
        assert STRUCTURED not in rendered
        assert TOOL_CALL_PARSER not in rendered


def test_a_plan_of_a_known_family_says_what_it_serves() -> None:
    outcome, trace = plan_launch_traced(
        plan_request("Qwen/Qwen3-8B"),
    )
    plan = planned(outcome)
    assert arg(plan, TOOL_CALL_PARSER) == "hermes"
    assert arg(plan, REASONING_PARSER) == "qwen3"
    assert arg(plan, AUTO_TOOL_CHOICE) == ""
    resolved = plan.resolved(0).features
    assert resolved is not None
    assert (resolved.modelFamily, resolved.toolCalling, resolved.reasoning) == ("qwen3", True, True)
    assert "serving features: model family qwen3: tool calls (hermes), reasoning (qwen3)" in (trace.choice or "")


def test_a_plan_of_an_unknown_family_says_so_in_its_trace_and_status() -> None:
    outcome, trace = plan_launch_traced(plan_request("ai-inference-dev/tiny-chat"))
    plan = planned(outcome)
    assert arg(plan, TOOL_CALL_PARSER) is None
    assert arg(plan, STRUCTURED) is not None
    resolved = plan.resolved(0).features
    assert resolved is not None
    assert (resolved.modelFamily, resolved.toolCalling, resolved.reasoning) == (None, False, False)
    assert "serving features: no known model family: no tool calls, no reasoning" in (trace.choice or "")


def test_a_class_that_turns_tool_calling_off_plans_without_it() -> None:
    plan = planned(plan_of("Qwen/Qwen3-8B", parameterCount="8B", disabledFeatures=[ServingFeature.TOOL_CALLING]))
    assert arg(plan, TOOL_CALL_PARSER) is None
    assert arg(plan, AUTO_TOOL_CHOICE) is None
    assert arg(plan, REASONING_PARSER) == "qwen3"


def plan_request(model: str) -> PlanningRequest:
    return PlanningRequest(
        facts=OrderFacts(modelName=model, parameterCount="1B"),
        acceleratorPolicy=DEFAULT_LLM,
        inventory=sim_snapshot(),
        className="test-class",
    )
