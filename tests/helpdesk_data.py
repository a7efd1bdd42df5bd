"""A made-up help-desk dataset and corpus in a user's own format (foreign column names, extra columns, a split column):
what the custom recipe's tests read through data.fields / data.corpus_fields / data.split_column.

Half the questions ask for a company fact only the corpus holds (an office's door code, a team's contact), half ask
general knowledge a small model may know closed-book (a country's capital), so closed-book correctness has both classes
with a real model and retrieval helps one kind, hurts or leaves the other.
"""

from __future__ import annotations

import json
from pathlib import Path

OFFICES = ["Oslo", "Lisbon", "Dublin", "Krakow", "Tallinn", "Porto", "Bergen", "Ghent", "Leeds", "Turin", "Basel"]
CAPITALS = [
    ("France", "Paris"),
    ("Italy", "Rome"),
    ("Japan", "Tokyo"),
    ("Germany", "Berlin"),
    ("Spain", "Madrid"),
    ("England", "London"),
    ("Russia", "Moscow"),
    ("Egypt", "Cairo"),
    ("Greece", "Athens"),
    ("China", "Beijing"),
    ("Ireland", "Dublin"),
]


def door_code(i: int) -> str:
    """The made-up door code of office ``i``."""
    return str(4100 + 37 * i)


def corpus_rows(per_kind: int = len(OFFICES)) -> list[dict]:
    """The corpus in the user's format (``per_kind`` offices and countries): ``id`` (an integer), ``name``, ``body``,
    ``category`` and an ``updated`` column the corpus schema has no field for."""
    rows = [
        {
            "id": 100 + i,
            "name": f"{office} office access",
            "body": f"The door code of the {office} office is {door_code(i)}. Visitors sign in at the front desk.",
            "category": "facilities",
            "updated": "2026-01-0" + str(1 + i % 9),
        }
        for i, office in enumerate(OFFICES[:per_kind])
    ]
    rows += [
        {
            "id": 200 + i,
            "name": country,
            "body": f"{capital} is the capital of {country}.",
            "category": "geography",
            "updated": "2025-12-01",
        }
        for i, (country, capital) in enumerate(CAPITALS[:per_kind])
    ]
    return rows


def question_rows(per_kind: int = len(OFFICES)) -> list[dict]:
    """The questions in the user's format: ``ticket_id`` (an integer), ``subject``, ``resolution`` (one string),
    ``gold_doc`` (a corpus id), ``kind`` (company or general), ``split`` (dev / holdout: mapped to calib / test), and a
    ``priority`` column the QA schema has no field for; ``per_kind`` questions of each kind, every third a holdout
    one."""
    rows = []
    for i, office in enumerate(OFFICES[:per_kind]):
        rows.append(
            {
                "ticket_id": 1000 + i,
                "subject": f"What is the door code of the {office} office?",
                "resolution": door_code(i),
                "gold_doc": str(100 + i),
                "kind": "company",
                "split": "holdout" if i % 3 == 2 else "dev",
                "priority": "high",
            }
        )
    for i, (country, capital) in enumerate(CAPITALS[:per_kind]):
        rows.append(
            {
                "ticket_id": 2000 + i,
                "subject": f"What is the capital of {country}?",
                "resolution": capital,
                "gold_doc": str(200 + i),
                "kind": "general",
                "split": "holdout" if i % 3 == 2 else "dev",
                "priority": "low",
            }
        )
    return rows


FIELDS = "{id: ticket_id, question: subject, answers: resolution, gold_passages: gold_doc, template: kind}"
CORPUS_FIELDS = "{doc_id: id, title: name, text: body, topic: category}"


def write_helpdesk(directory: Path, per_kind: int = len(OFFICES)) -> tuple[Path, Path]:
    """Write ``questions.jsonl`` and ``corpus.jsonl`` (``per_kind`` questions and documents of each kind) into
    ``directory``; return their paths."""
    questions, corpus = directory / "questions.jsonl", directory / "corpus.jsonl"
    questions.write_text("".join(json.dumps(row) + "\n" for row in question_rows(per_kind)), encoding="utf-8")
    corpus.write_text("".join(json.dumps(row) + "\n" for row in corpus_rows(per_kind)), encoding="utf-8")
    return questions, corpus


def helpdesk_overrides(questions: Path, corpus: Path) -> list[str]:
    """The custom recipe's data overrides that read the help-desk files: their paths, both field mappings and the
    split column with its value names."""
    return [
        f"data.dataset={questions}",
        f"data.corpus={corpus}",
        f"data.fields={FIELDS}",
        f"data.corpus_fields={CORPUS_FIELDS}",
        "data.split_column=split",
        "data.split_names={dev: calib, holdout: test}",
    ]
