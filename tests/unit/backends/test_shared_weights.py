"""One resident copy of the weights two loaded models hold alike (issue 31, item 2): a second model whose layers
equal the first's uses the first's memory, its outputs unchanged; the tensors that differ (an adapter's target
layers) stay its own; moving either model (``.to()``) leaves the other as it was (issue 41, item 5)."""

from __future__ import annotations

import pytest
import torch

from tests.tiny_models import build_tiny_llama
from workbench.backends.shared_weights import share_equal_weights


def _load(path, dtype=torch.float32):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("shared-base"), seed=3)


@pytest.fixture(scope="module")
def tuned_dir(tmp_path_factory, base_dir):
    """The base with one layer changed, as an adapter merged over its q projection would leave it."""
    model = _load(base_dir)
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.weight.add_(0.05)
    out = tmp_path_factory.mktemp("shared-tuned")
    model.save_pretrained(out)
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(base_dir).save_pretrained(out)
    return out


def _tensors(model):
    named = dict(model.named_parameters(remove_duplicate=False))
    named.update(dict(model.named_buffers(remove_duplicate=False)))
    return named


def _shares(a, b) -> bool:
    """Whether tensors ``a`` and ``b`` are distinct objects over the same memory."""
    return a is not b and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() == a.data_ptr() == (
        b.data_ptr()
    )


def test_equal_tensors_become_the_donors_and_the_changed_layer_stays_its_own(base_dir, tuned_dir):
    donor, model = _load(base_dir), _load(tuned_dir)
    ids = torch.tensor([[1, 5, 9, 14, 3, 7]])
    with torch.inference_mode():
        before = model(input_ids=ids).logits
    own_bytes = {id(t): t.numel() * t.element_size() for t in _tensors(model).values()}
    changed = "model.layers.0.self_attn.q_proj.weight"

    freed = share_equal_weights(model, donor)

    mine, theirs = _tensors(model), _tensors(donor)
    assert not _shares(mine[changed], theirs[changed])
    assert not torch.equal(mine[changed], theirs[changed])
    shared = [name for name in mine if _shares(mine[name], theirs[name])]
    assert sorted(shared) == sorted(name for name in mine if name != changed)
    assert all(isinstance(mine[name], torch.nn.Parameter) for name, _ in model.named_parameters())
    # the tied output layer stays tied (over the donor's embeddings now), counted once in the bytes freed
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert _shares(model.lm_head.weight, donor.model.embed_tokens.weight)
    assert freed == sum(own_bytes.values()) - mine[changed].numel() * mine[changed].element_size()
    with torch.inference_mode():
        after = model(input_ids=ids).logits
    assert torch.equal(before, after)
    assert share_equal_weights(model, donor) == 0  # nothing left to share


def test_nothing_is_shared_across_dtypes_or_with_different_weights(base_dir, tuned_dir, tmp_path):
    model, half = _load(tuned_dir), _load(base_dir, torch.bfloat16)
    share_equal_weights(model, half)
    # no parameter in another dtype; only the rotary table, a float32 buffer in both, is the same tensor
    assert not any(_shares(p, q) for p, q in zip(model.parameters(), half.parameters(), strict=True))
    assert _shares(model.model.rotary_emb.inv_freq, half.model.rotary_emb.inv_freq)
    other = _load(build_tiny_llama(tmp_path / "other", seed=4))
    model = _load(tuned_dir)
    share_equal_weights(model, other)
    mine, theirs = _tensors(model), _tensors(other)
    # different random weights: only what initialises to constants (the norms' ones) and the rotary table match
    assert {name for name in mine if _shares(mine[name], theirs[name])} == {
        name for name in mine if "norm" in name or "rotary" in name
    }


def test_a_second_generator_shares_the_first_ones_weights_and_answers_as_before(base_dir, tuned_dir):
    from workbench.backends.factory import build_generator

    first = build_generator(str(base_dir), cache=False)
    alone = build_generator(str(tuned_dir), cache=False)
    second = build_generator(str(tuned_dir), cache=False, share_weights_with=first)
    assert _shares(second.model.model.embed_tokens.weight, first.model.model.embed_tokens.weight)
    assert not _shares(alone.model.model.embed_tokens.weight, first.model.model.embed_tokens.weight)
    prompts = ["who wrote hamlet", "the capital of france is"]
    kwargs = {"max_new_tokens": 6, "temperature": 0.0}
    assert [list(g.token_ids) for g in second.generate(prompts, **kwargs)] == [
        list(g.token_ids) for g in alone.generate(prompts, **kwargs)
    ]
    sampled = {"max_new_tokens": 6, "temperature": 0.8, "n": 2, "seed": 1}
    assert [list(g.token_ids) for g in second.generate(prompts, **sampled)] == [
        list(g.token_ids) for g in alone.generate(prompts, **sampled)
    ]


def test_the_runs_controller_generator_shares_the_answering_models_weights(base_dir, tuned_dir):
    from workbench.backends.cost import CostCounter
    from workbench.recipe import GeneratorSection, RecipeConfig
    from workbench.stages.context import Resources

    config = RecipeConfig(name="t", stages=["build_data"])
    config.generator = GeneratorSection(model=str(base_dir), cache=False)
    resources = Resources(config, CostCounter())
    run = resources.generator()
    controller = resources.controller_generator(str(tuned_dir))
    assert controller is not run
    assert _shares(controller.model.model.layers[1].mlp.up_proj.weight, run.model.model.layers[1].mlp.up_proj.weight)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not _shares(controller.model.get_parameter(q), run.model.get_parameter(q))


def test_the_tensors_kept_no_longer_view_the_checkpoint_file(base_dir, tuned_dir):
    """transformers loads safetensors as views of a memory-mapped file; the tensors the model keeps are copied out
    of it, so the file's mapping (every page of which the comparison read) goes."""
    import gc
    from pathlib import Path

    maps = Path("/proc/self/maps")
    if not maps.is_file():
        pytest.skip("no /proc/self/maps on this system")
    checkpoint = str((Path(tuned_dir) / "model.safetensors").resolve())
    donor, model = _load(base_dir), _load(tuned_dir)
    name = "model.layers.0.self_attn.q_proj.weight"
    values = model.get_parameter(name).detach().clone()
    assert checkpoint in maps.read_text()  # loaded as a view of the file
    share_equal_weights(model, donor)
    gc.collect()
    assert checkpoint not in maps.read_text()
    kept = model.get_parameter(name)
    assert isinstance(kept, torch.nn.Parameter) and torch.equal(kept, values)
    assert model.lm_head.weight is model.model.embed_tokens.weight


@pytest.mark.parametrize("moved", ["model", "donor"])
def test_moving_one_of_two_sharing_models_leaves_the_other_where_and_what_it_was(base_dir, tuned_dir, moved):
    """``.to(dtype)`` and ``.to(device)`` on either model: the moved one gets new tensors, the other keeps the shared
    memory, its dtype, device, values and outputs (copy-on-move)."""
    donor, model = _load(base_dir), _load(tuned_dir)
    share_equal_weights(model, donor)
    mover, stayer = (model, donor) if moved == "model" else (donor, model)
    ids = torch.tensor([[1, 5, 9, 14, 3, 7]])
    with torch.inference_mode():
        before = stayer(input_ids=ids).logits
    kept = {name: (t, t.detach().clone()) for name, t in _tensors(stayer).items()}
    mover.to(torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in mover.parameters())
    for name, (tensor, values) in kept.items():
        now = _tensors(stayer)[name]
        assert now is tensor and now.dtype == torch.float32 and torch.equal(now, values), name
    mover.to("meta")  # another device: the stayer's tensors stay on the CPU
    assert all(p.device.type == "meta" for p in mover.parameters())
    assert all(t.device.type == "cpu" for t in _tensors(stayer).values())
    with torch.inference_mode():
        assert torch.equal(stayer(input_ids=ids).logits, before)
