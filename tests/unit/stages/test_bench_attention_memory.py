"""bench-features' attention-memory part (issue 41, item 6): the 'before' way computes what the recorder computes,
each way's prefill records what it should, 'before' runs only within its budget (else analytic), the stage writes
only the parts asked for, the report says which figures are measured and which analytic, and bad settings are
refused in one line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from workbench.backends.attention_diag import own_key_logprobs  # noqa: E402
from workbench.bench.features import attention_memory as bam  # noqa: E402
from workbench.bench.features.report import report_lines  # noqa: E402
from workbench.bench.features.settings import AttentionMemorySection, BenchFeaturesSection  # noqa: E402
from workbench.core.errors import ConfigError  # noqa: E402

TINY = {"batch": 2, "hidden_size": 32, "heads": 4, "kv_heads": 2, "head_dim": 8, "intermediate_size": 64}
TINY.update(vocab_size=100, layers=2)


@pytest.mark.parametrize("softcap", [None, 5.0])
def test_the_before_way_computes_the_recorders_values(softcap):
    gen = torch.Generator().manual_seed(2)
    query, key = torch.randn(2, 4, 9, 8, generator=gen), torch.randn(2, 2, 9, 8, generator=gen)
    padded = torch.ones(2, 1, 9, 9, dtype=torch.bool).tril()
    padded[1, :, :, :3] = False
    for mask in (None, padded):
        kwargs = {"scaling": 8**-0.5, "groups": 2, "softcap": softcap}
        expected = own_key_logprobs(query, key, mask, **kwargs)
        got = bam.full_matrix_logprobs(query, key, mask, **kwargs)
        assert torch.allclose(got, expected, atol=1e-5, equal_nan=True)  # NaN: queries of padding, which see nothing


@pytest.mark.parametrize(("way", "recorded"), [("none", []), ("after", [[2, 4, 1]]), ("before", [[2, 4, 16]])])
def test_each_way_records_what_it_says(way, recorded):
    result = bam.measure_prefill({**TINY, "way": way, "context": 16, "threads": 1})
    assert result["recorded"] == recorded
    assert result["peak_bytes"] > 0 and result["base_bytes"] > 0 and result["seconds"] > 0


def test_before_runs_only_within_its_budget_and_its_analytic_figure_is_always_given(monkeypatch):
    calls = []
    monkeypatch.setattr(
        bam, "measure_in_subprocess", lambda spec: calls.append((spec["way"], spec["context"])) or _result(spec)
    )
    section = AttentionMemorySection(**TINY, contexts=[64, 1024], before_max_gb=0.01)
    memory = bam.measure_attention_memory(section, threads=1)
    # 2 x float32 (2, 4, L, L): 262 kB at 64 tokens, 67 MB at 1024 — beyond the 10 MB budget
    assert calls == [("none", 64), ("after", 64), ("before", 64), ("none", 1024), ("after", 1024)]
    short, long = memory["contexts"]
    assert short["before_analytic_bytes"] == 2 * 4 * 2 * 4 * 64 * 64
    assert long["ways"]["before"] == {"skipped": "needs about 0.1 GB > before_max_gb"}
    assert memory["settings"]["threads"] == 1 and memory["settings"]["heads"] == 4


def _result(spec, rise=1_000_000):
    return {"base_bytes": 10**9, "peak_bytes": 10**9 + rise, "seconds": 1.0, "per_span": True, "recorded": []}


def test_the_report_says_what_was_measured_and_what_is_analytic():
    rows = []
    for context, before in ((1024, _result(None, 2_200_000_000)), (4096, {"skipped": "needs about 34.4 GB"})):
        ways = {"none": _result(None, 900_000_000), "after": _result(None, 904_000_000), "before": before}
        rows.append({"context": context, "before_analytic_bytes": 2 * 4 * 8 * 32 * context**2, "ways": ways})
    memory = {"settings": {**TINY, "batch": 8, "heads": 32, "before_max_gb": 8.0, "threads": 2}, "contexts": rows}
    text = "\n".join(report_lines({"threads": 2, "attention_memory": memory}, "bench-features"))
    assert "Regenerate with `workbench run bench-features`." in text
    assert "| 1,024 | 1,900 (+900) | 1,904 (+904) | +4 | 3,200 (+2,200) | +1,300 | 2,148 |" in text
    assert "| 4,096 | 1,900 (+900) | 1,904 (+904) | +4 | not run: needs about 34.4 GB | — | 34,360 |" in text
    assert "the recorder now adds +4 MB to the prefill's peak, against analytic, not run here: ≈34.4 GB" in text
    assert "## All" not in text  # the cost part was not measured


def test_the_stage_writes_only_the_parts_asked_for(monkeypatch, tmp_path):
    from workbench.bench.features import run as bench_features

    monkeypatch.setattr(bam, "measure_in_subprocess", _result)
    monkeypatch.setattr(bench_features, "measure_cost", lambda ctx: pytest.fail("the cost part was not asked for"))
    section = BenchFeaturesSection(parts=["attention_memory"])
    section.attention_memory = AttentionMemorySection(**TINY, contexts=[32])
    ctx = SimpleNamespace(config=SimpleNamespace(bench_features=section), out_dir=tmp_path)
    summary = bench_features.run(ctx)
    assert summary == {
        "memory_context": 32,
        "memory_none_rise_mb": 1.0,
        "memory_after_rise_mb": 1.0,
        "memory_before_rise_mb": 1.0,
        "memory_before_analytic_mb": 0.1,  # 2 x float32 (2, 4, 32, 32)
    }
    assert (tmp_path / "bench.json").is_file()


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"parts": ["cost", "speed"]}, "bench_features.parts"),
        ({"parts": []}, "bench_features.parts"),
        ({"attention_memory": AttentionMemorySection(heads=6, kv_heads=4)}, "bench_features.attention_memory.heads"),
        ({"attention_memory": AttentionMemorySection(contexts=[])}, "bench_features.attention_memory.contexts"),
        ({"attention_memory": AttentionMemorySection(before_max_gb=-1.0)}, "attention_memory.before_max_gb"),
    ],
)
def test_settings_it_cannot_measure_are_refused_in_one_line(change, where):
    from workbench.bench.features.run import validate_section

    with pytest.raises(ConfigError) as refused:
        validate_section(BenchFeaturesSection(**change))
    assert where in str(refused.value) and "\n" not in str(refused.value)
