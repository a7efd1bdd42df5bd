"""The answering modes' titles in reports, shared by the ``answer`` and ``tune_reader`` stages' sections."""

from __future__ import annotations

MODE_TITLES = {"closed_book": "closed-book", "rag": "RAG", "gold": "gold passage"}
"""Answering mode (as the stages record it) → its title in a report's tables and plots."""
