"""Fixtures for the classifier tests: the synthetic split and one small trained MLP, shared by the session."""

from __future__ import annotations

import pytest

from tests.unit.classify.helpers import FEATURE_NAMES, SMALL_MLP, Split, make_data
from workbench.classify.mlp import MLPModel, fit_mlp


@pytest.fixture(scope="session")
def data() -> Split:
    return make_data()


@pytest.fixture(scope="session")
def mlp_model(data: Split) -> MLPModel:
    return fit_mlp(data.X_train, data.y_train, data.X_val, data.y_val, SMALL_MLP, 0, feature_names=FEATURE_NAMES)
