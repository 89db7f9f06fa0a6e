"""Seeds: any whole number from -2**63 to 2**64 - 1, every one its own stream.

torch seeds its CPU generator (a Mersenne Twister) from the low 32 bits of the
seed only, so 0, 2**32 and -2**63 used to give identical samples. Here a seed
below 2**32 (and at least 0) still goes through ``manual_seed``, so every result
recorded so far reproduces; any other seed sets the generator's whole 19,937-bit
state, with the seed written into it verbatim (distinct seeds, distinct states,
hence distinct streams) and the rest filled from a SHA-256 of the seed.
"""

from __future__ import annotations

import hashlib
import struct

import torch

# Checking a seed needs no torch: the CLI and SamplingSettings import seed_range alone.
from .seed_range import SMALLEST_SEED, check_seed

_WORDS = 624  # the Mersenne Twister's state, 32-bit words
_STATE_OFFSET = 24  # torch's CPU generator state: seed, left, seeded, next, then the words as uint64


def _state_for(seed: int) -> torch.Tensor:
    template = bytearray(torch.Generator().manual_seed(0).get_state().numpy().tobytes())
    offset = seed - SMALLEST_SEED  # 0 .. 2**64 + 2**63: fits in three words, one-to-one
    words = [offset & 0xFFFFFFFF, (offset >> 32) & 0xFFFFFFFF, offset >> 64]
    stream = b""
    counter = 0
    while len(words) < _WORDS:
        if not stream:
            stream = hashlib.sha256(b"zoo-seed\0%d\0%d" % (seed, counter)).digest()
            counter += 1
        words.append(int.from_bytes(stream[:4], "little"))
        stream = stream[4:]
    # Word 0 contributes only its top bit to the twister; the seed lives in words 1-3.
    words = [0x80000000] + words[: _WORDS - 1]
    struct.pack_into("<Q", template, 0, seed & 0xFFFFFFFFFFFFFFFF)  # initial_seed(), for the record
    struct.pack_into("<i", template, 8, 1)  # left: regenerate before the first draw
    struct.pack_into(f"<{_WORDS}Q", template, _STATE_OFFSET, *words)
    return torch.frombuffer(template, dtype=torch.uint8).clone()


def seeded_generator(seed: int, what: str = "--seed") -> torch.Generator:
    """A CPU generator for ``seed`` (see the module's docstring)."""
    generator = torch.Generator()
    seed_generator(generator, seed, what)
    return generator


def seed_generator(generator: torch.Generator, seed: int, what: str = "--seed") -> torch.Generator:
    check_seed(seed, what)
    if 0 <= seed < 2**32:
        return generator.manual_seed(seed)
    generator.set_state(_state_for(seed))
    return generator


def seed_global(seed: int, what: str = "seed") -> None:
    """torch's global generator (initial weights, dropout), seeded as above."""
    check_seed(seed, what)
    if 0 <= seed < 2**32:
        torch.manual_seed(seed)
    else:
        torch.set_rng_state(_state_for(seed))
