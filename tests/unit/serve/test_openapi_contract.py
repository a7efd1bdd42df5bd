"""The typed HTTP contract (issue 29 item 7): ``POST /answer``'s response is a model whose every field is typed and
documented, ``method`` is an enum of the served bundle's methods (request and response), and what the server sends
validates against that model — so generated clients (openapi-python-client) get real types."""

from __future__ import annotations

import dataclasses

from fastapi.testclient import TestClient

from tests.unit.serve.fake_runtime import FakeRuntime
from workbench.runtime.runtime import RuntimeAnswer
from workbench.serve import create_app
from workbench.serve.answer_schema import AnswerRecord


def _schema() -> tuple[dict, dict]:
    spec = create_app(FakeRuntime()).openapi()
    return spec, spec["components"]["schemas"]


def _resolve(schemas: dict, node: dict) -> dict:
    ref = node.get("$ref")
    return schemas[ref.rsplit("/", 1)[-1]] if ref else node


def _non_null(schemas: dict, node: dict) -> dict:
    """The schema of a possibly-null property (``anyOf: [X, null]`` → X)."""
    options = [o for o in node.get("anyOf", [node]) if o.get("type") != "null"]
    assert len(options) == 1, node
    return _resolve(schemas, options[0])


def test_the_answer_response_is_typed_and_every_field_documented():
    spec, schemas = _schema()
    ok = spec["paths"]["/answer"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    body = _resolve(schemas, ok)
    assert set(body["properties"]) == {"bundle", "version", "method", "answers"}
    record = _resolve(schemas, body["properties"]["answers"]["items"])
    # every field of RuntimeAnswer, each typed (no free object) and described
    assert set(record["properties"]) == {f.name for f in dataclasses.fields(RuntimeAnswer)}
    assert record.get("additionalProperties") is not True
    for name, prop in record["properties"].items():
        assert prop.get("description"), f"{name} is not documented"
        assert "type" in prop or "anyOf" in prop or "$ref" in prop or "allOf" in prop, name
    assert _non_null(schemas, record["properties"]["ood"])["properties"].keys() == {"flag", "checks", "action"}
    assert _resolve(schemas, record["properties"]["passages"]["items"])["required"] == ["id", "title"]
    assert _non_null(schemas, record["properties"]["utility_class"])["enum"] == [
        "closed",
        "relevant",
        "neutral",
        "noisy",
    ]
    assert set(record["required"]) >= {"question", "method", "text", "retrieved", "lm_calls", "latency_s", "notes"}


def test_method_is_an_enum_of_the_bundles_methods_in_request_and_response():
    spec, schemas = _schema()
    request = _resolve(
        schemas, spec["paths"]["/answer"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    )
    body = _resolve(
        schemas, spec["paths"]["/answer"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    )
    record = _resolve(schemas, body["properties"]["answers"]["items"])
    for node in (
        _non_null(schemas, request["properties"]["method"]),
        body["properties"]["method"],
        record["properties"]["method"],
    ):
        method = _resolve(schemas, node)
        assert method["enum"] == ["dtr", "d2rag"] and method["type"] == "string"
    assert schemas["Method"]["enum"] == ["dtr", "d2rag"]  # one named type, shared by request and response


def test_what_the_server_sends_validates_against_the_documented_model():
    client = TestClient(create_app(FakeRuntime()))
    for traces in (False, True):
        response = client.post("/answer", json={"questions": ["one?", "two?"], "method": "dtr", "traces": traces})
        assert response.status_code == 200, response.text
        for answer in response.json()["answers"]:
            record = AnswerRecord.model_validate(answer)
            assert record.method == "dtr" and (record.trace is not None) == traces
    unknown = client.post("/answer", json={"question": "a", "method": "bm25"})
    assert unknown.status_code == 422 and "unknown method 'bm25'" in unknown.json()["detail"]
    assert "dtr, d2rag" in unknown.json()["detail"]
