"""Build a bundle's tools from its manifest: the models it names (weights checked), its corpus and retriever.

Everything is built by :mod:`workbench.backends.factory` and :mod:`workbench.data.corpus` — the code the stages use —
so the runtime searches the same passages, formats the same prompts and samples with the same seed as the run.

Checks, each a one-line refusal unless the caller overrides on purpose (then noted in every trace):

* a generator or embedder whose weights' sha256 differs from the manifest's (``allow_model_mismatch``);
* a served embedder (``models.embedder.served``) whose probe vectors differ from the manifest's, or that cannot be
  reached at the recorded URL (``allow_model_mismatch`` lets the first through, never the second);
* a corpus whose fingerprint differs from the manifest's (``allow_corpus_mismatch``, or a ``corpus`` override);
* a bundle on an external retriever (``external_retriever``): an engine that cannot be reached (never overridable),
  or whose index differs from the bundle's fingerprint (``allow_retriever_mismatch``). Such a bundle reads no corpus
  file: passages come from the engine (a ``corpus`` override is the passages it starts from).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workbench.assets import model_weights, no_training_imports, resolve_embedder, weights_digest
from workbench.backends.factory import (
    build_embedder,
    build_generator,
    build_judge,
    build_retriever,
    build_served_embedder,
    build_served_generator,
)
from workbench.backends.lora import resolve_model
from workbench.backends.served_probe import compare_probes
from workbench.bundle.external import engine_fingerprint, fingerprint_differences, record_connection
from workbench.core.errors import AssetError, DataError
from workbench.methods.base import Tools


def _checked_model(kind: str, record: dict[str, Any], override: str | None, allow: bool, notes: list[str]) -> Any:
    """The resolved model for ``kind`` (the manifest's, or ``override``), its weights compared with the manifest."""

    ref = override or record["ref"]
    resolve = resolve_model if kind == "generator" else resolve_embedder
    with no_training_imports():  # a cold cache converts or merges the model with save_pretrained
        resolved = resolve(str(ref))
    expected, actual = record.get("weights_sha256"), model_weights(resolved)["weights_sha256"]
    if expected and actual != expected:
        message = (
            f"{kind} {ref!r} has weights {str(actual)[:12]}…, the bundle was made with {expected[:12]}… "
            f"({record['ref']})"
        )
        if not allow:
            raise AssetError(f"{message}; pass allow_model_mismatch to use it anyway", f"bundle {kind}")
        notes.append(f"{message}: decisions were learned on another model")
    elif override and override != record["ref"]:
        notes.append(f"{kind} {override!r} replaces {record['ref']!r} (same weights)")
    elif expected is None:
        notes.append(f"{kind} {ref!r}: the bundle records no weights digest, so they could not be checked")
    return resolved


def served_runtime_generator(manifest: dict[str, Any], options: Any, counter: Any, notes: list[str]) -> Any:
    """The bundle's generator on an OpenAI-compatible server (``options.base_url``): the served model must answer the
    bundle's probe prompts as the bundle's generator did (:func:`~workbench.backends.served_probe.compare_probes`);
    another model is refused in one line unless ``allow_model_mismatch`` (then every trace says so). A method the
    server cannot serve (D²-RAG's contrastive decoding needs per-step logits) is refused when it is asked for
    (:meth:`workbench.runtime.runtime.Runtime.method`), so the bundle's other methods still answer."""

    record = manifest["models"]["generator"]
    served = record.get("served") or {}
    if not options.base_url:
        raise AssetError(
            f"the bundle was made with the served model {record['ref']!r}: pass base_url (--base-url) to reach it",
            "bundle generator",
        )
    tokenizer = options.tokenizer or (served.get("tokenizer") if served else record["ref"])
    generator = build_served_generator(
        base_url=options.base_url,
        model=options.served_model or served.get("model") or record["ref"],
        tokenizer=tokenizer,
        api_key_env=options.api_key_env,
        max_context=record.get("max_context"),
        prompt_format=record.get("prompt_format", "auto"),
        batch_size=options.batch_size or int(manifest["answering"].get("batch_size", 8)),
        cache=options.generation_cache,
        counter=counter,
        seed=int(manifest.get("seed", 0)),
    )
    expected = record.get("probe")
    differs = (
        "the bundle records no probe answers"
        if not expected
        else compare_probes(expected, generator.probe_record.to_dict())
    )
    _accept_served(
        differs,
        f"the model served at {options.base_url} is not the bundle's generator {record['ref']!r}",
        "bundle generator",
        "model",
        f"generator served at {options.base_url} as {generator.settings.model!r} (probe answers match)",
        options,
        notes,
    )
    return generator


def _accept_served(
    differs: str | None, mismatch: str, where: str, kind: str, matched: str, options: Any, notes: list[str]
) -> None:
    """The runtime's verdict on a served model checked against the bundle's probes: ``differs`` (what the probes
    disagree on, None when they agree) refuses it in one line naming ``where`` unless ``allow_model_mismatch``, then
    notes that decisions were learned on another ``kind``; agreement notes ``matched``."""
    if not differs:
        notes.append(matched)
        return
    message = f"{mismatch}: {differs}"
    if not options.allow_model_mismatch:
        raise AssetError(f"{message}; pass allow_model_mismatch to use it anyway", where)
    notes.append(f"{message}: decisions were learned on another {kind}")


def served_runtime_embedder(record: dict[str, Any], options: Any, counter: Any, notes: list[str]) -> Any:
    """The bundle's embedder on its ``/v1/embeddings`` server (``models.embedder.served``: the recorded URL, name and
    key variable): it must embed the probe texts as the run's did
    (:func:`~workbench.backends.served_embedder.compare_embedding_probes`); another model is refused in one line
    unless ``allow_model_mismatch`` (then every trace says so). An unreachable server is a one-line
    :class:`~workbench.backends.served_client.ServedModelError` naming the URL."""
    from workbench.backends.served_embedder import compare_embedding_probes

    served = record["served"]
    embedder = build_served_embedder(
        base_url=served["base_url"], model=served["model"], api_key_env=served.get("api_key_env"), counter=counter
    )
    expected = served.get("probe")
    differs = (
        "the bundle records no probe vectors (the run never embedded)"
        if not expected
        else compare_embedding_probes(expected, embedder.probe_record.to_dict())
    )
    where = f"{served['base_url']} (model {served['model']})"
    _accept_served(
        differs,
        f"the embedder served at {where} is not the bundle's",
        "bundle embedder",
        "embedder",
        f"embedder served at {where} (probe vectors match)",
        options,
        notes,
    )
    return embedder


def runtime_corpus(manifest: dict[str, Any], override: str | None, allow: bool, notes: list[str]) -> dict[str, list]:
    """The corpus columns the manifest names (or the ``override`` file), built the way ``build_data`` built them (a
    corpus file read through the bundle's field mapping, ``corpus.fields``, an override file too)."""
    from workbench.data.corpus import corpus_columns, corpus_documents, corpus_fingerprint, make_chunker

    record = manifest["corpus"]
    source = override or record["source"]
    chunker = make_chunker(record["chunking"], record["chunk_size"], record["chunk_overlap"])
    columns = corpus_columns(corpus_documents(source, fields=record.get("fields")), chunker)
    expected, actual = record.get("fingerprint"), corpus_fingerprint(columns)
    if override:
        notes.append(f"corpus {override!r} replaces the bundle's ({record['source']})")
    elif expected and actual != expected:
        message = f"corpus {source!r} has fingerprint {actual}, the bundle's features were collected over {expected}"
        if not allow:
            raise DataError(f"{message}; pass allow_corpus_mismatch to use it anyway", "bundle corpus")
        notes.append(message)
    return columns


def external_runtime_retriever(
    record: dict[str, Any], options: Any, corpus: Any, embedder: Any, counter: Any, notes: list[str]
) -> tuple[Any, str]:
    """``(retriever, verdict)``: the bundle's external retriever (``external_retriever`` block; ``options.
    retriever_uri`` another address of it) over ``corpus`` (None: every passage from the engine), its index checked
    against the bundle's fingerprint (:mod:`workbench.bundle.external`). ``verdict`` is ``"match"`` or what differs,
    allowed by ``allow_retriever_mismatch`` (every trace then says so); else a one-line EngineError naming the URI
    without credentials, as for an engine that cannot be reached."""
    from workbench.backends.retrieval_engines import EngineError, redact_uri

    connection = record_connection(record, options.retriever_uri)
    retriever = build_retriever(record["backend"], corpus, embedder=embedder, counter=counter, connection=connection)
    expected = record["fingerprint"]
    actual = engine_fingerprint(retriever, [probe["query"] for probe in expected["probes"]], expected["k"])
    if options.retriever_uri:
        bundles = record["connection"]["uri"]
        notes.append(f"retriever reached at {redact_uri(options.retriever_uri)}, not the bundle's {bundles}")
    differs = fingerprint_differences(expected, actual)
    if differs is None:
        return retriever, "match"
    if not options.allow_retriever_mismatch:
        retriever.close()
        raise EngineError(
            f"not the bundle's index: {differs}; pass allow_retriever_mismatch to use it anyway", connection.where
        )
    notes.append(
        f"retriever {connection.where} is not the bundle's index ({differs}): decisions were learned over another"
    )
    return retriever, f"differs (allowed): {differs}"


def bundle_embedder(record: dict[str, Any], options: Any, counter: Any, notes: list[str]) -> Callable[[], Any]:
    """The bundle's embedder (the manifest's ``models.embedder`` ``record``, or ``options.embedder``) as the runtime
    uses it: a local one's weights are checked against the record now (:func:`_checked_model`; an embedded MiniLM is
    resolved from its package), and the returned function builds it on its first call (a served one: checked against
    the record's probe vectors, :func:`served_runtime_embedder`) and returns the same embedder on every call."""
    served = record.get("source") == "served" and not options.embedder
    if not served:
        _checked_model("embedder", record, options.embedder, options.allow_model_mismatch, notes)
    built: dict[str, Any] = {}

    def embedder() -> Any:
        if "embedder" not in built and served:
            built["embedder"] = served_runtime_embedder(record, options, counter, notes)
        elif "embedder" not in built:
            ref = options.embedder or record["ref"]  # the reference, so caches keep their fingerprint
            built["embedder"] = build_embedder(ref, counter=counter, device=options.device)
        return built["embedder"]

    return embedder


def build_runtime_tools(manifest: dict[str, Any], options: Any, counter: Any, notes: list[str]) -> Any:
    """The :class:`~workbench.methods.base.Tools` of a bundle (see the module docstring); on an external retriever
    the fingerprint verdict is ``tools.shared("retriever_check", ...)``."""

    models = manifest["models"]
    answering = manifest["answering"]
    allow = options.allow_model_mismatch
    if options.base_url or models["generator"].get("source") == "served":
        generator = served_runtime_generator(manifest, options, counter, notes)
    else:
        generator_model = _checked_model("generator", models["generator"], options.generator, allow, notes)
        generator = build_generator(
            generator_model,
            device=options.device,
            dtype=options.dtype or models["generator"].get("dtype", "float32"),
            max_context=models["generator"].get("max_context"),
            prompt_format=models["generator"].get("prompt_format", "auto"),  # bundles before it was recorded: auto
            batch_size=options.batch_size or int(answering.get("batch_size", 8)),
            cache=options.generation_cache,
            counter=counter,
            seed=int(manifest.get("seed", 0)),
        )
    embedder = bundle_embedder(models["embedder"], options, counter, notes)
    nli = models["nli"]
    if (
        nli.get("model")
        and nli.get("weights_sha256")
        and weights_digest(nli["model"]) != nli["weights_sha256"]
        and not allow
    ):
        raise AssetError("the NLI judge's weights differ from the bundle's", str(nli["model"]))
    judge = build_judge(
        nli["kind"],
        model=nli.get("model"),
        embedder=embedder,
        generator=lambda: generator,
        batch_size=int(nli.get("batch_size", 32)),
        counter=counter,
        device=options.device,
    )
    engine = manifest.get("external_retriever")
    if engine is not None:  # passages come from the engine: no corpus file unless the caller gives one
        corpus = runtime_corpus(manifest, options.corpus, True, notes) if options.corpus else None
        retriever, verdict = external_runtime_retriever(engine, options, corpus, embedder, counter, notes)
    else:
        corpus = runtime_corpus(manifest, options.corpus, options.allow_corpus_mismatch, notes)
        retriever = build_retriever(answering["retriever"], corpus, embedder=embedder, counter=counter)
    tools = Tools(
        generator=generator,
        retriever=retriever,
        corpus=corpus,
        counter=counter,
        judge=judge,
        embedder=embedder(),
        passage_chars=int(answering["passage_chars"]),
        max_new_tokens=int(answering["max_new_tokens"]),
    )
    if engine is not None:
        tools.shared("retriever_check", lambda: verdict)
    return tools
