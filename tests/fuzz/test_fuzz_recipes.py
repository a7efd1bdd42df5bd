"""Property: a mutated recipe, or a stray ``key=value`` override, is refused in one line or validated — never a
traceback, never unbounded work. Recipes are validated exactly as ``workbench validate`` does (``load_recipe``).

Three sources of cases: the quickstart recipe's data edited and dumped back to YAML; its text with YAML constructs an
attacker would try spliced in (anchors and aliases, a billion-laughs bomb, tags that name Python objects, merge keys,
huge scalars, control characters); and arbitrary overrides on the built-in recipe.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.common import VALUES, mutate, refused_or
from workbench.core.paths import recipes_dir
from workbench.recipe import load_recipe

TEXT = (recipes_dir() / "quickstart.yaml").read_text(encoding="utf-8")
DATA = yaml.safe_load(TEXT)

LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)
SNIPPETS = [
    "x: &anchor {seed: 1}\ny: *anchor\n",
    LAUGHS,
    "seed: !!python/name:os.system\n",
    "seed: !!python/object/apply:os.system ['true']\n",
    "seed: !custom 3\n",
    "<<: {seed: 3}\n",
    "seed: !!binary aGVsbG8=\n",
    "seed: !!set {a, b}\n",
    "name: " + "x" * 200_000 + "\n",
    "seed: 1e999999\n",
    "seed: 0x" + "f" * 400 + "\n",
    "name: \u2028\u2029\x85\n",
    "name: '\\x00'\n",
    "---\nname: second\n",
    "%YAML 1.1\n---\n",
    "? [a, b]\n: c\n",
    "loop: &l [*l]\n",
    "\t- tab\n",
    "[" * 200 + "]" * 200 + "\n",
    "run_dir: /\n",
    "run_dir: '{name.__class__}'\n",
    "report: {dir: '{0}'}\n",
]


def _load_text(text: str, name: str) -> None:
    with tempfile.TemporaryDirectory(prefix="wb-fuzz-") as holder:
        path = Path(holder) / "fuzzed.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        refused_or(name, lambda: load_recipe(str(path)))


@given(data=st.data())
def test_mutated_recipe_data(data):
    doc = mutate(DATA, data)
    try:
        text = yaml.safe_dump(doc, allow_unicode=True)
    except (yaml.YAMLError, ValueError):
        return  # a value YAML itself cannot write (a lone surrogate): nothing a user could hand over
    _load_text(text, "recipe data")


@given(
    at=st.floats(0, 1),
    snippet=st.sampled_from(SNIPPETS),
    noise=st.text(max_size=40),
    replace_line=st.booleans(),
)
def test_spliced_recipe_text(at, snippet, noise, replace_line):
    lines = TEXT.splitlines(keepends=True)
    index = int(at * len(lines))
    insert = snippet + (noise + "\n" if noise else "")
    lines[index : index + (1 if replace_line else 0)] = [insert]
    _load_text("".join(lines), "recipe text")


KEYS = st.sampled_from(["seed", "name", "run_dir", "answer.limit", "stages", "evaluate.options.dtr.tau", "x.y", ""])


@given(key=st.one_of(KEYS, st.text(max_size=12)), value=st.one_of(st.text(max_size=40), st.sampled_from(SNIPPETS)))
def test_overrides(key, value):
    refused_or("recipe override", lambda: load_recipe("quickstart", [f"{key}={value}"]))


@given(key=st.sampled_from(sorted(DATA)), value=VALUES)
def test_typed_values_for_every_top_level_key(key, value):
    doc = dict(DATA)
    doc[key] = value
    try:
        text = yaml.safe_dump(doc, allow_unicode=True)
    except (yaml.YAMLError, ValueError):
        return
    _load_text(text, "recipe data")
