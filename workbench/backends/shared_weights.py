"""One resident copy of the weights two loaded models hold alike.

Two fine-tunes of one base each merged over it (the reader adapter, q/v; a distilled InSemRAG controller, q/k/v/o)
differ only in the layers their adapters touch: SmolLM2's embeddings, MLPs and norms — 80 % of its 135M parameters
— are the base's in both. Loaded side by side, each model holds its own copy. :func:`share_equal_weights` points
every parameter and buffer of a newly loaded model that is equal to the one of the same name in a donor model (same
shape, dtype, device and values) at the donor's memory, so the duplicate is freed. The models stay independent
modules: each holds tensor objects of its own that alias the shared memory, so moving one (``.to(device)``,
``.to(dtype)``, ``.half()``: torch gives each moved parameter new data) moves only that one, and the other keeps
the memory as it was — copy-on-move. What they share is read-only at inference (the generators run under
``torch.inference_mode``): writes into the memory itself (training, ``load_state_dict``, an in-place ``add_``)
reach both, so a model that is then trained must not share.
"""

from __future__ import annotations

from typing import Any

__all__ = ["share_equal_weights"]


def share_equal_weights(model: Any, donor: Any) -> int:
    """Make ``model`` use ``donor``'s memory for every parameter and buffer it holds under the same qualified name
    with the same shape, dtype, device and values; return the bytes of ``model``'s own tensors it no longer uses.
    Tensors that differ (the layers an adapter changed) stay ``model``'s. ``model``'s slot gets a tensor (a
    ``Parameter`` for a parameter) of its own viewing the donor's memory, never the donor's tensor object, so
    ``.to()`` on either model leaves the other's tensors where and what they were (module docstring).

    Weights tied within ``model`` (an output layer tied to the input embeddings) stay tied: each of ``model``'s
    tensors is compared once and every module slot holding it gets the same tensor. When anything was shared,
    ``model``'s remaining CPU tensors are copied into memory of their own (:func:`_own_memory`): transformers loads
    safetensors checkpoints as views of one memory-mapped file, whose pages — all read by the comparison — stay
    resident while any view of the file is alive, so without the copy nothing would be freed (measured, SmolLM2
    with a q/k/v/o adapter merged beside the reader: 1.42 GB resident after sharing, 1.00 GB with the copy)."""
    import torch

    donor_tensors: dict[str, torch.Tensor] = dict(donor.named_parameters(remove_duplicate=False))
    donor_tensors.update(dict(donor.named_buffers(remove_duplicate=False)))
    decided: dict[int, torch.Tensor | None] = {}  # id(model's tensor) -> the alias replacing it, or None
    aliases: dict[tuple[int, bool], torch.Tensor] = {}  # (id(donor tensor), parameter?) -> model's alias of it
    originals: list[torch.Tensor] = []  # alive until the loop ends, so no id in ``decided`` is reused meanwhile
    freed = 0
    for prefix, module in model.named_modules(remove_duplicate=False):
        for slots, parameter in ((module._parameters, True), (module._buffers, False)):
            for name, tensor in list(slots.items()):
                if tensor is None:
                    continue
                key = id(tensor)
                if key not in decided:
                    originals.append(tensor)
                    other = donor_tensors.get(f"{prefix}.{name}" if prefix else name)
                    same = (
                        other is not None
                        and not _same_memory(other, tensor)
                        and other.shape == tensor.shape
                        and other.dtype == tensor.dtype
                        and other.device == tensor.device
                        and bool(torch.equal(other, tensor))
                    )
                    decided[key] = _alias(other, tensor, parameter, aliases) if same else None
                    if same:
                        freed += tensor.numel() * tensor.element_size()
                replacement = decided[key]
                if replacement is not None:
                    slots[name] = replacement
    if freed:
        _own_memory(model, {id(t) for t in aliases.values()})
    return freed


def _same_memory(a: Any, b: Any) -> bool:
    """Whether tensors ``a`` and ``b`` view the same memory at the same place (the same tensor, or aliases)."""
    return (
        a.device == b.device
        and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        and (a.data_ptr() == b.data_ptr())
    )


def _alias(donor_tensor: Any, own: Any, parameter: bool, aliases: dict[tuple[int, bool], Any]) -> Any:
    """``model``'s tensor object over ``donor_tensor``'s memory (one per donor tensor and slot kind, so tied slots
    stay tied): a ``Parameter`` keeping ``own``'s ``requires_grad`` for a parameter slot, a plain tensor for a
    buffer."""
    import torch

    slot = (id(donor_tensor), parameter)
    if slot not in aliases:
        data = donor_tensor.detach()  # a new tensor object over the same memory
        aliases[slot] = torch.nn.Parameter(data, requires_grad=own.requires_grad) if parameter else data
    return aliases[slot]


def _own_memory(model: Any, donors: set[int]) -> None:
    """Replace every CPU parameter and buffer of ``model`` that does not alias a donor's memory (ids in ``donors``)
    by a copy in memory of its own, tied slots by the same copy, so the checkpoint file mapping it was a view of is
    released."""
    import torch

    copies: dict[int, torch.Tensor] = {}
    for module in model.modules():
        for slots, parameter in ((module._parameters, True), (module._buffers, False)):
            for name, tensor in list(slots.items()):
                if tensor is None or id(tensor) in donors or tensor.device.type != "cpu":
                    continue
                if id(tensor) not in copies:
                    data = tensor.detach().clone()
                    copies[id(tensor)] = (
                        torch.nn.Parameter(data, requires_grad=tensor.requires_grad) if parameter else data
                    )
                slots[name] = copies[id(tensor)]
