"""Run directories never destroy what they did not make (issue 25, item 5).

A non-empty directory no run made is refused (``--adopt-run-dir`` adopts it when that overwrites nothing); ``/``, the
home directory and a git checkout's root are refused always; user files next to a run's own survive every stage,
``--force`` included; a report directory holding anything but a report is refused before any stage runs; what a
killed run left behind is removed by the next one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.core.atomic import atomic_directory
from workbench.core.errors import ConfigError
from workbench.core.run_dirs import RUN_MARKER, check_run_dir, is_run_dir, remove_stale_temporaries
from workbench.recipe import load_recipe
from workbench.stages import registry
from workbench.stages.registry import StageSpec
from workbench.stages.runner import run_recipe

FAKES = "tests.unit.core.fake_stages"
HERE = "tests.unit.core.test_run_dir_safety"
REPO = Path(__file__).resolve().parents[3]


# ------------------------------------------------------------------------------------------------ fake stages
def fake_report(ctx):
    """A report stage as the real ones write theirs: the report directory replaced as a whole."""
    with atomic_directory(ctx.config.resolved_report_dir) as tmp:
        (tmp / "report.md").write_text(f"# {ctx.config.name}\n")
        (tmp / "plot.png").write_bytes(b"\x89PNG")
    return {"report": str(ctx.config.resolved_report_dir / "report.md")}


def fake_study(ctx):
    """A study that finishes: one file of trials."""
    (ctx.out_dir / "trials.json").write_text("[]")
    return {"trials": 0}


def summarised_study(ctx):
    """A study that finishes with the summary ``workbench study`` prints."""
    scores = {"val": {"contains": 0.5}, "test": {"contains": 0.25}}
    summary = {
        "objective": "contains",
        "storage": "none",
        "methods": {"dtr": {"params": {"tau": 1.5}, "scores": {"best": scores, "defaults": scores}, "trials": []}},
    }
    (ctx.out_dir / "summary.json").write_text(json.dumps(summary))
    return {"trials": 0}


def summarised_evaluate(ctx):
    """An evaluation that finishes with the summary ``workbench evaluate`` prints."""
    row = dict.fromkeys(("em", "f1", "contains", "retrieval_rate", "lm_calls", "tokens", "latency_p50"), 0.5)
    (ctx.out_dir / "summary.json").write_text(json.dumps({"methods": {"dtr": row}}))
    return {}


def killed_study(ctx):
    """A study killed (SIGKILL) half-way through writing its output."""
    (ctx.out_dir / "trials.json").write_text("[{")
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.fixture
def stages(monkeypatch):
    """produce → consume (tests/unit/core/fake_stages.py), a report stage and a study stage."""
    specs = (
        StageSpec("produce", "p", f"{FAKES}:produce", sections=("answer",)),
        StageSpec("consume", "c", f"{FAKES}:consume", sections=("retrieval",), inputs=("produce",)),
        StageSpec("spread", "s", f"{FAKES}:spread", sections=("retrieval",), inputs=("produce",), multi_process=True),
        StageSpec("report_fake", "r", f"{HERE}:fake_report", sections=("report",), cacheable=False),
        # the fake study keeps the real one's section (the recipes here set it), not its load check
        StageSpec(
            "study",
            "t",
            f"{HERE}:fake_study",
            sections=("seper_eval",),
            inputs=("produce",),
            settings=registry.STAGES["study"].settings,
        ),
    )
    for spec in specs:
        monkeypatch.setitem(registry.STAGES, spec.name, spec)
    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(name, raising=False)


def recipe(tmp_path: Path, run_dir: Path | str, *overrides: str):
    """A recipe of the fake stages writing into ``run_dir`` (report into ``tmp_path/report``)."""
    path = tmp_path / "r.yaml"
    path.write_text(
        "name: t\nstages: [produce, consume]\ntracker: none\n"
        f"run_dir: '{run_dir}'\nreport: {{dir: '{tmp_path}/report'}}\nanswer:\n  limit: 4\n"
        "study:\n  methods: [dtr]\n"  # the study stage is a fake: no d2rag, which needs classify before it
    )
    return load_recipe(str(path), list(overrides))


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file below ``root``: its bytes and modification time."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def plant(root: Path, files: dict[str, str]) -> dict[str, str]:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return files


def assert_one_line(info: pytest.ExceptionInfo, *parts: str) -> None:
    message = str(info.value)
    assert "\n" not in message
    for part in parts:
        assert part in message, message


# ------------------------------------------------------------------------------------- a directory no run made
USER_RUN_LOOKALIKE = {
    "config.yaml": "my: own config\n",
    "manifest.json": '{"mine": true}\n',
    "stages/produce/keep.txt": "precious",
    "notes.txt": "notes",
}


def test_a_directory_no_run_made_is_refused_and_left_untouched(tmp_path, stages):
    user = tmp_path / "mine"
    plant(user, USER_RUN_LOOKALIKE)
    before = snapshot(user)
    with pytest.raises(ConfigError) as info:
        run_recipe(recipe(tmp_path, user))
    assert_one_line(info, f"run_dir {user}", "no workbench run made it", "--adopt-run-dir")
    assert snapshot(user) == before and not (user / ".lock").exists()
    assert not (tmp_path / "calls-produce.txt").exists()


def test_adopting_refuses_a_directory_holding_what_a_run_writes(tmp_path, stages):
    user = tmp_path / "mine"
    plant(user, USER_RUN_LOOKALIKE)
    before = snapshot(user)
    with pytest.raises(ConfigError) as info:
        run_recipe(recipe(tmp_path, user), adopt_run_dir=True)
    assert_one_line(info, "cannot be adopted", "config.yaml, manifest.json, stages")
    assert snapshot(user) == before and not (user / RUN_MARKER).exists()


def test_an_adopted_directory_keeps_its_files_and_stays_a_run(tmp_path, stages):
    user = tmp_path / "mine"
    files = plant(user, {"notes.txt": "notes", "data/table.csv": "a,b\n1,2\n"})
    run_recipe(recipe(tmp_path, user), adopt_run_dir=True)
    marker = json.loads((user / RUN_MARKER).read_text())
    assert marker["format"] == "workbench-run" and marker["recipe"] == "t"
    again = run_recipe(recipe(tmp_path, user))  # the marker makes it a run: no flag needed any more
    assert [s.cached for s in again.stages] == [True, True]
    assert all((user / name).read_text() == text for name, text in files.items())


def test_a_file_as_run_dir_is_refused(tmp_path, stages):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        run_recipe(recipe(tmp_path, tmp_path / "file"))


# ------------------------------------------------------------------------------------ never a run directory
def listing(path: Path) -> set[str]:
    return set(os.listdir(path))


@pytest.mark.parametrize("adopt", [False, True])
def test_the_filesystem_root_is_refused(tmp_path, stages, adopt):
    before = listing("/")
    with pytest.raises(ConfigError) as info:
        run_recipe(recipe(tmp_path, "/"), adopt_run_dir=adopt)
    assert_one_line(info, "run_dir /: is the filesystem root")
    assert listing("/") == before  # no /.lock, /config.yaml, /logs, /stages


@pytest.mark.parametrize("adopt", [False, True])
def test_the_home_directory_is_refused_even_empty(tmp_path, stages, monkeypatch, adopt):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(ConfigError) as info:
        run_recipe(recipe(tmp_path, home), adopt_run_dir=adopt)
    assert_one_line(info, "is the home directory")
    assert listing(home) == set()


def test_a_directory_above_the_home_directory_is_refused_even_adopted(tmp_path, stages, monkeypatch):
    plant(tmp_path / "users" / "me", {"notes.txt": "notes"})
    monkeypatch.setenv("HOME", str(tmp_path / "users" / "me"))
    with pytest.raises(ConfigError, match="a directory above the home directory"):
        run_recipe(recipe(tmp_path, tmp_path / "users"), adopt_run_dir=True)
    assert listing(tmp_path / "users") == {"me"}


@pytest.mark.parametrize("git", ["directory", "file"])
def test_a_git_checkouts_root_is_refused_even_adopted(tmp_path, stages, git):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    if git == "directory":
        (checkout / ".git").mkdir()
    else:  # a worktree or submodule
        (checkout / ".git").write_text("gitdir: /elsewhere\n")
    with pytest.raises(ConfigError, match="the root of a git checkout"):
        run_recipe(recipe(tmp_path, checkout), adopt_run_dir=True)
    assert listing(checkout) == {".git"}


def test_a_link_to_the_root_is_the_root(tmp_path):
    (tmp_path / "link").symlink_to("/")
    with pytest.raises(ConfigError, match="the filesystem root"):
        check_run_dir(tmp_path / "link", adopt=True)


# ------------------------------------------------------------------------------ user files next to a run's own
def test_user_files_survive_every_stage_and_force(tmp_path, stages):
    run = tmp_path / "run"
    stage_list = "stages=[produce,consume,study,report_fake]"
    run_recipe(recipe(tmp_path, run, stage_list))
    files = plant(
        run,
        {
            "notes.txt": "notes",
            "config.yaml.orig": "a copy",
            "logs/mine.txt": "my log",
            "scratch/mine/x.txt": "scratch of mine",
            "stages/README": "what these are",
            "stages/produce-old/value.txt": "3",
            "stages/.produce.backup/value.txt": "2",  # not the pattern of a temporary directory
            "stages/.produce.old-pid/value.txt": "1",  # nor this
            "stages/.mystage.abcdefgh.tmp/x": "no stage of that name",
            "studies/mine.db": "mine",
        },
    )
    elsewhere = plant(tmp_path / "elsewhere", {"keep.txt": "kept"})
    (run / "stages" / ".study.k2j9x0ab.tmp").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    for overrides, force in (
        ((), None),  # all cached
        ((), ["produce", "consume", "study", "report_fake"]),
        (("answer.limit=5", "retrieval.k=3"), None),  # every stage recomputed
    ):
        result = run_recipe(recipe(tmp_path, run, stage_list, *overrides), force=force)
        assert [s.name for s in result.stages] == ["produce", "consume", "study", "report_fake"]
        assert all((run / name).read_text() == text for name, text in files.items())
        assert (run / "stages" / ".study.k2j9x0ab.tmp" / "keep.txt").read_text() == elsewhere["keep.txt"]
    assert (run / "stages" / "consume" / "double.txt").read_text() == "10"
    assert (tmp_path / "report" / "report.md").read_text() == "# t\n"


def test_other_rank_refuses_what_rank_zero_refuses_and_writes_nothing(tmp_path, stages, monkeypatch):
    user = tmp_path / "mine"
    plant(user, {"notes.txt": "notes"})
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigError, match="no workbench run made it"):
        run_recipe(recipe(tmp_path, user, "stages=[produce,spread]"))
    assert listing(user) == {"notes.txt"}


# ---------------------------------------------------------------------------------- runs made before the marker
def test_a_run_made_before_the_marker_is_recognised_and_marked(tmp_path, stages):
    run = tmp_path / "run"
    run_recipe(recipe(tmp_path, run))
    (run / RUN_MARKER).unlink()  # as an earlier workbench left it
    again = run_recipe(recipe(tmp_path, run))
    assert [s.cached for s in again.stages] == [True, True]
    assert (run / RUN_MARKER).is_file()


def test_only_the_layout_a_run_wrote_passes_for_an_earlier_run(tmp_path):
    run = tmp_path / "run"
    plant(run, {"config.yaml": "# resolved from r.yaml\nname: t\n"})
    assert not is_run_dir(run)  # a header alone is not enough
    plant(run, {"manifest.json": json.dumps({"stages": {}})})
    assert is_run_dir(run)
    plant(run, {"config.yaml": "# my notes\n"})
    assert not is_run_dir(run)


# ------------------------------------------------------------------------------------------ the report directory
def test_a_report_directory_with_user_files_is_refused_before_any_stage(tmp_path, stages):
    report = tmp_path / "report"
    plant(report, {"report.md": "mine", "thesis.tex": "months of work"})
    before = snapshot(report)
    with pytest.raises(ConfigError) as info:
        run_recipe(recipe(tmp_path, tmp_path / "run", "stages=[produce,report_fake]"))
    assert_one_line(info, f"report.dir {report}", "thesis.tex", "replaces its directory as a whole")
    assert snapshot(report) == before
    assert not (tmp_path / "run").exists() and not (tmp_path / "calls-produce.txt").exists()


def test_a_report_directory_holding_a_report_is_replaced(tmp_path, stages):
    plant(tmp_path / "report", {"report.md": "old", "old-plot.png": "png"})
    run_recipe(recipe(tmp_path, tmp_path / "run", "stages=[produce,report_fake]"))
    assert listing(tmp_path / "report") == {"report.md", "plot.png"}


@pytest.mark.parametrize("report_dir", ["{run}", "{tmp}", "{run}/stages", "{run}/stages/produce"])
def test_a_report_directory_over_the_run_or_its_files_is_refused(tmp_path, stages, report_dir):
    run = tmp_path / "run"
    run_recipe(recipe(tmp_path, run))
    where = report_dir.format(run=run, tmp=tmp_path)
    loaded = recipe(tmp_path, run, "stages=[produce,report_fake]", f"report.dir={where}")
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError, match=r"holds the run directory|inside the run's own files"):
        run_recipe(loaded)
    assert snapshot(tmp_path) == before


def test_a_report_directory_inside_the_run_directory_but_apart_from_its_files_is_fine(tmp_path, stages):
    run = tmp_path / "run"
    run_recipe(recipe(tmp_path, run, "stages=[produce,report_fake]", f"report.dir={run}/report"))
    assert (run / "report" / "report.md").is_file()


# ------------------------------------------------------------------------------------ what a killed run left
def test_a_killed_studys_temporary_directory_is_removed_by_the_next_run(tmp_path, stages):
    run = tmp_path / "run"
    run_recipe(recipe(tmp_path, run, "stages=[produce]"))
    script = (
        "import sys\n"
        "from workbench.stages import registry\n"
        "from workbench.stages.registry import StageSpec\n"
        "from workbench.stages.runner import run_recipe\n"
        "from tests.unit.core.test_run_dir_safety import recipe\n"
        "from pathlib import Path\n"
        f"registry.STAGES['produce'] = StageSpec('produce', 'p', '{FAKES}:produce', sections=('answer',))\n"
        f"registry.STAGES['study'] = StageSpec('study', 't', '{HERE}:killed_study', sections=('seper_eval',),"
        " inputs=('produce',), settings=registry.STAGES['study'].settings)\n"
        "run_recipe(recipe(Path(sys.argv[1]), Path(sys.argv[2]), 'stages=[produce,study]'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    killed = subprocess.run([sys.executable, "-c", script, str(tmp_path), str(run)], cwd=REPO, env=env, timeout=300)
    assert killed.returncode == -signal.SIGKILL
    stages_dir = run / "stages"
    left = [p.name for p in stages_dir.iterdir() if p.name.startswith(".study.")]
    assert len(left) == 1 and left[0].endswith(".tmp")  # what the issue saw: .study.*.tmp left behind
    lookalikes = plant(stages_dir, {".study.tmp/x": "x", ".study.notes": "n", "study-backup/x": "x"})
    run_recipe(recipe(tmp_path, run, "stages=[produce,study]"))
    assert not (stages_dir / left[0]).exists()
    assert (stages_dir / "study" / "trials.json").read_text() == "[]"
    assert all((stages_dir / name).read_text() == text for name, text in lookalikes.items())
    assert "left by a run that was killed" in (run / "logs" / "run.log").read_text()


def test_stale_temporaries_are_only_the_exact_patterns(tmp_path):
    run = tmp_path / "run"
    stale = [".config.yaml.abcd1234.tmp", ".manifest.json.a_b_c_d_.tmp", f".{RUN_MARKER}.zz99zz99.tmp"]
    plant(run, {name: "" for name in stale})
    plant(run, {".config.yaml.tmp": "", ".notes.abcd1234.tmp": "", "stages/.collect.old-77/x": ""})
    plant(run, {"stages/.collect.old-x/x": "", "stages/.collect.abcd123.tmp/x": "", "stages/collect.abcd1234.tmp": ""})
    removed = remove_stale_temporaries(run, frozenset({"collect"}))
    assert sorted(p.name for p in removed) == sorted([*stale, ".collect.old-77"])
    assert (run / ".notes.abcd1234.tmp").exists() and (run / "stages" / ".collect.abcd123.tmp").exists()


# ------------------------------------------------------------------------------------------------ placeholders
@pytest.mark.parametrize("template", ["{foo}", "runs/{", "{name.__class__}", "{0}", "{name!r}", "{}"])
@pytest.mark.parametrize("key", ["run_dir", "report.dir"])
def test_a_directory_placeholder_other_than_name_is_one_line_at_load(tmp_path, template, key):
    path = tmp_path / "r.yaml"
    section = f"run_dir: '{template}'\n" if key == "run_dir" else f"report:\n  dir: '{template}'\n"
    path.write_text("name: t\nstages: [build_data]\n" + section)
    with pytest.raises(ConfigError) as info:
        load_recipe(str(path))
    assert_one_line(info, f"{path}:", f"{key}: ", "the only placeholder is {name}")


def test_braces_and_the_name_expand(tmp_path):
    loaded = load_recipe("quickstart", ["run_dir=runs/{name}-{{x}}"])
    assert loaded.config.resolved_run_dir == Path("runs/quickstart-{x}")


# ------------------------------------------------------------------------------------------------------- CLI
def wb(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workbench", "-q", *args], capture_output=True, text=True, cwd=REPO, timeout=300
    )


def assert_one_line_error(out: subprocess.CompletedProcess, *parts: str) -> None:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert all(part in lines[0] for part in parts), out.stderr


@pytest.fixture
def local_recipe(tmp_path) -> Path:
    """build_data on a one-question local file: cheap, and the run directory is checked before it runs."""
    (tmp_path / "qa.jsonl").write_text(json.dumps({"id": "q0", "question": "Who?", "answers": ["Me"]}) + "\n")
    doc = {"doc_id": "d", "title": "D", "text": "Me."}
    (tmp_path / "corpus.jsonl").write_text(json.dumps(doc) + "\n")
    path = tmp_path / "local.yaml"
    path.write_text(
        "name: local\nstages: [build_data]\ntracker: none\n"
        f"data: {{dataset: {tmp_path}/qa.jsonl, corpus: {tmp_path}/corpus.jsonl, fractions: [0, 0, 0, 1]}}\n"
    )
    return path


def test_run_from_the_cli_refuses_then_adopts(tmp_path, local_recipe):
    user = tmp_path / "mine"
    plant(user, USER_RUN_LOOKALIKE)
    before = snapshot(user)
    out = wb("run", str(local_recipe), f"run_dir={user}")
    assert_one_line_error(out, "no workbench run made it", f"run_dir={user} --adopt-run-dir")
    assert_one_line_error(wb("run", str(local_recipe), f"run_dir={user}", "--adopt-run-dir"), "cannot be adopted")
    assert snapshot(user) == before
    (user / "config.yaml").unlink()
    (user / "manifest.json").unlink()
    shutil.rmtree(user / "stages")
    out = wb("run", str(local_recipe), f"run_dir={user}", "--adopt-run-dir")
    assert out.returncode == 0, out.stderr
    assert (user / "notes.txt").read_text() == "notes" and (user / "stages" / "build_data" / "_stage.json").is_file()


def test_run_from_the_cli_refuses_a_checkouts_root_even_adopted(tmp_path, local_recipe):
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    out = wb("run", str(local_recipe), f"run_dir={checkout}", "--adopt-run-dir")
    assert_one_line_error(out, f"run_dir {checkout}: is the root of a git checkout")
    assert listing(checkout) == {".git"}


# ------------------------------------------------------------- --adopt-run-dir on every verb that runs a recipe
@pytest.fixture
def verb_stages(stages, monkeypatch):
    """``study`` and ``evaluate`` stages that write the summaries their verbs print (the real ones' sections)."""
    for name, entry in (("study", "summarised_study"), ("evaluate", "summarised_evaluate")):
        spec = StageSpec(
            name, "v", f"{HERE}:{entry}", sections=("seper_eval",), settings=registry.STAGES[name].settings
        )
        monkeypatch.setitem(registry.STAGES, name, spec)


def in_process(monkeypatch, capsys, *args: str) -> tuple[int, str, list[str]]:
    """``workbench -q *args`` in this process (where the fake stages are registered): exit code, stdout, stderr
    lines."""
    from workbench import cli

    monkeypatch.setattr(sys, "argv", ["workbench", "-q", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err.strip().splitlines()


@pytest.mark.parametrize(
    ("verb", "stage", "printed"),
    [("run", "study", "study"), ("evaluate", "evaluate", "traces:"), ("study", "study", "parameters in")],
)
def test_every_verb_that_runs_a_recipe_refuses_then_adopts(
    tmp_path, verb_stages, monkeypatch, capsys, verb, stage, printed
):
    user = tmp_path / "mine"
    files = plant(user, {"notes.txt": "notes", "data/table.csv": "a,b\n"})
    recipe(tmp_path, user)  # writes r.yaml
    args = [verb, str(tmp_path / "r.yaml"), f"stages=[produce,{stage}]"]
    code, _, err = in_process(monkeypatch, capsys, *args)
    assert code == 2 and len(err) == 1, err
    assert f"run_dir {user}: is not empty and no workbench run made it" in err[0] and "--adopt-run-dir" in err[0]
    assert listing(user) == {"notes.txt", "data"}  # refused before a byte was written
    code, out, err = in_process(monkeypatch, capsys, *args, "--adopt-run-dir")
    assert code == 0, err
    assert printed in out and (user / RUN_MARKER).is_file() and (user / "stages" / stage / "_stage.json").is_file()
    assert all((user / name).read_text() == text for name, text in files.items())


@pytest.mark.parametrize("verb", ["evaluate", "study"])
def test_adopting_with_any_verb_still_refuses_what_a_run_would_overwrite(
    tmp_path, verb_stages, monkeypatch, capsys, verb
):
    user = tmp_path / "mine"
    plant(user, USER_RUN_LOOKALIKE)
    before = snapshot(user)
    recipe(tmp_path, user)
    code, _, err = in_process(
        monkeypatch, capsys, verb, str(tmp_path / "r.yaml"), f"stages=[produce,{verb}]", "--adopt-run-dir"
    )
    assert code == 2 and len(err) == 1 and "cannot be adopted" in err[0], err
    assert snapshot(user) == before
