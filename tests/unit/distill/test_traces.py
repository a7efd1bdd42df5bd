"""The recording controller (exact rendered inputs, targets as the controller reads replies, unusable replies skipped
and counted, costs) and the trace dataset format (row checks, de-duplication, saving and loading)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.unit.distill.conftest import FakeLM
from workbench.core.errors import DataError
from workbench.distill.traces import (
    DECISIONS,
    TRACE_COLUMNS,
    PromptRecorder,
    RecordingController,
    TraceRow,
    deduplicate,
    load_traces,
    save_traces,
    verdict_score,
)
from workbench.methods.controller import (
    COMPLETENESS_PROMPT,
    CONTROLLER_SYSTEM,
    RELEVANCE_PROMPT,
    PromptedLMController,
)

Q = "Which river flows through Paris?"
PASSAGES = ["Paris: Paris lies on the river Seine.", "Oslo: Oslo is the capital of Norway."]


def well_formed(prompt: str) -> str:
    """Replies a careful teacher gives, with the wrappers the controller strips."""
    if "Prepare this request" in prompt:
        return 'Sure! {"dense": "Which river flows through the city of Paris?", "keywords": ["Paris", "river"]}'
    if "What kind of request" in prompt:
        return "B) an explanation"
    if "helps answer" in prompt or "state this information" in prompt:
        return "Yes." if "Seine" in prompt.split("Passage:")[1] else "No"
    if "read and used on its own" in prompt:
        return "0.2" if "it lies" in prompt else "90%"
    if "Rewrite MIDDLE" in prompt:
        return "Here is the passage: Paris lies on the Seine, a river of France."
    if "separate pieces" in prompt:
        return '["the river that flows through Paris"]'
    if "standalone search query" in prompt:
        return 'Query: "Which river flows through Paris?"'
    return "?"


def run_every_decision(controller):
    controller.enrich(Q)
    controller.channel_weights(Q, ["dense", "sparse"])
    controller.refine(Q, PASSAGES)
    controller.completeness(Q, ["it lies on the Seine", "Oslo is the capital of Norway."])
    controller.compress(Q, "Paris is a city.", "it lies on the Seine", None, 40)
    controller.elements(Q)
    controller.coverage(Q, ["river of Paris"], PASSAGES)
    controller.follow_up(Q, "the river", PASSAGES)


def test_recorder_keeps_the_exact_rendered_inputs_and_the_targets_as_the_controller_reads_them():
    lm = FakeLM(well_formed)
    recorder = RecordingController(lm, score_mode="generate")
    with recorder.question("q1"):
        run_every_decision(recorder)
    rows = recorder.rows()
    assert {r.decision for r in rows} == set(DECISIONS) and not recorder.skipped()
    assert all(r.question_id == "q1" and r.source == "teacher" for r in rows)
    # the input is the chat rendering of the controller's own prompt, system message and assistant opener included
    refine = [r for r in rows if r.decision == "refine"]
    assert [r.input for r in refine] == [
        lm.render_chat(RELEVANCE_PROMPT.format(query=Q, passage=p), system=CONTROLLER_SYSTEM) for p in PASSAGES
    ]
    assert [(r.target, r.score, r.single_token) for r in refine] == [("Yes", 1.0, True), ("No", 0.0, True)]
    complete = [r for r in rows if r.decision == "completeness"]
    assert complete[0].input.endswith("<assistant>") and COMPLETENESS_PROMPT.split("{")[0] in complete[0].input
    assert [(r.target, r.score) for r in complete] == [("No", 0.2), ("Yes", 0.9)]
    by = {r.decision: r for r in rows}
    assert by["channel_weights"].target == "B" and math.isnan(by["channel_weights"].score)
    assert json.loads(by["enrich"].target) == {
        "dense": "Which river flows through the city of Paris?",
        "keywords": ["Paris", "river"],
    }
    assert json.loads(by["elements"].target) == ["the river that flows through Paris"]
    assert by["compress"].target == "Paris lies on the Seine, a river of France."  # preamble stripped
    assert by["follow_up"].target == "Which river flows through Paris?"  # "Query:" and quotes stripped
    assert [(r.target, r.single_token) for r in rows if r.decision == "coverage"] == [("Yes", True), ("No", True)]
    assert not any(r.single_token for r in rows if r.decision in ("enrich", "compress", "elements", "follow_up"))
    assert recorder.listed_elements == {"q1": ["the river that flows through Paris"]}
    # the raw reply is recorded too, for every prompt
    assert [r.reply for r in recorder.records if r.decision == "compress"] == [
        "Here is the passage: Paris lies on the Seine, a river of France."
    ]


def test_recorder_returns_the_prompted_controllers_decisions_unchanged():
    plain, recorder = PromptedLMController(FakeLM(well_formed)), RecordingController(FakeLM(well_formed))
    for name, args in (
        ("enrich", (Q,)),
        ("channel_weights", (Q, ["dense", "sparse"])),
        ("refine", (Q, PASSAGES)),
        ("coverage", (Q, ["river of Paris"], PASSAGES)),
        ("follow_up", (Q, "the river", PASSAGES)),
    ):
        assert getattr(recorder, name)(*args) == getattr(plain, name)(*args)


def test_unusable_teacher_replies_are_skipped_and_counted_never_rows():
    recorder = RecordingController(FakeLM(lambda prompt: "~~ ?? ~~"))
    assert recorder.score_mode == "generate"  # the fake has no next_token_logprobs
    with recorder.question("q1"):
        run_every_decision(recorder)
    assert recorder.rows() == []
    assert recorder.skipped() == {
        "enrich": 1,
        "channel_weights": 1,
        "refine": 2,
        "completeness": 2,
        "compress": 1,
        "elements": 1,
        "coverage": 2,
        "follow_up": 1,
    }
    assert recorder.made() == recorder.skipped()
    assert all(r.reply == "~~ ?? ~~" and r.target is None for r in recorder.records)
    assert recorder.listed_elements == {}  # the fallback element list is not the teacher's
    drained = recorder.drain()
    assert len(drained) == 11 and recorder.records == []


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_logprob_scores_become_yes_no_targets_and_unreadable_ones_are_skipped():
    def logprobs(prompt, options):
        if options == ["A", "B", "C"]:
            return [-3.0, -2.0, -0.5]  # C: multi-hop
        if "Oslo" in prompt:
            return [math.nan] * len(options)  # unreadable
        return [math.log(0.3), -20.0, math.log(0.1), -20.0]  # p(Yes) = 0.75

    lm = FakeLM(well_formed, logprobs)
    recorder = RecordingController(lm)
    assert recorder.score_mode == "logprobs"
    with recorder.question("q2"):
        recorder.channel_weights(Q, ["dense", "sparse"])
        recorder.refine(Q, PASSAGES)
        recorder.coverage(Q, ["river of Paris", "capital"], PASSAGES)
    rows = recorder.rows()
    assert [r.target for r in rows if r.decision == "channel_weights"] == ["C"]
    refine = [r for r in rows if r.decision == "refine"]
    assert len(refine) == 1 and refine[0].target == "Yes" and refine[0].score == pytest.approx(0.75, abs=1e-6)
    coverage = [r for r in rows if r.decision == "coverage"]
    assert len(coverage) == 2 and all("Seine" in r.input for r in coverage)  # the Oslo pairs were unreadable
    assert recorder.skipped() == {"refine": 1, "coverage": 2}
    assert json.loads(next(r.reply for r in recorder.records if r.decision == "refine"))["Yes"] == pytest.approx(
        math.log(0.3)
    )


def test_costs_are_counted_per_decision():
    lm = FakeLM(well_formed)
    recorder = RecordingController(lm, score_mode="generate")
    recorder.refine(Q, PASSAGES)
    recorder.enrich(Q)
    assert recorder.costs["refine"]["invocations"] == 1 and recorder.costs["refine"]["prompts"] == 2
    assert recorder.costs["refine"]["lm_calls"] == 2 and recorder.costs["refine"]["prompt_tokens"] > 0
    assert recorder.costs["enrich"]["generated_tokens"] == len(well_formed("Prepare this request").split())
    assert recorder.costs["compress"]["invocations"] == 0


def test_recording_a_real_generator_renders_its_chat_template(tiny_lm_dir):
    from workbench.backends.generator import Generator

    generator = Generator(tiny_lm_dir)
    recorder = RecordingController(generator, enrich_tokens=4)
    recorder.refine(Q, PASSAGES[:1])
    recorder.enrich(Q)
    refine, enrich = recorder.records
    assert refine.input == generator.render_chat(
        RELEVANCE_PROMPT.format(query=Q, passage=PASSAGES[0]), system=CONTROLLER_SYSTEM
    )
    assert refine.input.startswith("<|system|>" + CONTROLLER_SYSTEM) and refine.input.endswith("<|assistant|>")
    assert refine.usable and refine.target in ("Yes", "No") and 0.0 <= refine.score <= 1.0
    assert set(json.loads(refine.reply)) == {"Yes", "yes", "No", "no"}
    assert not enrich.usable  # a random model writes no JSON: skipped
    assert recorder.costs["refine"]["prompt_tokens"] > 0 and recorder.costs["enrich"]["generated_tokens"] > 0


def test_dry_prompt_recorder_runs_no_model():
    class RenderOnly:
        def render_chat(self, message, system=None):
            return f"{system}|{message}"

    recorder = PromptRecorder(RenderOnly(), dry=True)
    out = recorder.next_token_logprobs(["a", "b"], ["Yes", "No"])
    assert out.shape == (2, 2) and not out.any()
    assert [g.text for g in recorder.generate(["c"], max_new_tokens=3)] == [""]
    calls = recorder.take()
    assert [(c.kind, c.prompts) for c in calls] == [("logprobs", ["a", "b"]), ("generate", ["c"])]
    assert recorder.take() == []


def test_verdict_score_reads_log_prob_pairs_and_texts():
    assert verdict_score({"yes": math.log(0.2), "no": math.log(0.6)}) == pytest.approx(0.25)
    assert verdict_score({"yes": -math.inf, "no": -math.inf}) is None
    assert verdict_score({"yes": math.nan, "no": 0.0}) is None
    assert verdict_score("Yes, it does.") == 1.0 and verdict_score("no") == 0.0 and verdict_score("~~") is None
    assert verdict_score(None) is None


def test_trace_rows_follow_the_format():
    TraceRow("refine", "gold", "q", "in", "Yes", True, 1.0)
    TraceRow("enrich", "teacher", "q", "in", '{"dense": "x", "keywords": []}', False)
    for bad in (
        dict(decision="refine", target="yes", single_token=True, score=1.0),  # not the single token
        dict(decision="refine", target="Yes", single_token=False, score=1.0),
        dict(decision="channel_weights", target="D", single_token=True),
        dict(decision="enrich", target="x", single_token=False, score=0.5),  # a score only for yes / no
        dict(decision="rerank", target="x", single_token=False),
        dict(decision="compress", target="  ", single_token=False),
    ):
        with pytest.raises(ValueError):
            TraceRow(source="teacher", question_id="q", input="in", **bad)
    with pytest.raises(ValueError):
        TraceRow("refine", "student", "q", "in", "Yes", True, 1.0)


def test_deduplicate_keeps_the_first_of_each_decision_source_input():
    a = TraceRow("refine", "teacher", "q1", "in", "Yes", True, 0.9)
    b = TraceRow("refine", "teacher", "q2", "in", "Yes", True, 0.9)
    c = TraceRow("refine", "gold", "q1", "in", "No", True, 0.0)
    assert deduplicate([a, b, c]) == [a, c]


def test_traces_save_and_load_with_the_contract_columns(tmp_path):
    rows = {
        "train": [
            TraceRow("refine", "teacher", "q1", "in1", "Yes", True, 0.8),
            TraceRow("elements", "teacher", "q1", "in2", '["a"]', False),
        ],
        "heldout": [TraceRow("channel_weights", "gold", "q2", "in3", "C", True)],
    }
    fingerprint = save_traces(rows, tmp_path / "traces")
    assert (tmp_path / "traces" / "fingerprint.json").is_file() and len(fingerprint) == 16
    dd = load_traces(tmp_path / "traces")
    assert list(dd) == ["train", "heldout"] and tuple(dd["train"].column_names) == TRACE_COLUMNS
    assert dd["train"][0] == rows["train"][0].to_dict()
    assert np.isnan(dd["train"][1]["score"]) and dd["heldout"][0]["single_token"] is True
    with pytest.raises(DataError, match="heldout"):
        save_traces({"train": rows["train"], "heldout": []}, tmp_path / "empty")
    assert not (tmp_path / "empty").exists()
    with pytest.raises(DataError, match="no trace dataset"):
        load_traces(tmp_path / "missing")
    dd["train"].remove_columns("score").save_to_disk(str(tmp_path / "bad" / "train"))
    dd["heldout"].save_to_disk(str(tmp_path / "bad" / "heldout"))
    (tmp_path / "bad" / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "heldout"]}))
    with pytest.raises(DataError, match="score"):
        load_traces(tmp_path / "bad")
