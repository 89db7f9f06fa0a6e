"""The puzzle's rule, computed without the network: the answer key for `evaluate`.

An object starts with its abilities (can it fly, can it speak). Each action
word acts on one ability: swap-* flips it, keep-* keeps it. `disobeys` applies
to the word right after it only, and inverts that action's effect (a disobeyed
swap keeps, a disobeyed keep flips). The answer is named by the seed's readout
table, whose middle attribute the puzzle never sets.
"""

from __future__ import annotations

from itertools import product
from typing import Iterator, Sequence

from .slots import ATTRIBUTES_TO_WORD, DISOBEYS, QUESTION

# Deliberately not derived from the network's token features: this is the key
# the network is scored against.
OBJECT_ABILITIES: dict[str, dict[str, bool]] = {
    "Rock": {"fly": False, "speak": False},
    "Human": {"fly": False, "speak": True},
    "Crow": {"fly": True, "speak": False},
    "Flying superhero": {"fly": True, "speak": True},
}

# action word -> (the ability it acts on, whether obeying it flips the ability)
ACTIONS: dict[str, tuple[str, bool]] = {
    "swap-flight": ("fly", True),
    "keep-flight": ("fly", False),
    "swap-speech": ("speak", True),
    "keep-speech": ("speak", False),
}
FLIGHT_ACTIONS = ("swap-flight", "keep-flight")
SPEECH_ACTIONS = ("swap-speech", "keep-speech")


def expected_abilities(words: Sequence[str]) -> tuple[int, int]:
    """(flies, speaks) after applying the sentence's actions to its object."""
    abilities: dict[str, bool] = {}
    for word in words:
        if word in OBJECT_ABILITIES:
            abilities = dict(OBJECT_ABILITIES[word])
    disobeying = False
    for word in words:
        if word in ACTIONS:
            ability, obeyed_flips = ACTIONS[word]
            if obeyed_flips != disobeying:
                abilities[ability] = not abilities[ability]
        disobeying = word == DISOBEYS
    return int(abilities["fly"]), int(abilities["speak"])


def expected_answer(words: Sequence[str]) -> str:
    flies, speaks = expected_abilities(words)
    return ATTRIBUTES_TO_WORD[(flies, 0, speaks)]


def well_formed_sentences(max_tokens: int = 6) -> Iterator[list[str]]:
    """Every object, then a flight and a speech action in either order, each
    optionally disobeyed, then the question; at most ``max_tokens`` words."""
    for obj, flight, speech, flight_first, disobey_flight, disobey_speech in product(
        OBJECT_ABILITIES, FLIGHT_ACTIONS, SPEECH_ACTIONS, (True, False), (False, True), (False, True)
    ):
        flight_words = [DISOBEYS] * disobey_flight + [flight]
        speech_words = [DISOBEYS] * disobey_speech + [speech]
        actions = flight_words + speech_words if flight_first else speech_words + flight_words
        words = [obj, *actions, QUESTION]
        if len(words) <= max_tokens:
            yield words
