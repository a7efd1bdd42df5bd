"""Verbs that score existing answers: ``score`` (features, and with a bundle P(correct) and decisions, for records
of question and answer, without regenerating the answer) and ``score-merge`` (join the shards of one input)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from workbench.cli.answering import ApiKeyEnvOption, ServedModelOption, load_runtime
from workbench.cli.output import VerboseOption, silence_third_party
from workbench.core.errors import ConfigError

_JUDGED = {"nli_probs", "nli_index_greedy", "nli_index_samples", "nli_texts", "paraphrase_answers"}
_JUDGED |= {"paraphrase_nli_probs", "dense_answers", "dense_nli_probs"}
_EMBEDDED = {"token_relevance", "sts_samples"}


def score_command(
    input_file: Annotated[
        Path, typer.Argument(help="Records: .jsonl, .parquet or an HF dataset folder (docs/score.md).")
    ],
    out: Annotated[Path, typer.Option("--out", help="Output directory (resumed when it holds checkpoints).")],
    bundle: Annotated[
        Path | None,
        typer.Option("--bundle", help="Score with this bundle's model and settings; add P(correct) and decisions."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model", help="Without --bundle: the generator (a local model directory; with --base-url its name there)."
        ),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer", help="Without --bundle, with --base-url: the served model's tokenizer (default: --model)."
        ),
    ] = None,
    features: Annotated[
        str | None,
        typer.Option("--features", help="Comma-separated features (default with --bundle: the ones it decides on)."),
    ] = None,
    methods: Annotated[
        str | None,
        typer.Option(
            "--methods",
            help="With --bundle: comma-separated methods whose decisions to give (default all; InSemRAG's controller "
            "costs an LM call per record).",
        ),
    ] = None,
    nli: Annotated[str, typer.Option("--nli", help="Without --bundle: the NLI judge kind.")] = "answer_equivalence",
    embedder: Annotated[
        str | None, typer.Option("--embedder", help="Without --bundle: the embedder (when a feature needs one).")
    ] = None,
    samples: Annotated[int, typer.Option("--samples", help="Without --bundle: samples generated per question.")] = 5,
    max_new_tokens: Annotated[
        int, typer.Option("--max-new-tokens", help="Without --bundle: the answer prompt's token budget.")
    ] = 16,
    batch: Annotated[int, typer.Option("--batch", help="Records per checkpointed chunk.")] = 8,
    shard: Annotated[
        str, typer.Option("--shard", help="'i/N': score only the rows whose position mod N == i.")
    ] = "0/1",
    device: Annotated[str | None, typer.Option("--device", help="cpu, cuda, cuda:N or auto.")] = None,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="With --bundle: runtime override key=value (docs/bundles.md).")
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            help="A model served at this OpenAI-compatible URL (…/v1), teacher-forced through echo: the bundle's "
            "(its probe answers must match, docs/served-models.md) or, without --bundle, --model's.",
        ),
    ] = None,
    served_model: ServedModelOption = None,
    api_key_env: ApiKeyEnvOption = None,
    verbose: VerboseOption = False,
) -> None:
    """Score existing answers: each record's features by teacher-forcing its answer (samples generated only when the
    records give none), with a bundle's model, a local --model, or --model served at --base-url (echo); with
    --bundle, P(correct) and each method's decision. Writes OUT/scores.jsonl."""
    silence_third_party(verbose)
    from workbench.scoring.bundle import bundle_scorer
    from workbench.scoring.records import read_records
    from workbench.scoring.run import run_fingerprint, score_file

    records = read_records(input_file)  # every row checked before anything is built or written
    chosen = tuple(f.strip() for f in (features or "").split(",") if f.strip())
    if bundle is not None:
        served = {"base_url": base_url, "served_model": served_model, "api_key_env": api_key_env}
        runtime = load_runtime(bundle, overrides, None, device, **served)
        picked = [m.strip() for m in methods.split(",") if m.strip()] if methods else None
        scorer, settings, ref = bundle_scorer(runtime, chosen, batch, shard, picked)
    else:
        if model is None:
            raise ConfigError(
                "give --model (a local model directory, or with --base-url its name there) or --bundle", "score"
            )
        if overrides or served_model is not None or methods is not None:
            raise ConfigError("--set, --served-model and --methods apply to a bundle: give --bundle too", "score")
        if base_url is None and (tokenizer is not None or api_key_env is not None):
            raise ConfigError("--tokenizer and --api-key-env apply to a served model: give --base-url too", "score")
        settings = _model_settings(chosen, nli, embedder, samples, max_new_tokens, batch, shard)
        server = {"base_url": base_url, "tokenizer": tokenizer or model, "api_key_env": api_key_env}
        scorer = _model_scorer(model, settings.features, nli, embedder, device, server if base_url else None)
        ref = model if base_url is None else f"{model} at {base_url}"
    settings.check()
    try:
        summary = score_file(
            records, out, settings, scorer, run_fingerprint(input_file, settings, ref, str(bundle) if bundle else None)
        )
    finally:
        if bundle is None and base_url is not None:
            scorer.generator.close()  # the served generator's HTTP client (a bundle's runtime keeps its own)
    nans = ", ".join(f"{name} {count}" for name, count in summary["nan_count"].items() if count)
    typer.echo(f"{summary['rows']} records scored → {out / 'scores.jsonl'}" + (f" (NaN: {nans})" if nans else ""))


def _model_settings(
    chosen: tuple[str, ...],
    nli: str,
    embedder: str | None,
    samples: int,
    max_new_tokens: int,
    batch: int,
    shard: str,
) -> Any:
    """The settings of a run without a bundle: the named features (there is no default) and the command line's
    sampling settings; a feature whose judge or embedder is not given is refused before anything is built."""
    from workbench.scoring.run import ScoreSettings
    from workbench.uncertainty.calculators import StatSettings
    from workbench.uncertainty.features import required_stats

    if not chosen:
        raise ConfigError("name the features to compute (without --bundle there is no default)", "--features")
    settings = ScoreSettings(chosen, StatSettings(samples=samples, max_new_tokens=max_new_tokens), batch, shard)
    settings.check()
    needed = required_stats(chosen)
    if embedder is None and (needed & _EMBEDDED or (needed & _JUDGED and nli == "answer_equivalence")):
        raise ConfigError("a selected feature (or its answer_equivalence NLI judge) needs --embedder", "--features")
    return settings


def _model_scorer(
    model: str,
    features: tuple[str, ...],
    nli: str,
    embedder: str | None,
    device: str | None,
    served: dict[str, str | None] | None,
) -> Any:
    """The scorer of a generator without a bundle — a local model directory, or (``served``: its ``base_url``,
    ``tokenizer`` and ``api_key_env``) the model named ``model`` at an OpenAI-compatible server, probed for echo —
    with the judge and embedder built only when a feature needs them."""
    from workbench.backends.factory import build_embedder, build_generator, build_judge, build_served_generator
    from workbench.scoring.run import Scorer
    from workbench.uncertainty.features import required_stats

    needed = required_stats(features)
    shared: dict[str, Any] = {}

    def embedded() -> Any:
        if "embedder" not in shared:
            shared["embedder"] = build_embedder(embedder, device=device or "cpu")
        return shared["embedder"]

    if served is None:
        generator = build_generator(model, device=device or "cpu", max_context=None)
    else:
        generator = build_served_generator(model=model, **served)
    judge = build_judge(nli, embedder=embedded, generator=lambda: generator) if needed & _JUDGED else None
    return Scorer(generator, judge=judge, embedder=embedded() if needed & _EMBEDDED else None)


def score_merge_command(
    out: Annotated[Path, typer.Argument(help="The merged output directory (must not exist).")],
    shards: Annotated[list[Path], typer.Argument(help="The shards' --out directories.")],
) -> None:
    """Join the outputs of `workbench score --shard i/N` runs of one input into OUT (rows in input order)."""
    from workbench.scoring.run import merge_scores

    summary = merge_scores(shards, out)
    typer.echo(f"{summary['rows']} records from {len(shards)} shard(s) → {out / 'scores.jsonl'}")
