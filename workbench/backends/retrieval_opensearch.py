"""OpenSearch as a retrieval engine (layer 3): the Elasticsearch backend's retriever and writer
(:mod:`workbench.backends.retrieval_elasticsearch`) speaking OpenSearch 2+ through ``opensearch-py``: BM25 ``match``
on the lexical channel, the k-NN plugin's ``knn`` query on a ``knn_vector`` field (HNSW, cosine similarity, the
Lucene engine) on the dense one. Credentials: ``user:password`` as HTTP basic auth, any other value as a bearer
token."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.backends.retrieval_elasticsearch import Dialect, SearchEngineIndex, SearchEngineRetriever, plain
from workbench.backends.retrieval_engines import Connection


class OpenSearchDialect(Dialect):
    """How ``opensearch-py`` is called (see :class:`~workbench.backends.retrieval_elasticsearch.Dialect`)."""

    backend = "opensearch"
    module = "opensearchpy"
    vector_type = "knn_vector"
    dim_key = "dimension"

    def errors(self) -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
        os_ = self.client_module()
        # ConnectionError (timeouts included) subclasses TransportError: callers test the transient types first
        return (os_.ConnectionError,), (os_.TransportError, self.helpers().BulkIndexError)

    def client(self, connection: Connection) -> Any:
        secret = connection.secret()
        auth: dict[str, Any] = {}
        if secret is not None:
            auth = (
                {"http_auth": tuple(secret.split(":", 1))}
                if ":" in secret
                else {"headers": {"Authorization": f"Bearer {secret}"}}
            )
        return self.client_module().OpenSearch(
            hosts=[connection.uri], timeout=connection.timeout_s, max_retries=0, retry_on_timeout=False, **auth
        )

    def search(self, client: Any, index: str, body: dict[str, Any]) -> dict[str, Any]:
        return plain(client.search(index=index, body=body))

    def knn(self, field: str, vector: Sequence[float], k: int) -> dict[str, Any]:
        return {"query": {"knn": {field: {"vector": list(vector), "k": k}}}, "size": k}

    def vector_mapping(self, dim: int) -> dict[str, Any]:
        method = {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene"}
        return {"type": "knn_vector", "dimension": dim, "method": method}

    def create(self, client: Any, index: str, properties: dict[str, Any]) -> None:
        body = {"settings": {"index": {"knn": True}}, "mappings": {"properties": properties}}
        client.indices.create(index=index, body=body)


class OpenSearchRetriever(SearchEngineRetriever):
    """:class:`~workbench.backends.retrieval_elasticsearch.SearchEngineRetriever` over OpenSearch 2+."""

    dialect = OpenSearchDialect()


class OpenSearchIndex(SearchEngineIndex):
    """:class:`~workbench.backends.retrieval_elasticsearch.SearchEngineIndex` into OpenSearch 2+."""

    dialect = OpenSearchDialect()
