"""A refused runtime override is named where the user gave it (issue 42): ``overrides.methods.<method>.<key>`` in
Python, and on the command line the option as typed — ``--set methods.d2rag.tau``, ``--device`` — never the recipe
key ``evaluate.options.d2rag.tau`` the method registry uses. Loading checks the overrides before any model is
built, so the committed fixture bundle needs no model here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from workbench.core.errors import ConfigError

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "bundles" / "tiny" / "1.0.0"
KNOWN = "known: alpha_neg, alpha_pos, dynamic, features, k, max_new_tokens"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--set", "methods.d2rag.tau=0.3"], f"error: --set methods.d2rag.tau: unknown option(s) ['tau'] ({KNOWN}"),
        (["--set", "methods.d2rag.k=-1"], "error: --set methods.d2rag.k: k must be an integer >= 1, got -1"),
        (["--set", "methods.d2rag=3"], "error: --set methods.d2rag: expects a mapping of option: value, got int"),
        (["--set", "methods.dtr.k=2"], "error: --set methods.dtr: options for method(s) ['dtr'] that are not in"),
        (["--set", "batch_size=0"], "error: --set batch_size: batch_size must be >= 1, got 0"),
        (["--set", "batch_size=many"], "error: --set batch_size: 'batch_size' expects int | null, got 'many'"),
        (["--set", "methodz.x=1"], "error: --set methodz: unknown key 'methodz'"),
        (["--on-ood", "sometimes"], "error: --on-ood: 'on_ood' expects 'flag' | 'retrieve' | 'refuse'"),
        (["--set", "on_ood=sometimes"], "error: --set on_ood: 'on_ood' expects 'flag' | 'retrieve' | 'refuse'"),
        (["--classifier", "tree"], "error: --classifier: 'classifier' expects 'numpy' | 'onnx', got 'tree'"),
    ],
)
def test_infer_names_the_option_the_user_typed(args, expected, monkeypatch, capsys):
    from workbench import cli

    monkeypatch.setattr(sys, "argv", ["workbench", "infer", "--bundle", str(FIXTURE), *args, "Who wrote Hamlet?"])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(expected), err
    assert "evaluate.options" not in err[0] and "overrides" not in err[0]


def test_the_python_api_names_the_override_key():
    from workbench.runtime import load_bundle

    with pytest.raises(ConfigError) as refused:
        load_bundle(FIXTURE, {"methods": {"d2rag": {"tau": 0.3}}})
    assert refused.value.where == "overrides.methods.d2rag.tau"
    with pytest.raises(ConfigError) as refused:
        load_bundle(FIXTURE, {"methods": {"d2rag": 3}})  # was a TypeError traceback
    assert refused.value.where == "overrides.methods.d2rag"
    assert load_bundle(FIXTURE, {"methods": {"d2rag": {"k": 3}}}).method_options["d2rag"]["k"] == 3
