"""Named hook points: read or replace any activation a network computes.

A component declares a hook point by holding a `HookPoint` submodule and passing
the activation through it (``x = self.resid_pre(x)``). The point's name is its
module path in the network, e.g. ``"blocks.0.attention.pattern"``, so a
third-party block's points are named like the built-in ones with no registry.

A hook function is ``fn(activation, name) -> Tensor | None``: None keeps the
activation (a reader), a tensor replaces it (an intervention). Hooks are set for
the length of a ``with hooks(network, {...}):`` block and always removed after.

With no hook set a point is an identity that costs one attribute check, so
every path through a network (training, cached decoding, the server's row
batches) passes its points and a hook sees every token.
"""

from __future__ import annotations

import fnmatch
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping, Sequence

from torch import Tensor, nn
from torch.nn.modules.module import register_module_module_registration_hook

from ..errors import ZooError, did_you_mean

HookFunction = Callable[[Tensor, str], "Tensor | None"]


class HookPoint(nn.Module):
    """An identity a hook can read or replace; see the module docstring.

    ``functions`` holds the (function, name) pairs set here, in the order set.
    `nn.Module.__call__` is overridden: torch's own call looks through several
    hook dictionaries on every call, which is the cost this point must not add.
    torch's module hooks (``register_forward_hook``) therefore never run on a
    HookPoint; use `hooks`.
    """

    # Hook functions set on any HookPoint in this process, as a count: one look
    # tells whether every hook set has been removed again.
    active = 0
    _lock = threading.Lock()

    def __init__(self) -> None:
        super().__init__()
        self.functions: tuple[tuple[HookFunction, str], ...] = ()

    def __call__(self, activation: Tensor) -> Tensor:
        if not self.functions:
            return activation
        return self._run(activation)

    forward = __call__

    @property
    def hooked(self) -> bool:
        """Whether a hook is set here: a component may skip work only a hook needs."""
        return bool(self.functions)

    def _run(self, activation: Tensor) -> Tensor:
        for function, name in self.functions:
            replaced = function(activation, name)
            if replaced is not None:
                if not isinstance(replaced, Tensor):
                    raise ZooError(f"the hook on '{name}' returned {type(replaced).__name__}; return a tensor or None")
                activation = replaced
        return activation

    def add_hook(self, function: HookFunction, name: str) -> None:
        """Set ``function``, called with this point's ``name``; prefer the `hooks` context manager."""
        with HookPoint._lock:
            self.functions = (*self.functions, (function, name))
            HookPoint.active += 1

    def remove_hook(self, function: HookFunction, name: str) -> None:
        with HookPoint._lock:
            kept = list(self.functions)
            kept.remove((function, name))
            self.functions = tuple(kept)
            HookPoint.active -= 1


def _keep_in_instance_dict(module: nn.Module, name: str, child: nn.Module | None) -> None:
    """torch's module-registration hook: a HookPoint child is also kept in its parent's
    instance dictionary, so ``self.point`` is found there directly. Otherwise torch
    finds children through `nn.Module.__getattr__`, which costs several times what
    the point itself does. The point stays registered as a child (named_modules,
    `.to()`, copies); assigning the name again replaces both."""
    if isinstance(child, HookPoint):
        module.__dict__[name] = child
    elif child is None:
        module.__dict__.pop(name, None)


register_module_module_registration_hook(_keep_in_instance_dict)


def hook_points(network: nn.Module) -> dict[str, HookPoint]:
    """Every hook point of ``network`` by name, in module order."""
    return {name: module for name, module in network.named_modules() if isinstance(module, HookPoint)}


def hook_point_names(network: nn.Module) -> list[str]:
    return list(hook_points(network))


def _network_name(network: nn.Module) -> str:
    return type(network).__name__


def resolve_names(network: nn.Module, patterns: Sequence[str]) -> list[str]:
    """The hook point names ``patterns`` (names or globs such as ``"blocks.*.resid_post"``)
    match, in module order; a pattern matching nothing is a ZooError naming close ones."""
    points = hook_point_names(network)
    if not points:
        raise ZooError(f"this network ({_network_name(network)}) declares no hook points")
    chosen: set[str] = set()
    for pattern in patterns:
        matched = (
            fnmatch.filter(points, pattern)
            if any(c in pattern for c in "*?[")
            else ([pattern] if pattern in points else [])
        )
        if not matched:
            hint = did_you_mean(pattern, points) or (
                f"; it has {', '.join(points[:4])}, ... (hook_point_names lists all {len(points)})"
            )
            raise ZooError(f"no hook point '{pattern}' in this {_network_name(network)}{hint}")
        chosen.update(matched)
    return [name for name in points if name in chosen]


@contextmanager
def hooks(network: nn.Module, mapping: Mapping[str, HookFunction]) -> Iterator[None]:
    """Set ``{name_or_glob: fn}`` on ``network``'s hook points for the ``with`` block.

    Every name is checked before any hook is set; every hook set is removed when
    the block ends, whether it ends normally or by an exception."""
    points = hook_points(network)
    setting = [
        (points[name], function, name)
        for pattern, function in mapping.items()
        for name in resolve_names(network, [pattern])
    ]
    done: list[tuple[HookPoint, HookFunction, str]] = []
    try:
        for point, function, name in setting:
            point.add_hook(function, name)
            done.append((point, function, name))
        yield
    finally:
        for point, function, name in reversed(done):
            point.remove_hook(function, name)


def _logits(output) -> Tensor:
    return output[0] if isinstance(output, tuple) else output


def run_with_cache(
    network: nn.Module, idx: Tensor, names: Sequence[str] | str | None = None
) -> tuple[Tensor, dict[str, Tensor]]:
    """The logits of ``network(idx)`` and the activations (detached) at the hook
    points ``names`` match (names or globs; None: every point), by name.

    Reading activations never changes the numbers: the logits are those of the
    network without hooks, bit for bit. A point the forward does not pass (say
    a position encoding that adds nothing) is absent from the dict."""
    patterns = ["*"] if names is None else [names] if isinstance(names, str) else list(names)
    cache: dict[str, Tensor] = {}

    def keep(activation: Tensor, name: str) -> None:
        cache[name] = activation.detach()

    with hooks(network, {name: keep for name in resolve_names(network, patterns)}):
        logits = _logits(network(idx))
    return logits, cache


__all__ = ["HookFunction", "HookPoint", "hook_point_names", "hook_points", "hooks", "resolve_names", "run_with_cache"]
