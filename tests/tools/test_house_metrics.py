"""tests/tools/house_metrics.py counts what its docstring says, on a small planted tree (the duplicates tool is not
called here: it may not be installed where the tests run)."""

from __future__ import annotations

import json

from tests.tools import house_metrics

FILES = {
    "__init__.py": "",
    "methods/__init__.py": "",
    "methods/d2rag/__init__.py": "NAME = 'd2rag'\n",  # inside its package: not counted
    "methods/table.py": (
        "from workbench.stages import run\n"
        "OPTIONS = {'d2rag': 1, 'dtr': 2}\n"  # a table naming two methods
        "ONE = ('dtr',)\n"  # one method: not a table of them
        "SPEC = dict(inputs=('collect', 'calibrate'))\n"  # a keyword argument: a declaration, not counted
        "TARGET = 'workbench.methods.table:OPTIONS'\n"
    ),
    "stages/__init__.py": "from workbench.methods import table\n",
    "stages/run.py": "def run():\n    from workbench.methods import table\n    import json\n    return D2RAG\n",
}


def planted(tmp_path):
    for name, text in FILES.items():
        path = tmp_path / "workbench" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_figures_of_a_planted_tree(tmp_path, monkeypatch, capsys):
    root = planted(tmp_path)
    counts = {"pairs": 3, "shape_only": 1, "identical": 2, "files_read": 7, "incomplete": 0}
    monkeypatch.setattr(house_metrics, "duplicate_pairs", lambda package: counts)
    figures = house_metrics.measure(root)
    assert figures["d2rag_files"] == {"count": 2, "files": ["workbench/methods/table.py", "workbench/stages/run.py"]}
    assert figures["largest_modules"][0] == ("workbench/methods/table.py", 5)
    # methods.table imports the stages package and stages.run; both import methods.table back
    assert figures["import_cycles"] == {
        "count": 1,
        "cycles": [["workbench.methods.table", "workbench.stages", "workbench.stages.run"]],
    }
    assert figures["imports"] == {"all": 4, "in_functions": 2}
    assert figures["module_name_strings"] == 1
    places = figures["registration_places"]
    assert places["method"]["where"] == ["workbench/methods/table.py:2"]
    assert places["stage"]["places"] == 0 and places["feature"]["places"] == 0
    assert house_metrics.main([str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["imports"]["in_functions"] == 2
    assert house_metrics.main([str(root)]) == 0
    text = capsys.readouterr().out
    assert "files naming d2rag outside workbench/methods/d2rag/: 2" in text
    assert "imports inside functions: 2 of 4 (50%)" in text and "identical 2, by shape alone 1" in text
    assert "method registration places (literal tables naming 2+ methods): 1 in 1 files" in text
