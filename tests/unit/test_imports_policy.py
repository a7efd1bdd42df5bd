"""The import policy (workbench/core/heavy_imports.py): imports sit at the top of a module unless they would pull a
heavy module; the split modules follow it fully, the rest of the package may only get closer (a ratchet).

Everything is read from source (tests/tools/import_policy.py): nothing of the package is imported.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import pytest

from tests.tools.import_policy import (
    PACKAGE,
    computed_imports,
    function_imports,
    hoist,
    import_probe,
    keep_if_light,
    lazy_importer,
    module_name_strings,
    package_modules,
    unjustified,
)
from workbench.core import heavy_imports
from workbench.core.heavy_imports import (
    HEAVY_MODULES,
    KEPT_INSIDE,
    LAZY_IMPORTERS,
    LIGHT_ENTRY_POINTS,
    PLATFORM_MODULES,
)

FOLLOWING = ("workbench/",)
"""Where every function-level import must be justified: the whole package since issue 44's sweep (cli/, serve/ and
backends/generator/ first, then bench/ and reports/, then every other folder)."""

UNJUSTIFIED_CEILING = 0
"""Function-level imports of the whole package the policy does not justify: 602 when the policy came in (after
hoisting those of cli/, serve/ and backends/generator/), 462 of 963 once bench/ and reports/ were hoisted too, 0 of
514 after the sweep (`python -m tests.tools.import_policy hoist --check`, which refuses a move that grows a light
entry point's import set or closes a loop). A new one fails here and in the whole-package test above."""

MODULE_NAME_STRINGS_CEILING = 0
""""module:Name" strings in the package: 93 when the policy came in (the stage registry 71, the learned-part table of
methods/learned.py 12, recipe.py 5, the method registry 4, evaluate settings 1), 18 once stages and methods became
packages (the learned-part table, recipe.py's moved names, evaluate settings 1), 0 once those became imports (the
learned-part table is methods/learned_kinds.py). They belong at the plugin boundary only (the entry points in
pyproject.toml): the count may only go down."""


def test_every_listed_module_says_why():
    for table in (HEAVY_MODULES, PLATFORM_MODULES, LAZY_IMPORTERS, LIGHT_ENTRY_POINTS, KEPT_INSIDE):
        for name, reason in table.items():
            assert isinstance(reason, str) and len(reason) > 20, name
    dotted = [name for name in (*HEAVY_MODULES, *PLATFORM_MODULES) if "." in name]
    # a dotted name is allowed only for a standard-library submodule (its package itself is light)
    assert all(name.split(".")[0] in sys.stdlib_module_names for name in dotted), dotted
    assert not set(HEAVY_MODULES) & set(PLATFORM_MODULES)


def test_each_lazy_importer_names_a_module_of_the_package():
    modules = package_modules(PACKAGE)
    for key in LAZY_IMPORTERS:
        package = key.removesuffix(".*")
        assert package in modules, key
        assert lazy_importer(package) == key


def test_each_light_entry_point_is_a_module_of_the_package():
    modules = package_modules(PACKAGE)
    assert set(LIGHT_ENTRY_POINTS) <= set(modules)
    assert {"workbench.runtime", "workbench.cli", "workbench.recipe"} <= set(LIGHT_ENTRY_POINTS)


def test_each_import_kept_inside_is_still_there():
    modules = package_modules(PACKAGE)
    present = {
        f"{module} -> {name}"
        for item in function_imports()
        for module in [next(m for m, path in modules.items() if path == item.path)]
        for name in item.modules
    }
    assert set(KEPT_INSIDE) <= present, sorted(set(KEPT_INSIDE) - present)


def test_the_policy_module_imports_nothing():
    tree = ast.parse(Path(heavy_imports.__file__).read_text(encoding="utf-8"))
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]
    assert [ast.unparse(node) for node in imports] == ["from __future__ import annotations"]


def test_the_split_modules_import_inside_functions_only_what_is_heavy():
    found = [item for item in function_imports() if str(item.path.relative_to(PACKAGE.parent)).startswith(FOLLOWING)]
    assert found, "the split modules keep some lazy imports: the check must see them"
    bad = [f"{item.path.relative_to(PACKAGE.parent)}:{item.line}: {item.modules[0]}" for item in unjustified(found)]
    assert bad == [], "hoist these (python -m tests.tools.import_policy hoist FILE):\n" + "\n".join(bad)


def test_unjustified_function_level_imports_only_go_down():
    count = len(unjustified(function_imports()))
    assert count <= UNJUSTIFIED_CEILING, (
        f"{count} unjustified function-level imports, more than the {UNJUSTIFIED_CEILING} allowed: import at the top "
        "of the module, or list a heavy module in workbench/core/heavy_imports.py with its reason"
    )


def test_module_name_strings_only_go_down():
    assert len(module_name_strings()) <= MODULE_NAME_STRINGS_CEILING


# ---------------------------------------------------------------------- the checker on a package of its own
def _package(root: Path, files: dict[str, str]) -> Path:
    package = root / "toypkg"
    for name, text in {"__init__.py": "", **files}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return package


TOY = {
    "light.py": "import json\n\nVALUE = 1\n",
    "numeric.py": "import numpy\n\nVALUE = 2\n",
    "registry.py": 'ENTRIES = {"thing": "toypkg.numeric:VALUE"}\n',
    "plugins.py": "from importlib.metadata import entry_points\n\nFOUND = entry_points\n",
    "user.py": """
        import numpy


        def redundant():
            import numpy  # the module pulls numpy already: nothing saved
            return numpy


        def light_stdlib():
            import json
            return json


        def light_module():
            from toypkg.light import VALUE
            return VALUE
        """,
    "lazy.py": """
        def heavy():
            import torch
            return torch


        def pulls_heavy():
            from toypkg.numeric import VALUE
            return VALUE


        def registry_entries():
            from toypkg.registry import ENTRIES  # its "module:Name" strings count as imports
            return ENTRIES


        def plugins():
            from toypkg.plugins import FOUND  # it imports a standard-library module listed by its dotted name
            return FOUND


        def optional():
            try:
                import yaml
            except ImportError:
                return None
            return yaml


        def platform():
            import fcntl
            return fcntl


        def light():
            import json
            return json
        """,
}


def test_the_checker_justifies_heavy_imports_and_flags_the_rest(tmp_path):
    package = _package(tmp_path, TOY)
    verdicts = {
        (item.path.name, item.modules[0]): item.reason
        for item in function_imports(package)
        if item.path.name in ("user.py", "lazy.py")
    }
    assert verdicts == {
        ("user.py", "numpy"): None,
        ("user.py", "json"): None,
        ("user.py", "toypkg.light"): None,
        ("lazy.py", "torch"): "heavy: torch",
        ("lazy.py", "toypkg.numeric"): "pulls numpy",
        ("lazy.py", "toypkg.registry"): "pulls numpy",
        ("lazy.py", "toypkg.plugins"): "pulls importlib.metadata",
        ("lazy.py", "yaml"): "optional: guarded by except ImportError",
        ("lazy.py", "fcntl"): "platform: fcntl",
        ("lazy.py", "json"): None,
    }


def test_hoist_moves_light_imports_up_and_leaves_a_clashing_one(tmp_path):
    package = _package(
        tmp_path,
        {
            "light.py": "VALUE = 1\n",
            "user.py": '''
                """A module."""

                import os

                json = "a module-level name of its own"


                def reads():
                    """Uses os and a light module."""
                    import os.path

                    from toypkg.light import VALUE

                    return os.path.join("a", str(VALUE))


                def clashes():
                    import json  # `json` is bound otherwise at module level: left where it is

                    return json.dumps(1)


                def only_an_import():
                    import heapq
                ''',
        },
    )
    user = package / "user.py"
    moved, kept = hoist(user, package)
    text = user.read_text(encoding="utf-8")
    tree = ast.parse(text)
    top = [ast.unparse(node) for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    assert moved == 3 and top == ["import os", "from toypkg.light import VALUE", "import heapq", "import os.path"]
    assert len(kept) == 1 and "json bound otherwise" in kept[0]
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    inner = {
        f: [ast.unparse(n) for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)]
        for f, node in functions.items()
    }
    assert inner == {"reads": [], "clashes": ["import json"], "only_an_import": []}
    assert ast.unparse(functions["only_an_import"].body[0]) == "pass"


def test_a_module_a_light_entry_point_imports_keeps_what_would_grow_it(tmp_path, monkeypatch):
    import tests.tools.import_policy as policy

    package = _package(
        tmp_path,
        {
            "entry.py": "import json\n\nimport toypkg.mid\n",
            "mid.py": """
                def spawn():
                    import subprocess  # the entry point does not import it yet
                    return subprocess


                def dumps():
                    import json  # the entry point imports it already
                    return json


                def other():
                    from toypkg.side import VALUE
                    return VALUE
                """,
            "side.py": "import asyncio\n\nVALUE = 1\n",
            "outside.py": """
                def spawn():
                    import subprocess  # no entry point imports this module
                    return subprocess
                """,
        },
    )
    monkeypatch.setattr(policy, "LIGHT_ENTRY_POINTS", {"toypkg.entry": "its import time is a contract"})
    verdicts = {(item.path.name, item.modules[0]): item.reason for item in function_imports(package)}
    assert verdicts == {
        ("mid.py", "subprocess"): "keeps toypkg.entry light: adds subprocess",
        ("mid.py", "json"): None,
        ("mid.py", "toypkg.side"): "keeps toypkg.entry light: adds asyncio and 1 more",
        ("outside.py", "subprocess"): None,
    }


@pytest.mark.parametrize("importer", ["workbench", "workbench.cli", "workbench.cli.recipes"])
def test_the_lazy_importers_cover_the_package_root_and_the_cli(importer):
    assert lazy_importer(importer) is not None
    assert lazy_importer("workbench.runtime") is None


LAZY_TOY = {
    "spec.py": """
        def lazy_exports(package, *modules):
            import importlib

            def __getattr__(name):
                for module in modules:
                    loaded = importlib.import_module(f"{package}.{module}")
                    if hasattr(loaded, name):
                        return getattr(loaded, name)
                raise AttributeError(name)

            return __getattr__
        """,
    "meth/__init__.py": """
        from toypkg.spec import lazy_exports

        SPEC = "light"

        __getattr__ = lazy_exports(__name__, "settings", "impl")


        def build():
            from toypkg.meth.impl import Thing  # the package's implementation: imported on first use

            return Thing
        """,
    "meth/settings.py": "SETTINGS = 1\n",
    "meth/impl.py": "import numpy\n\nThing = numpy\n",
    "table/__init__.py": """
        import importlib

        _EXPORTS = {"Chunk": "chunks"}


        def __getattr__(name):
            return getattr(importlib.import_module(f"toypkg.table.{_EXPORTS[name]}"), name)
        """,
    "table/chunks.py": "import torch\n\nChunk = torch\n",
    "hand/__init__.py": """
        def __getattr__(name):
            from toypkg.hand.heavy import Model

            return Model
        """,
    "hand/heavy.py": "import transformers\n\nModel = transformers\n",
    "user.py": """
        def spec():
            from toypkg.meth import SPEC  # bound by the package itself
            return SPEC


        def settings():
            from toypkg.meth import SETTINGS  # found in the first module looked in
            return SETTINGS


        def implementation():
            from toypkg.meth import Thing  # imports impl through the package's __getattr__
            return Thing


        def table():
            from toypkg.table import Chunk
            return Chunk


        def hand():
            from toypkg.hand import Model
            return Model
        """,
}


def test_the_checker_follows_lazy_package_exports(tmp_path):
    package = _package(tmp_path, LAZY_TOY)
    verdicts = {item.modules[-1]: item.reason for item in function_imports(package) if item.path.name == "user.py"}
    inside = [item.reason for item in function_imports(package) if item.path.parent.name == "meth"]
    assert inside == ["lazy export: toypkg.meth imports toypkg.meth.impl on first use"]
    assert verdicts == {
        "toypkg.meth.SPEC": None,
        "toypkg.meth.SETTINGS": None,
        "toypkg.meth.Thing": "pulls numpy",
        "toypkg.table.Chunk": "pulls torch",
        "toypkg.hand.Model": "pulls transformers",
    }


def test_the_checker_refuses_an_import_that_would_close_a_loop(tmp_path, monkeypatch):
    import tests.tools.import_policy as policy

    package = _package(
        tmp_path,
        {
            "a.py": "from toypkg.b import B\n\nA = 1\n",
            "b.py": """
                B = 2


                def uses_a():
                    from toypkg.a import A  # a imports b at its top: a loop
                    return A
                """,
            "inner/__init__.py": "from toypkg.inner.x import X\n",
            "inner/x.py": """
                X = 1


                def sibling():
                    from toypkg.inner.y import Y  # reaches only the package above x: no loop
                    return Y
                """,
            "inner/y.py": "import toypkg.inner\n\nY = 2\n",
            "c.py": """
                def kept():
                    from toypkg.a import A  # no loop, but listed as kept inside
                    return A
                """,
        },
    )
    monkeypatch.setattr(policy, "KEPT_INSIDE", {"toypkg.c -> toypkg.a": "a reason the source cannot show"})
    verdicts = {(item.path.name, item.modules[0]): item.reason for item in function_imports(package)}
    assert verdicts == {
        ("b.py", "toypkg.a"): "cycle: toypkg.b -> toypkg.a -> toypkg.b",
        ("x.py", "toypkg.inner.y"): None,
        ("c.py", "toypkg.a"): "kept inside: a reason the source cannot show",
    }


def test_the_import_check_keeps_a_hoist_only_where_the_entry_point_stays_light(tmp_path):
    package = _package(
        tmp_path,
        {
            "entry.py": "import toypkg.mid\n",
            "mid.py": "def f():\n    import toypkg.side\n",
            "side.py": "SIDE = 1\n",
            "other.py": "def f():\n    import toypkg.side\n",
            "a.py": "from toypkg.b import B\n\nA = 1\n",
            "b.py": "B = 2\n\n\ndef f():\n    from toypkg.a import A\n",
        },
    )
    hoisted = {
        package / "mid.py": "import toypkg.side\n",  # the entry point would import side
        package / "other.py": "import toypkg.side\n",  # no entry point imports other
        package / "b.py": "from toypkg.a import A\n\nB = 2\n",  # a loop: importing b fails
    }
    originals = {path: path.read_text(encoding="utf-8") for path in hoisted}
    before = import_probe(["toypkg.entry"], package)
    assert "toypkg.mid" in before["toypkg.entry"] and "toypkg.side" not in before["toypkg.entry"]
    kept, refused = keep_if_light(list(hoisted), originals, hoisted, before, package)
    assert kept == [package / "other.py"]
    assert (package / "other.py").read_text(encoding="utf-8") == hoisted[package / "other.py"]
    assert [(package / name).read_text(encoding="utf-8") for name in ("mid.py", "b.py")] == [
        originals[package / "mid.py"],
        originals[package / "b.py"],
    ]
    assert len(refused) == 2
    assert "import toypkg.entry grows by 1 modules (toypkg.side" in refused[0]
    assert "import toypkg.b fails: ImportError" in refused[1]


def test_a_table_of_names_imported_by_computed_name_counts_as_imports(tmp_path, monkeypatch):
    import tests.tools.import_policy as policy

    tree = ast.parse(
        textwrap.dedent(
            """
            PARTS: tuple[str, ...] = ("light", "heavy")
            LABELS = ("not", "modules")


            def gather():
                return load_all(tuple(f"toypkg.parts.{name}" for name in PARTS))


            def labels():
                return [f"label {name}" for name in LABELS]  # not a dotted prefix: no import
            """
        )
    )
    assert computed_imports(tree) == ["toypkg.parts.light", "toypkg.parts.heavy"]
    package = _package(
        tmp_path,
        {
            "parts/__init__.py": "",
            "parts/light.py": "VALUE = 1\n",
            "parts/heavy.py": "def f():\n    import toypkg.spawn\n",
            "spawn.py": "import subprocess\n",
            "table.py": """
                import importlib

                PARTS = ("light", "heavy")
                SPECS = [importlib.import_module(name) for name in [f"toypkg.parts.{part}" for part in PARTS]]
                """,
            "entry.py": "import toypkg.table\n",
        },
    )
    monkeypatch.setattr(policy, "LIGHT_ENTRY_POINTS", {"toypkg.entry": "its import time is a contract"})
    verdicts = {item.path.name: item.reason for item in function_imports(package)}
    # the entry point reaches parts.heavy only through the table: hoisting would make it import subprocess
    assert verdicts == {"heavy.py": "keeps toypkg.entry light: adds subprocess and 1 more"}
