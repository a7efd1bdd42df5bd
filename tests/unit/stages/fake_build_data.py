"""A build_data stage output written directly, for tests of stages that read one (no wiki build)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def write_build_data(out: Path, questions: Sequence[str], passages: Sequence[tuple[str, str, str]]) -> Path:
    """Write ``out/qa`` (a ``test`` split of ``questions``, answer ``x``) and ``out/corpus`` (one chunk per
    ``(doc_id, title, text)`` passage), as the build_data stage lays them out; return ``out``."""
    import datasets

    from tests.toy_corpus import corpus_dataset
    from workbench.data.dataset_store import save_dataset_dict
    from workbench.data.schema import rows_to_dataset, validate_qa_row

    rows = [validate_qa_row({"id": f"q{i}", "question": q, "answers": ["x"]}, "test") for i, q in enumerate(questions)]
    save_dataset_dict(datasets.DatasetDict({"test": rows_to_dataset(rows, "test")}), out / "qa")
    corpus_dataset(passages).save_to_disk(str(out / "corpus"))
    return out
