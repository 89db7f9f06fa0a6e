"""Building a network whose weights a verified checkpoint is about to replace.

Drawing random initial weights is most of what building a network costs (and
it grows with the parameters), and loading throws them away: the checkpoint's strict load overwrites every parameter and
persistent buffer. Inside ``random_init_skipped()`` torch.nn.init's random fills
leave their tensor as it is. Only random fills are skipped: a value a model
needs but does not save cannot be random (it would differ from load to load), so
nothing a correct model depends on is lost; zeros_, ones_ and constant_ still run.

Only the thread that entered the context skips: another thread building a network
to train at the same moment still gets its random weights.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from torch.nn import init

_RANDOM_FILLS = (
    "uniform_",
    "normal_",
    "trunc_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "xavier_uniform_",
    "xavier_normal_",
    "orthogonal_",
    "sparse_",
)
_state = threading.local()
_installed: dict[str, object] = {}
_install_lock = threading.Lock()


def _skippable(original):
    def fill(tensor, *args, **kwargs):
        if getattr(_state, "depth", 0):
            return tensor
        return original(tensor, *args, **kwargs)

    fill.__wrapped__ = original
    return fill


def _install() -> None:
    # Once per process: torch.nn.init's random fills become wrappers that ask
    # whether this thread is skipping. Modules look them up at call time
    # (nn.Linear calls init.kaiming_uniform_), so the wrappers are what they call.
    with _install_lock:
        if _installed:
            return
        for name in _RANDOM_FILLS:
            original = getattr(init, name)
            _installed[name] = original
            setattr(init, name, _skippable(original))


@contextlib.contextmanager
def random_init_skipped() -> Iterator[None]:
    """Within: this thread's calls to torch.nn.init's random fills do nothing."""
    _install()
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1
