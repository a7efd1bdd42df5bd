"""Property: any ``POST /answer`` body gets 200 with one answer per question, or 413 / 422 with a one-line JSON
``detail`` — never a 500, never a blank or over-long question handed to the runtime.

A live server (uvicorn on a free localhost port, the real app and scheduler) over a model-free runtime; bodies are
JSON documents shaped like requests (questions with control, zero-width, emoji and very long text; wrong types;
unknown fields), arbitrary JSON, or raw bytes, each under one of several Content-Types.
"""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.common import VALUES, record
from tests.unit.serve.fake_runtime import FakeRuntime, serving
from workbench.serve import ServeLimits, create_app

LIMITS = ServeLimits(max_batch=4, max_body_bytes=4096, max_question_chars=100, max_question_tokens=60)


@pytest.fixture(scope="module")
def server():
    runtime = FakeRuntime()
    with serving(create_app(runtime, LIMITS)) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client, runtime


QUESTION_TEXT = st.one_of(
    st.text(max_size=30),
    st.text(alphabet=st.sampled_from(["\u200b", "\u2060", "\ufeff", " ", "\t", "\n", "\u2028"]), max_size=8),
    st.text(alphabet=st.sampled_from(["😀", "𝔸", "a", "é"]), min_size=20, max_size=90),
    st.sampled_from(["raise data error", "x" * 101, "y" * 5000, "What is the capital of Peru?"]),
)
QUESTION = st.one_of(QUESTION_TEXT, VALUES)
REQUEST = st.fixed_dictionaries(
    {},
    optional={
        "question": QUESTION,
        "questions": st.one_of(st.lists(QUESTION, max_size=6), VALUES),
        "method": st.one_of(st.sampled_from(["dtr", "d2rag", "oracle", ""]), VALUES),
        "traces": st.one_of(st.booleans(), VALUES),
        "answers": st.lists(st.text(max_size=5), max_size=2),
    },
)
WELL_FORMED = st.one_of(
    st.builds(lambda q: {"question": q}, QUESTION_TEXT),
    st.builds(
        lambda qs, m: {"questions": qs, "method": m},
        st.lists(QUESTION_TEXT, min_size=1, max_size=4),
        st.sampled_from(["dtr", "d2rag"]),
    ),
)
BODY = st.one_of(
    WELL_FORMED.map(lambda r: json.dumps(r).encode()),
    WELL_FORMED.map(lambda r: json.dumps(r, ensure_ascii=False).encode()),
    REQUEST.map(lambda r: json.dumps(r).encode()),
    VALUES.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
    st.just(b'{"question": "a' + b"b" * 5000 + b'"}'),
)
CONTENT_TYPES = st.sampled_from(["application/json", "text/plain", "application/json; charset=latin-1", ""])


@given(body=BODY, content_type=CONTENT_TYPES)
def test_answer_bodies(server, body, content_type):
    client, runtime = server
    seen = len(runtime.questions_seen())
    headers = {"content-type": content_type} if content_type else {}
    response = client.post("/answer", content=body, headers=headers)
    assert response.status_code in (200, 413, 422), (response.status_code, response.text[:300])
    payload = response.json()
    if response.status_code != 200:
        detail = payload["detail"]
        assert isinstance(detail, str) and detail and "\n" not in detail and len(detail) <= 500
        record("http body", "refused")
        return
    record("http body", "accepted")
    asked = json.loads(body)
    questions = [asked["question"]] if "question" in asked else asked["questions"]
    assert len(payload["answers"]) == len(questions)
    reached = runtime.questions_seen()[seen:]
    assert all(q.strip() and len(q) <= LIMITS.max_question_chars for q in reached)
