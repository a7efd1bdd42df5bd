"""A stand-in Elasticsearch / OpenSearch server for the contract tests (no such server installs here): a 127.0.0.1
HTTP server speaking the part of the REST API the official clients use for retrieval — root info, index create /
exists / mapping, ``_bulk``, ``_count``, ``_refresh``, ``_search`` — and nothing else.

It is a SUBSTITUTE, not the engine: ``match`` queries are ranked by real Lucene BM25 (Anserini through pyserini's
jar, k1 1.2 and b 0.75 as Elasticsearch's defaults, but Anserini's English analyser: Porter stemming and stop
words, where Elasticsearch's default ``standard`` analyser does neither), ``knn`` by exact cosine over the stored
vectors (score (1 + cos) / 2, as both engines give for cosine), ``ids`` / ``terms`` / ``match_all`` by lookup.
``--flavor elasticsearch`` sends ``X-Elastic-Product: Elasticsearch`` (the official client refuses a server
without it) and a 9.x version; ``--flavor opensearch`` an OpenSearch 2.x info. ``--auth user:password`` (basic) and
``--api-key KEY`` (``Authorization: ApiKey KEY``) make every request but ``/_standin/*`` need one of them.
``POST /_standin/delay {"seconds": s}`` delays every ``_search`` by ``s`` (timeout tests); ``POST /_standin/fail
{"status": 503, "times": n}`` answers the next ``n`` searches with that status.

Run: ``python -m tests.es_standin --port 9200 --flavor elasticsearch --workdir DIR``
(``tests.engine_servers.es_standin`` starts it in a temporary directory and deletes it afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

ES_K1, ES_B = 1.2, 0.75


@dataclass
class StoredIndex:
    """One index: its mapping, documents by ``_id``, and the Lucene indexes over its text fields (rebuilt when
    documents change)."""

    mappings: dict[str, Any]
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    lucene: dict[str, Any] = field(default_factory=dict)  # text field -> SimpleSearcher
    version: int = 0
    built: dict[str, int] = field(default_factory=dict)


class Engine:
    """The stand-in's state and query evaluation."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.indices: dict[str, StoredIndex] = {}
        self.delay_s = 0.0
        self.failing: list[int] = []  # statuses the next searches answer with, one each

    def bm25(self, name: str, index: StoredIndex, text_field: str, query: str, k: int) -> list[tuple[str, float]]:
        """Top-``k`` ``(_id, score)`` of Lucene BM25 over ``text_field``."""
        from workbench.backends.retrieval_lucene import bm25_searcher, write_documents

        if index.built.get(text_field) != index.version:
            if text_field in index.lucene:
                index.lucene.pop(text_field).close()
            target = self.workdir / f"{name}-{text_field}-{index.version}"
            docs = [{"id": i, "contents": str(source.get(text_field, ""))} for i, source in index.docs.items()]
            write_documents(target, docs, append=False, store_raw=False)
            index.lucene[text_field], index.built[text_field] = bm25_searcher(target, ES_K1, ES_B), index.version
        return [(str(h.docid), float(h.score)) for h in index.lucene[text_field].search(query, int(k))]

    def knn(self, index: StoredIndex, vector_field: str, vector: list[float], k: int) -> list[tuple[str, float]]:
        """Top-``k`` ``(_id, (1 + cos) / 2)`` by exact cosine."""
        ids = [i for i, s in index.docs.items() if s.get(vector_field) is not None]
        if not ids:
            return []
        matrix = np.asarray([index.docs[i][vector_field] for i in ids], dtype=np.float64)
        q = np.asarray(vector, dtype=np.float64)
        cos = matrix @ q / np.maximum(np.linalg.norm(matrix, axis=1) * np.linalg.norm(q), 1e-12)
        order = np.argsort(-cos, kind="stable")[:k]
        return [(ids[j], float((1 + cos[j]) / 2)) for j in order]

    def search(self, name: str, body: dict[str, Any]) -> list[tuple[str, float]]:
        """Hits of a ``_search`` body (match, ids, terms, match_all, knn top level or in the query)."""
        index = self.indices[name]
        size = int(body.get("size", 10))
        if "knn" in body:  # Elasticsearch's search option
            spec = body["knn"]
            return self.knn(index, spec["field"], spec["query_vector"], min(size, int(spec["k"])))
        query = body.get("query", {"match_all": {}})
        (kind, spec), *_ = query.items()
        if kind == "match":
            ((text_field, text),) = spec.items()
            text = text["query"] if isinstance(text, dict) else text
            return self.bm25(name, index, text_field, str(text), size)
        if kind == "knn":  # the OpenSearch k-NN plugin's query
            ((vector_field, knn),) = spec.items()
            return self.knn(index, vector_field, knn["vector"], min(size, int(knn["k"])))
        if kind == "ids":
            return [(i, 1.0) for i in spec["values"] if i in index.docs][:size]
        if kind == "terms":
            ((term_field, values),) = spec.items()
            wanted = set(map(str, values))
            return [(i, 1.0) for i, s in index.docs.items() if str(s.get(term_field)) in wanted][:size]
        if kind == "match_all":
            return [(i, 1.0) for i in index.docs][:size]
        raise ValueError(f"query {kind} is not spoken by the stand-in")


def error_body(status: int, kind: str, reason: str) -> dict[str, Any]:
    """An error answer shaped as both engines shape theirs."""
    cause = {"type": kind, "reason": reason}
    return {"error": {"root_cause": [cause], **cause}, "status": status}


def project(source: dict[str, Any], wanted: Any) -> dict[str, Any] | None:
    """``_source`` filtered as the request's ``_source`` says (False: none; a list: those fields)."""
    if wanted is False:
        return None
    if isinstance(wanted, list):
        return {k: v for k, v in source.items() if k in wanted}
    return source


def build_app(flavor: str, auth: str | None, api_key: str | None, workdir: Path) -> FastAPI:
    """The stand-in's ASGI app."""
    engine = Engine(workdir)
    app = FastAPI()
    product = {"X-Elastic-Product": "Elasticsearch"} if flavor == "elasticsearch" else {}
    accepted = set()
    if auth:
        accepted.add("Basic " + base64.b64encode(auth.encode()).decode())
    if api_key:
        accepted.add(f"ApiKey {api_key}")

    def answer(body: Any, status: int = 200) -> Any:
        return JSONResponse(body, status_code=status, headers=product)

    @app.middleware("http")
    async def authenticate(request: Request, call_next: Any) -> Any:
        control = request.url.path.startswith("/_standin/")
        if accepted and not control and request.headers.get("authorization") not in accepted:
            body = error_body(401, "security_exception", "missing authentication credentials")
            return JSONResponse(body, status_code=401, headers={**product, "WWW-Authenticate": "Basic"})
        return await call_next(request)

    async def payload(request: Request) -> dict[str, Any]:
        raw = await request.body()
        return json.loads(raw) if raw.strip() else {}

    def missing(name: str) -> Any:
        return answer(error_body(404, "index_not_found_exception", "no such index"), 404)

    @app.post("/_standin/delay")
    async def set_delay(request: Request) -> Any:
        engine.delay_s = float((await payload(request))["seconds"])
        return {"delay_s": engine.delay_s}

    @app.post("/_standin/fail")
    async def set_failures(request: Request) -> Any:
        spec = await payload(request)
        engine.failing = [int(spec["status"])] * int(spec["times"])
        return {"failing": len(engine.failing)}

    @app.api_route("/", methods=["GET", "HEAD"])
    async def info() -> Any:
        if flavor == "elasticsearch":
            version = {"number": "9.1.0", "build_flavor": "default", "lucene_version": "10.2.2"}
        else:
            version = {"distribution": "opensearch", "number": "2.19.0", "lucene_version": "9.12.1"}
        return answer({"name": "standin", "cluster_name": "standin", "version": version, "tagline": "stand-in"})

    @app.post("/_bulk")
    @app.put("/_bulk")
    async def bulk(request: Request) -> Any:
        lines = [line for line in (await request.body()).decode().splitlines() if line.strip()]
        items = []
        for action_line, source_line in zip(lines[::2], lines[1::2], strict=True):
            ((op, meta),) = json.loads(action_line).items()
            index = engine.indices.get(meta["_index"])
            if index is None:  # as the engines do with dynamic mapping off: refuse
                items.append({op: {"_index": meta["_index"], "_id": meta.get("_id"), "status": 404}})
                continue
            created = meta["_id"] not in index.docs
            index.docs[meta["_id"]] = json.loads(source_line)
            index.version += 1
            result = "created" if created else "updated"
            items.append({op: {"_index": meta["_index"], "_id": meta["_id"], "status": 201, "result": result}})
        errors = any(item[next(iter(item))]["status"] >= 300 for item in items)
        return answer({"took": 1, "errors": errors, "items": items})

    @app.head("/{name}")
    async def exists(name: str) -> Any:
        return Response(status_code=200 if name in engine.indices else 404, headers=product)

    @app.put("/{name}")
    async def create(name: str, request: Request) -> Any:
        if name in engine.indices:
            return answer(error_body(400, "resource_already_exists_exception", "index exists"), 400)
        engine.indices[name] = StoredIndex(mappings=(await payload(request)).get("mappings", {}))
        return answer({"acknowledged": True, "shards_acknowledged": True, "index": name})

    @app.get("/{name}/_mapping")
    async def mapping(name: str) -> Any:
        if name not in engine.indices:
            return missing(name)
        return answer({name: {"mappings": engine.indices[name].mappings}})

    @app.api_route("/{name}/_refresh", methods=["GET", "POST"])
    async def refresh(name: str) -> Any:
        if name not in engine.indices:
            return missing(name)
        return answer({"_shards": {"total": 1, "successful": 1, "failed": 0}})

    @app.api_route("/{name}/_count", methods=["GET", "POST"])
    async def count(name: str) -> Any:
        if name not in engine.indices:
            return missing(name)
        return answer({"count": len(engine.indices[name].docs), "_shards": {"total": 1, "successful": 1}})

    @app.api_route("/{name}/_search", methods=["GET", "POST"])
    async def search(name: str, request: Request) -> Any:
        if name not in engine.indices:
            return missing(name)
        body = await payload(request)
        if "_source" not in body and "_source" in request.query_params:  # a client may send it as a parameter
            value = request.query_params["_source"]
            body["_source"] = False if value == "false" else value.split(",")
        if engine.delay_s:
            await asyncio.sleep(engine.delay_s)
        if engine.failing:
            status = engine.failing.pop()
            return answer(error_body(status, "standin_failure", "as told by /_standin/fail"), status)
        try:
            found = engine.search(name, body)
        except (ValueError, KeyError, TypeError) as exc:
            return answer(error_body(400, "parsing_exception", str(exc)), 400)
        docs = engine.indices[name].docs
        hits = []
        for doc_id, score in found:
            hit = {"_index": name, "_id": doc_id, "_score": score}
            source = project(docs[doc_id], body.get("_source", True))
            if source is not None:
                hit["_source"] = source
            hits.append(hit)
        total = {"value": len(hits), "relation": "eq"}
        best = max((h["_score"] for h in hits), default=None)
        return answer({"took": 1, "timed_out": False, "hits": {"total": total, "max_score": best, "hits": hits}})

    return app


def main() -> None:
    """Serve the stand-in until killed."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--flavor", choices=("elasticsearch", "opensearch"), default="elasticsearch")
    parser.add_argument("--auth", default=None, help="user:password every request must carry (basic auth)")
    parser.add_argument("--api-key", default=None, help="an API key accepted as 'Authorization: ApiKey KEY'")
    parser.add_argument("--workdir", required=True, help="a directory for the Lucene indexes (the caller deletes it)")
    args = parser.parse_args()
    app = build_app(args.flavor, args.auth, args.api_key, Path(args.workdir))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
