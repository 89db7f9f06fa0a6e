"""Tensors whose values are read only when asked for: what lets an import stream.

A family record (zoo_core.plugin_api.families) turns a file's tensors into the
architecture's all at once: it permutes each RoPE head's rows, joins query, key
and value, splits a fused gate and up. Given `Deferred` tensors instead of real
ones, it does all of that on shapes alone (torch's ``meta`` device) and hands
back, for every tensor of the network, a recipe: which of the file's tensors to
read and what to do with them. `Deferred.materialize` then makes one tensor of
the network, reading only what it is made of, and an import writes it and lets
it go before it makes the next: the model is never whole in memory.

Nothing is cached: a tensor that two results share (a fused tensor split in
two) is read once for each. An operation that needs values (``bool(t)``,
``t.item()``) reads them there and then; one that would write into a deferred
tensor is refused, as its values do not exist yet.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from ..errors import ZooError


class Deferred(torch.Tensor):
    """A tensor of known shape and dtype (held on the meta device) and a way to make its values."""

    _make: Callable[[], torch.Tensor]

    @staticmethod
    def __new__(cls, shape: tuple[int, ...], dtype: torch.dtype, make: Callable[[], torch.Tensor]):
        tensor = torch.Tensor._make_subclass(cls, torch.empty(shape, dtype=dtype, device="meta"))
        tensor._make = make
        return tensor

    def materialize(self) -> torch.Tensor:
        """The values, on the CPU, as a plain tensor."""
        values = self._make()
        if tuple(values.shape) != tuple(self.shape) or values.dtype != self.dtype:  # the recipe's own promise
            raise ZooError(
                f"a deferred tensor of {list(self.shape)} {self.dtype} made {list(values.shape)} {values.dtype}"
            )
        return values

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name.endswith("_") and not name.endswith("__") or name in ("__setitem__", "copy_"):
            raise ZooError(f"an import's tensors are read lazily; '{name}' would write into one before it is read")
        with torch._C.DisableTorchFunctionSubclass():
            try:
                shaped = _shortcut(func, args, kwargs)
                shaped = shaped if shaped is not None else func(*tree_map(_on_meta, args), **tree_map(_on_meta, kwargs))
            except (NotImplementedError, RuntimeError):  # it needs the values (t.item(), bool(t)): read them
                return func(*tree_map(_materialized, args), **tree_map(_materialized, kwargs))
        leaves, structure = tree_flatten(shaped)
        if not any(isinstance(leaf, torch.Tensor) for leaf in leaves):
            return shaped  # a shape, a count, a dtype

        def maker(index: int) -> Callable[[], torch.Tensor]:
            def make() -> torch.Tensor:
                with torch._C.DisableTorchFunctionSubclass():
                    out = func(*tree_map(_materialized, args), **tree_map(_materialized, kwargs))
                return tree_flatten(out)[0][index]

            return make

        return tree_unflatten(
            [
                Deferred(tuple(leaf.shape), leaf.dtype, maker(index)) if isinstance(leaf, torch.Tensor) else leaf
                for index, leaf in enumerate(leaves)
            ],
            structure,
        )


_SCALAR_ARITHMETIC = {
    getattr(torch.Tensor, name)
    for name in (
        "__add__",
        "__radd__",
        "__sub__",
        "__rsub__",
        "__mul__",
        "__rmul__",
        "__truediv__",
        "add",
        "sub",
        "mul",
    )
}


def _shortcut(func, args, kwargs) -> torch.Tensor | None:
    """The meta result of the few operations whose meta functions torch writes in
    Python and which import torch._dynamo and sympy on first use (seconds, for an
    import of a small file): joining, arithmetic with a number, rows picked by an
    index tensor. None: let torch's own work it out."""
    if func in (torch.cat, torch.stack):
        return _joined(func, list(args[0]), args[1] if len(args) > 1 else kwargs.get("dim", 0))
    if func in _SCALAR_ARITHMETIC and len(args) == 2 and not kwargs and isinstance(args[1], (int, float)):
        return torch.empty(args[0].shape, dtype=torch.result_type(args[0], args[1]), device="meta")
    if func is torch.Tensor.__getitem__ and isinstance(args[1], tuple) and args[1]:
        *leading, index = args[1]
        if isinstance(index, torch.Tensor) and index.dim() == 1 and all(part == slice(None) for part in leading):
            return args[0].index_select(len(leading), index.to(args[0].device))
    return None


def _joined(func, tensors: list, dim: int) -> torch.Tensor | None:
    if not tensors or any(t.dtype != tensors[0].dtype or t.dim() != tensors[0].dim() for t in tensors):
        return None  # torch's own says what is wrong
    shape = list(tensors[0].shape)
    if func is torch.stack:
        shape.insert(dim % (len(shape) + 1), len(tensors))
    else:
        dim %= len(shape)
        if any(list(t.shape[:dim]) + list(t.shape[dim + 1 :]) != shape[:dim] + shape[dim + 1 :] for t in tensors):
            return None
        shape[dim] = sum(t.shape[dim] for t in tensors)
    return torch.empty(shape, dtype=tensors[0].dtype, device="meta")


def _on_meta(value: Any) -> Any:
    """What the shape computation gets: a deferred tensor as the meta tensor it is, a real one as a meta copy."""
    if isinstance(value, Deferred) or not isinstance(value, torch.Tensor):
        return value
    return value.to("meta")


def _materialized(value: Any) -> Any:
    return value.materialize() if isinstance(value, Deferred) else value
