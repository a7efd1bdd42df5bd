"""Shared fixtures for the method tests: a tiny random generator, a six-passage corpus, BM25 and a rule judge."""

from __future__ import annotations

import pytest

from tests.toy_corpus import corpus_dataset


def make_corpus():
    """A Dataset with the corpus columns the methods read: the six toy passages, one chunk per document."""
    return corpus_dataset()


@pytest.fixture(scope="session")
def method_generator(tiny_lm_long_dir):
    from workbench.backends.generator import Generator

    return Generator(tiny_lm_long_dir, batch_size=16)


def _tools_over(generator, corpus, **extra):
    """Tools with one fresh counter (also handed to the shared generator) and BM25 over ``corpus``."""
    from workbench.backends.cost import CostCounter
    from workbench.backends.retrievers import BM25Retriever
    from workbench.methods.base import Tools

    counter = CostCounter()
    generator.counter = counter
    return Tools(
        generator=generator, retriever=BM25Retriever(corpus, counter=counter), corpus=corpus, counter=counter, **extra
    )


@pytest.fixture
def tools(method_generator):
    """Fresh Tools (own counter) around the shared tiny generator."""
    from workbench.backends.nli import AnswerEquivalenceJudge

    judge = AnswerEquivalenceJudge()
    tools = _tools_over(method_generator, make_corpus(), judge=judge, max_new_tokens=6)
    judge.counter = tools.counter
    return tools


@pytest.fixture(scope="module")
def embedder(tiny_encoder_dir):
    """The tiny sentence encoder (InSemRAG's dense channel)."""
    from workbench.backends.embedder import Embedder

    return Embedder(tiny_encoder_dir)


@pytest.fixture
def ctools(method_generator, embedder):
    """Tools over InSemRAG's chunked test corpus (tests/unit/methods/test_insemrag.py): the tiny generator, BM25,
    the tiny encoder, one fresh counter."""
    from tests.unit.methods.test_insemrag import chunked_corpus

    return _tools_over(method_generator, chunked_corpus(), embedder=embedder, max_new_tokens=4)
