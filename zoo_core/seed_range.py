"""What a seed is: any whole number from -2**63 to 2**64 - 1.

Checked without torch: the CLI and SamplingSettings check a seed before
anything pays for importing torch (zoo_core.seeding turns it into a stream).
"""

from __future__ import annotations

from .errors import ZooError

SMALLEST_SEED, LARGEST_SEED = -(2**63), 2**64 - 1


def check_seed(seed, what: str = "--seed") -> int:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ZooError(f"{what} must be a whole number, not {seed!r}")
    if not SMALLEST_SEED <= seed <= LARGEST_SEED:
        raise ZooError(f"{what} must be from -2**63 to 2**64-1 (a 64-bit seed), not {seed}")
    return seed
