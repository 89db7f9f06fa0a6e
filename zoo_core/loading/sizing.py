"""A network's exact size before it is built: the architecture built where nothing large is allocated.

A tensor on torch's ``meta`` device has a shape and a dtype and no storage, so
a network built with its large tensors there allocates no weights, whatever
the card asks for: counting its parameters and buffers then gives the exact
count and bytes of ANY architecture, without knowing its shape
(zoo_core.catalogue.limits checks them against the limits before the real
network is built).

Only the large tensors go to meta. Some operations' meta kernels are written
in Python, and the first one a process runs imports torch._dynamo, which
takes seconds (a causal mask, ``torch.tril(torch.ones(T, T))``, is one); so a
tensor of at most ``SMALL_ELEMENTS`` elements is made on the CPU for real (its
random initialisation skipped), while the total so made stays under
``REAL_BUDGET_ELEMENTS``. Every ordinary network is then built exactly as it
would be, minus its random fills; a hostile one has its huge tensors on meta.

Building is still the plugin's code running, so it is bounded: more than
``MAX_MODULES`` modules, or ``MAX_SECONDS`` spent creating them, stops it
(a card with ``n_layer = 10**9`` would otherwise make Python objects for ever,
even on meta). A factory that stops, or cannot be built so (it reads values
out of a meta tensor, mixes devices, names a device itself, or raises), is
measured by the estimate from the config's sizes instead, and a refusal says so.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable

import torch
from torch.nn.modules import module as torch_module
from torch.overrides import TorchFunctionMode

from ..catalogue.limits import CannotMeasure
from ..storage.initialisation import random_init_skipped

MAX_MODULES = 10_000  # a 48-layer transformer has under 1,000
MAX_SECONDS = 5.0
SMALL_ELEMENTS = 1 << 20
REAL_BUDGET_ELEMENTS = 1 << 24  # 64 MiB of float32 made for real at most, then everything goes to meta

# The creation functions that take a size, and those whose size their range gives.
_SIZED = (torch.empty, torch.zeros, torch.ones, torch.full, torch.rand, torch.randn, torch.randint, torch.eye)
_RANGED = (torch.arange, torch.linspace, torch.logspace)

_guard = threading.local()  # only the thread that measures is stopped, never another one building a network


class _Stop(Exception):
    pass


def _check_guard(modules: int) -> None:
    guard = getattr(_guard, "active", None)
    if guard is None:
        return
    guard["modules"] += modules
    if guard["modules"] > MAX_MODULES:
        raise _Stop(f"it makes more than {MAX_MODULES:,} modules")
    if time.monotonic() > guard["deadline"]:
        raise _Stop(f"building it took more than {MAX_SECONDS:g} s")


def _on_module(module, name, submodule):
    _check_guard(1)


def _on_parameter(module, name, parameter):
    _check_guard(0)


_hooks_lock = threading.Lock()
_hooks: list = []


def _install_hooks() -> None:
    # Once per process, for every thread: a hook only counts in the thread that is measuring.
    with _hooks_lock:
        if not _hooks:
            _hooks.append(torch_module.register_module_module_registration_hook(_on_module))
            _hooks.append(torch_module.register_module_parameter_registration_hook(_on_parameter))


def _elements(func, args: tuple, kwargs: dict) -> int | None:
    """How many elements a creation call asks for (None: cannot tell)."""
    try:
        if func is torch.eye:
            rows = int(args[0])
            return rows * int(args[1] if len(args) > 1 and isinstance(args[1], int) else kwargs.get("m", rows))
        if func in _RANGED:
            if func is torch.arange:
                numbers = [float(a) for a in args if isinstance(a, (int, float))]
                start, end, step = (
                    (0.0, numbers[0], 1.0) if len(numbers) == 1 else (*numbers[:2], (numbers[2:] or [1.0])[0])
                )
                return max(0, math.ceil((end - start) / step))
            return int(args[2] if len(args) > 2 else kwargs["steps"])
        if func is torch.randint:
            size = next(a for a in args if isinstance(a, (tuple, list, torch.Size)))
        elif func is torch.full:
            size = args[0] if args else kwargs["size"]
        else:
            size = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) else args
            size = size or kwargs.get("size", ())
        return math.prod(int(n) for n in size)
    except (StopIteration, KeyError, TypeError, ValueError, IndexError, ZeroDivisionError):
        return None


class _LargeOnMeta(TorchFunctionMode):
    """Creation calls that name no device: small ones on the CPU, within a budget; the rest on meta."""

    def __init__(self) -> None:
        super().__init__()
        self.real = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if (func in _SIZED or func in _RANGED) and kwargs.get("device") is None:
            count = _elements(func, args, kwargs)
            if count is None or count > SMALL_ELEMENTS or self.real + count > REAL_BUDGET_ELEMENTS:
                kwargs["device"] = "meta"
            else:
                self.real += count
        return func(*args, **kwargs)


def measure_on_meta(build: Callable[[], Any]) -> tuple[int, int]:
    """(parameters, bytes of parameters and buffers) of what ``build()`` returns
    when every tensor it creates is on the meta device; raises CannotMeasure
    saying why when it cannot be built there."""
    return counted(build_on_meta(build))


def counted(network: torch.nn.Module) -> tuple[int, int]:
    """(parameters, bytes of parameters and buffers) of ``network``, each shared tensor once."""
    parameters = list(network.parameters())  # each shared tensor once
    buffers = list(network.buffers())
    count = sum(p.numel() for p in parameters)
    size = sum(t.numel() * t.element_size() for t in parameters + buffers)
    return count, size


def build_on_meta(build: Callable[[], Any]) -> torch.nn.Module:
    """What ``build()`` returns with its large tensors on the meta device (its
    shapes, dtypes and parameter count are exact; its weights take no memory);
    raises CannotMeasure saying why when it cannot be built so."""
    _install_hooks()
    _guard.active = {"modules": 0, "deadline": time.monotonic() + MAX_SECONDS}
    try:
        with _LargeOnMeta(), random_init_skipped():
            network = build()
    except _Stop as exc:
        raise CannotMeasure(f"not built on the meta device: {exc}") from None
    except Exception as exc:  # plugin code: whatever it raises, the estimate takes over
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise CannotMeasure(f"cannot be built on the meta device: {type(exc).__name__}: {first}") from None
    finally:
        _guard.active = None
    if not isinstance(network, torch.nn.Module):
        raise CannotMeasure(f"its factory returned a {type(network).__name__}, not a torch module, to count")
    return network
