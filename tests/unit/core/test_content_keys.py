"""Issue 41, item 2: every file a stage reads enters its cache key by content, as datasets always did. Per kind of
path-valued setting — ``evaluate.params`` files, the corpus, an adapter directory as the model, a dataset file, a
model judge's directory, a controller adapter in a method's options — a run, an edit of the file (same size, so
only the contents tell), and the stage re-runs; left alone, it stays cached; a stage that does not read it stays
cached when only the file changes."""

from __future__ import annotations

import dataclasses
import json

import pytest

from workbench.core.hashing import MEMO_MIN_BYTES, path_sha256
from workbench.recipe import load_recipe
from workbench.stages import registry
from workbench.stages.content_keys import PATH_SETTINGS, path_digests
from workbench.stages.registry import StageSpec
from workbench.stages.runner import run_recipe

MODULE = "tests.unit.core.fake_stages"


def _file(tmp_path, name, text):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _params(tmp_path):
    params = _file(tmp_path, "p/no_rag.json", json.dumps({"method": "no_rag", "options": {"k": 3}}))
    return ["evaluate.methods=[no_rag]", f"evaluate.params=[{params}]"]


def _corpus(tmp_path):
    row = {"doc_id": "d1", "title": "T", "text": "A passage about 1 thing."}
    return [f"data.corpus={_file(tmp_path, 'corpus.jsonl', json.dumps(row) + chr(10))}"]


def _adapter(tmp_path):
    _file(tmp_path, "adapter/adapter.json", '{"kind": "lora", "base_model": "smollm2"}')
    _file(tmp_path, "adapter/adapter_model.safetensors", "0123456789")
    return [f"generator.model={tmp_path / 'adapter'}"]


def _dataset(tmp_path):
    row = {"id": "q1", "question": "Who?", "answers": ["X1"]}
    return [f"data.dataset={_file(tmp_path, 'qa.jsonl', json.dumps(row) + chr(10))}"]


def _judge(tmp_path):
    _file(tmp_path, "judge/config.json", '{"hidden": 8}')
    return ["nli.kind=cross_encoder", f"nli.model={tmp_path / 'judge'}"]


def _controller(tmp_path):
    _file(tmp_path, "controller/adapter.json", '{"kind": "lora", "base_model": "smollm2"}')
    return [
        "evaluate.methods=[insemrag]",
        f"evaluate.options={{insemrag: {{controller_model: {tmp_path / 'controller'}}}}}",
    ]


KINDS = {
    # kind: (section the toy stage is keyed on, the stage's name, overrides naming the file, the file edited)
    "evaluate.params": ("evaluate", "evaluate", _params, "p/no_rag.json"),
    "data.corpus": ("data", "produce", _corpus, "corpus.jsonl"),
    "generator.model (adapter directory)": ("generator", "produce", _adapter, "adapter/adapter_model.safetensors"),
    "data.dataset": ("data", "produce", _dataset, "qa.jsonl"),
    "nli.model (judge directory)": ("nli", "produce", _judge, "judge/config.json"),
    "evaluate.options.*.controller_model": ("evaluate", "produce", _controller, "controller/adapter.json"),
}


@pytest.fixture
def toy(monkeypatch):
    """Register a toy stage ``name`` keyed on ``section`` (it counts its runs), and a bystander keyed on none."""

    def register(name: str, section: str) -> None:
        entry = f"{MODULE}:idle_counted"
        spec = StageSpec(name, "toy", entry, sections=(section,))
        if name in registry.STAGES:  # a real stage's name: it keeps its settings and load check, runs the toy
            spec = dataclasses.replace(
                registry.STAGES[name], entry=entry, sections=(section,), inputs=(), optional_inputs=(), uses=()
            )
        monkeypatch.setitem(registry.STAGES, name, spec)
        monkeypatch.setitem(registry.STAGES, "consume", StageSpec("consume", "bystander", entry))

    return register


def _recipe(tmp_path, stage, overrides):
    path = tmp_path / "r.yaml"
    path.write_text(f"name: t\nstages: [{stage}, consume]\ntracker: none\nrun_dir: {tmp_path}/run\n")
    return load_recipe(str(path), overrides)


def _same_size_edit(path):
    """Change the file's last digit, so its bytes change but not its size (a names-and-sizes fingerprint would miss
    it) and it still parses."""
    data = bytearray(path.read_bytes())
    position = max(i for i, byte in enumerate(data) if chr(byte).isdigit())
    data[position] = ord("1") if data[position] != ord("1") else ord("2")
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", KINDS)
def test_editing_a_file_a_stage_reads_re_runs_the_stage(tmp_path, toy, kind):
    section, stage, naming, edited = KINDS[kind]
    toy(stage, section)
    overrides = naming(tmp_path)
    first = run_recipe(_recipe(tmp_path, stage, overrides))
    assert [s.cached for s in first.stages] == [False, False]
    again = run_recipe(_recipe(tmp_path, stage, overrides))
    assert [s.cached for s in again.stages] == [True, True]  # nothing changed: both cached
    _same_size_edit(tmp_path / edited)
    edited_run = run_recipe(_recipe(tmp_path, stage, overrides))
    assert [s.cached for s in edited_run.stages] == [False, True], kind  # the reader re-runs, the bystander not
    assert edited_run.stage(stage).key != first.stage(stage).key


def test_a_stage_keyed_on_the_section_that_does_not_read_the_file_stays_cached(tmp_path, toy):
    # evaluate.params is read by evaluate alone: a study (keyed on the evaluate section for its options) is not re-run
    toy("study", "evaluate")
    overrides = [*_params(tmp_path), "study.methods=[dtr]"]
    run_recipe(_recipe(tmp_path, "study", overrides))
    _same_size_edit(tmp_path / "p" / "no_rag.json")
    assert [s.cached for s in run_recipe(_recipe(tmp_path, "study", overrides)).stages] == [True, True]


def test_names_that_are_not_local_paths_add_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("smollm2", "wiki", "wiki-qa"):  # names, not paths, even beside a directory so named
        (tmp_path / name).mkdir()
    plain = {
        "generator": {"model": "smollm2", "tokenizer": None},
        "embedder": {"model": "minilm"},
        "data": {"dataset": "wiki-qa", "corpus": "wiki"},
        "nli": {"model": "some/hub-id"},
        "evaluate": {"params": [], "options": {"insemrag": {"controller_model": None}}},
    }
    assert path_digests("evaluate", ["generator", "embedder", "data", "nli", "evaluate"], plain) == {}


def test_every_path_setting_names_a_real_setting():
    from workbench.recipe import recipe_schema

    config = load_recipe("quickstart").config
    schema_sections = {f for f in recipe_schema().__dataclass_fields__}
    for setting in PATH_SETTINGS:
        assert setting.section in schema_sections, setting
        head = setting.key.split(".")[1]
        assert hasattr(getattr(config, setting.section), head), setting


def test_a_directory_digest_covers_names_and_contents_and_large_files_are_memoised(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "model"
    _file(tmp_path, "model/config.json", "{}")
    big = root / "weights.bin"
    big.write_bytes(b"\0" * MEMO_MIN_BYTES)
    first = path_sha256(root)
    assert path_sha256(root) == first
    memo = json.loads((tmp_path / "cache" / "hashes" / "files.json").read_text())
    assert list(memo) and all(key.startswith(str(big.resolve())) for key in memo)  # the large file only
    (root / "config.json").rename(root / "other.json")
    assert path_sha256(root) != first  # a renamed file changes the digest
    (root / "other.json").rename(root / "config.json")
    assert path_sha256(root) == first
    big.write_bytes(b"\1" + b"\0" * (MEMO_MIN_BYTES - 1))  # same size, new contents (and a new mtime)
    assert path_sha256(root) != first
