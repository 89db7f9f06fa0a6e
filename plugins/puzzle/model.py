"""Seed 003's hand-built transformer for the "disobeys" puzzle, as a zoo network.

    token ids -> X = token features + one-hot position          (residual stream)
    layer 1:  X1 = X + object head + previous-word head
    layer 2:  X2 = X1 + [flight head, speech head] @ output
    parity FFN: Y = relu(X2 @ W1 + b1) @ W2                      (flies, speaks)

Attention has no causal mask and there is no LayerNorm, exactly as in the seed;
the answer is read at the question token "he-is?". Every weight is a parameter
named after its role (``layer1.object_head.query``) and shaped as in the seed;
`hand_set_state_dict` writes their values from named residual slots the way the
seed's notebook does. The constructor starts from zeros: a network is the
seed's once it has loaded its checkpoint (or `PuzzleTransformer.hand_set`).

Without positions (``positions = false``, variant ``puzzle-disobeys-nopos``) the
residual stream loses its six position slots (16 slots instead of 22) and
layer 1 loses the previous-word head, whose query and key read nothing but
positions. Everything else, including the slot ``previous_word_is_disobey``
that the layer-2 heads read, is the same construction; nothing writes that
slot any more, so the network answers as if every action were obeyed. More
fundamentally, attention without a mask and without positions treats a
sentence as a bag of words: reordering the words reorders every row of X, X1,
X2 and Y alike, so the question's answer depends only on which words occur.
"Crow disobeys keep-flight swap-speech he-is?" and "Crow keep-flight disobeys
swap-speech he-is?" hold the same words, so no weights at all could tell them
apart; that is the seed's case for position embedding, and the variant's
`evaluate` accuracy measures what the positions buy.

Hook points (`zoo_core.plugin_api.hook_points`), named by module path: the
residual streams ``embed`` (X), ``layer1.resid_post`` (X1), ``layer2.resid_post``
(X2), the FFN's ``parity_ffn.hidden`` (H) and ``output`` (Y); per head, named
after its role, ``layer1.object_head.pattern`` (its attention, (B, T, T)) and
``layer1.object_head.result`` (what it computes: attention @ values, through its
own output matrix for a layer-1 head; (B, T, 2) before the shared output matrix
for a layer-2 head). Zeroing a head's ``result`` removes that head and nothing
else, which is how `roles.verify_roles` checks the explanation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from zoo_core.errors import ZooError
from zoo_core.plugin_api.hook_points import HookPoint

from .report import answer_question, evaluate_network
from .roles import ROLES, ablate_answers, verify_roles
from .slots import (
    TOKEN_FEATURES,
    VOCABULARY,
    SlotLayout,
    position_slot,
    slot_names,
)

# How hard the question looks for the one word a head wants: a query of 8 on
# a key of 1 puts ~98% of the attention on that word among six tokens.
QUESTION_FOCUS = 8.0
# How hard a token looks at the token one position back; the previous-word
# head's scores are divided by sqrt(6), so 24 keeps its attention near 1.00.
PREVIOUS_WORD_FOCUS = 24.0
# Parity of a count 0..3: hidden unit k fires once the count exceeds k, and
# relu(s) - 2 relu(s-1) + 2 relu(s-2) - 2 relu(s-3) is 0, 1, 0, 1 at s = 0..3.
PARITY_THRESHOLDS = (0.0, -1.0, -2.0, -3.0)
PARITY_READOUT = (1.0, -2.0, 2.0, -2.0)


class AttentionHead(nn.Module):
    """One head as in the seed: softmax(X Wq (X Wk)^T / sqrt(query width)) X Wv, no mask.

    A head of layer 1 writes into the residual stream through its own
    ``output`` (the seed's Wo_O and Wo_P); the layer-2 heads share one output
    matrix held by their layer (the seed's Wo_2).
    """

    def __init__(self, width: int, query_width: int, value_width: int, own_output: bool):
        super().__init__()
        self.query = nn.Parameter(torch.zeros(width, query_width))
        self.key = nn.Parameter(torch.zeros(width, query_width))
        self.value = nn.Parameter(torch.zeros(width, value_width))
        self.output = nn.Parameter(torch.zeros(value_width, width)) if own_output else None
        # Not named "output": that is the output matrix's name in the checkpoints.
        self.pattern = HookPoint()
        self.result = HookPoint()

    def forward(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T, C) -> what the head writes (B, T, C or value width) and its attention (B, T, T)."""
        Q, K, V = X @ self.query, X @ self.key, X @ self.value
        attention = self.pattern(torch.softmax(Q @ K.transpose(-2, -1) / self.query.shape[1] ** 0.5, dim=-1))
        out = attention @ V
        return self.result(out @ self.output if self.output is not None else out), attention


class LayerOne(nn.Module):
    """The object head (the question gathers the object's abilities) and, with
    positions, the previous-word head (each token learns whether the word before
    it was "disobeys")."""

    def __init__(self, width: int, max_tokens: int, positions: bool):
        super().__init__()
        self.object_head = AttentionHead(width, query_width=2, value_width=2, own_output=True)
        self.previous_word_head = (
            AttentionHead(width, query_width=max_tokens, value_width=1, own_output=True) if positions else None
        )
        self.resid_post = HookPoint()

    def forward(self, X):
        written, object_map = self.object_head(X)
        maps = {"object": object_map}
        if self.previous_word_head is not None:
            previous, previous_map = self.previous_word_head(X)
            written = written + previous
            maps["previous_word"] = previous_map
        return self.resid_post(X + written), maps


class LayerTwo(nn.Module):
    """The flight head and the speech head: the question gathers, from its
    action word, whether the action swaps and whether it was disobeyed. Two heads,
    because both action words carry their disobey bit in the same slot."""

    def __init__(self, width: int):
        super().__init__()
        self.flight_head = AttentionHead(width, query_width=1, value_width=2, own_output=False)
        self.speech_head = AttentionHead(width, query_width=1, value_width=2, own_output=False)
        self.output = nn.Parameter(torch.zeros(4, width))
        self.resid_post = HookPoint()

    def forward(self, X1):
        flight, flight_map = self.flight_head(X1)
        speech, speech_map = self.speech_head(X1)
        X2 = self.resid_post(X1 + torch.cat([flight, speech], dim=-1) @ self.output)
        return X2, {"flight": flight_map, "speech": speech_map}


class ParityFFN(nn.Module):
    """Per ability, the parity of (object has it) + (action swaps) + (action disobeyed)."""

    def __init__(self, width: int):
        super().__init__()
        self.W1 = nn.Parameter(torch.zeros(width, 8))
        self.b1 = nn.Parameter(torch.zeros(8))
        self.W2 = nn.Parameter(torch.zeros(8, 2))
        self.hidden = HookPoint()

    def forward(self, X2):
        hidden = self.hidden(torch.relu(X2 @ self.W1 + self.b1))
        return hidden, hidden @ self.W2


class PuzzleTransformer(nn.Module):
    """The seed's two-layer network over named residual slots; outputs (flies, speaks) per token."""

    def __init__(self, positions: bool = True, max_tokens: int = 6, slots: list[str] | None = None):
        super().__init__()
        if not isinstance(positions, bool):
            raise ZooError(f"architecture 'puzzle': positions must be true or false, not {positions!r}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ZooError(f"architecture 'puzzle': max_tokens must be a positive whole number, not {max_tokens!r}")
        expected = slot_names(positions, max_tokens)
        if slots is not None and list(slots) != expected:
            raise ZooError(
                f"architecture 'puzzle': config.slots does not match the layout for positions={str(positions).lower()}, "
                f"max_tokens={max_tokens}: {_first_difference(list(slots), expected)}"
            )
        self.positions = positions
        self.max_tokens = max_tokens
        self.context_length = max_tokens
        self.slots = SlotLayout(expected)
        width = self.slots.width
        self.token_embedding = nn.Parameter(torch.zeros(len(VOCABULARY), width))
        self.position_embedding = nn.Parameter(torch.zeros(max_tokens, width)) if positions else None
        self.embed = HookPoint()
        self.layer1 = LayerOne(width, max_tokens, positions)
        self.layer2 = LayerTwo(width)
        self.parity_ffn = ParityFFN(width)
        self.output = HookPoint()

    @classmethod
    def hand_set(cls, positions: bool = True, max_tokens: int = 6) -> "PuzzleTransformer":
        network = cls(positions=positions, max_tokens=max_tokens)
        network.load_state_dict(hand_set_state_dict(positions, max_tokens), strict=True)
        return network.eval()

    @property
    def heads_by_layer(self) -> list[list[str]]:
        """Each layer's heads in the order `attention_maps` stacks them, which is how
        `zoo inspect --ablate LAYER.HEAD` counts them (from 0)."""
        return [["object", "previous_word"] if self.positions else ["object"], ["flight", "speech"]]

    @property
    def head_names(self) -> list[str]:
        return [head for layer in self.heads_by_layer for head in layer]

    # -- running -----------------------------------------------------------------

    def _run(self, idx: torch.Tensor) -> dict[str, Any]:
        if idx.dim() != 2:
            raise ZooError(f"the puzzle network takes token ids shaped (batch, tokens), not {tuple(idx.shape)}")
        T = idx.shape[1]
        if T > self.max_tokens:
            raise ZooError(f"{T} tokens exceed the puzzle network's {self.max_tokens} positions")
        if T and not (0 <= int(idx.min()) and int(idx.max()) < len(VOCABULARY)):
            raise ZooError(f"token ids must lie in 0..{len(VOCABULARY) - 1}")
        X = self.token_embedding[idx]
        if self.position_embedding is not None:
            X = X + self.position_embedding[:T]
        X = self.embed(X)
        X1, first_maps = self.layer1(X)
        X2, second_maps = self.layer2(X1)
        H, Y = self.parity_ffn(X2)
        Y = self.output(Y)
        return {"X": X, "X1": X1, "X2": X2, "H": H, "Y": Y, "attention": {**first_maps, **second_maps}}

    def forward(self, idx, targets=None):
        """Output vectors (B, T, 2): (flies, speaks) as read at each token; no loss."""
        if targets is not None:
            raise ZooError("the puzzle network is hand-built; it has no training loss")
        return self._run(idx)["Y"], None

    @torch.no_grad()
    def attention_maps(self, idx) -> list[torch.Tensor]:
        """Per layer (B, H, T, T): layer 1 (object[, previous-word]), layer 2 (flight, speech)."""
        maps = self._run(idx)["attention"]
        return [torch.stack([maps[head] for head in layer], dim=1) for layer in self.heads_by_layer]

    @torch.no_grad()
    def trace(self, idx) -> dict[str, Any]:
        """One sentence's residual stream X, X1, X2 (T, slots), FFN hidden H, output Y (T, 2)
        and each named head's attention map (T, T) under "attention"."""
        idx = torch.as_tensor(idx, dtype=torch.long)
        if idx.dim() == 1:
            idx = idx.unsqueeze(0)
        if idx.shape[0] != 1:
            raise ZooError("trace takes one sentence")
        run = self._run(idx)
        result = {name: run[name][0] for name in ("X", "X1", "X2", "H", "Y")}
        result["attention"] = {name: attention[0] for name, attention in run["attention"].items()}
        return result

    # -- the puzzle's tasks (called by `zoo sample` and `zoo eval`) ---------------

    def ask(self, tokenizer, prompt: str, explain: bool = False, png: Path | str | None = None) -> str:
        """The answer word and output vector, e.g. ``Human  [0.02, 1.00]``; with
        ``explain`` the residual stream and attention maps; with ``png`` a picture."""
        return answer_question(self, tokenizer, prompt, explain=explain, png=Path(png) if png else None)

    def evaluate(self, tokenizer) -> dict[str, Any]:
        """Accuracy over every well-formed sentence against the puzzle's rule."""
        return evaluate_network(self, tokenizer)

    def ablate_answers(self, tokenizer, groups=None) -> dict[str, Any]:
        """How many sentences change their answer when each group of heads
        (LAYER.HEAD pairs, from 0; None: each head alone) is zeroed (`roles.ablate_answers`)."""
        return ablate_answers(self, tokenizer, groups)

    def verify_roles(self, tokenizer, roles=None) -> dict[str, Any]:
        """Every head role the explanation claims, checked by ablating that head
        (`roles.verify_roles`; ``roles`` defaults to the explanation's, `roles.ROLES`)."""
        return verify_roles(self, tokenizer, ROLES if roles is None else roles)


def _first_difference(given: list[str], expected: list[str]) -> str:
    for i, (a, b) in enumerate(zip(given, expected)):
        if a != b:
            return f"slot {i} is '{a}', expected '{b}'"
    return f"{len(given)} slots given, the layout has {len(expected)}"


# -- the hand-set weights ---------------------------------------------------------


def hand_set_state_dict(positions: bool = True, max_tokens: int = 6) -> dict[str, torch.Tensor]:
    """Seed 003's weights, written slot by slot (as its notebook builds Wq_O, Wk_P, ...)."""
    weights = {name: torch.zeros_like(t) for name, t in PuzzleTransformer(positions, max_tokens).state_dict().items()}
    slot = SlotLayout(slot_names(positions, max_tokens))

    # Embedding: a word switches on its feature slots, a position its one-hot slot.
    for token_id, features in enumerate(TOKEN_FEATURES.values()):
        for feature in features:
            weights["token_embedding"][token_id, slot[feature]] = 1
    if positions:
        for p in range(max_tokens):
            weights["position_embedding"][p, slot[position_slot(p)]] = 1

    # Layer 1, object head (Wq_O, Wk_O, Wv_O, Wo_O): the question finds the
    # object word and copies whether it flies and speaks.
    head = "layer1.object_head."
    weights[head + "query"][slot["question"], 0] = QUESTION_FOCUS
    weights[head + "key"][slot["object"], 0] = 1
    weights[head + "value"][slot["fly"], 0] = 1
    weights[head + "value"][slot["speak"], 1] = 1
    weights[head + "output"][0, slot["object_attribute_fly"]] = 1
    weights[head + "output"][1, slot["object_attribute_speak"]] = 1

    # Layer 1, previous-word head (Wq_P, Wk_P, Wv_P, Wo_P): the query of
    # position p matches only the key of position p-1, so each token attends to
    # the word before it and copies its disobey bit. Position 0 has no word
    # before it and no query: it spreads its attention evenly.
    if positions:
        head = "layer1.previous_word_head."
        for p in range(1, max_tokens):
            weights[head + "query"][slot[position_slot(p)], p - 1] = PREVIOUS_WORD_FOCUS
        for p in range(max_tokens):
            weights[head + "key"][slot[position_slot(p)], p] = 1
        weights[head + "value"][slot["disobey"], 0] = 1
        weights[head + "output"][0, slot["previous_word_is_disobey"]] = 1

    # Layer 2, flight and speech heads (Wq/Wk/Wv of each, Wo_2 shared): the
    # question finds its action word and copies (does it swap, was it disobeyed).
    for name, action, swap in (("flight", "action_fly", "swap_fly"), ("speech", "action_speak", "swap_speak")):
        head = f"layer2.{name}_head."
        weights[head + "query"][slot["question"], 0] = QUESTION_FOCUS
        weights[head + "key"][slot[action], 0] = 1
        weights[head + "value"][slot[swap], 0] = 1
        weights[head + "value"][slot["previous_word_is_disobey"], 1] = 1
    written_by_layer2 = ("is_swap_attr_fly", "is_attr_fly_disobeyed", "is_swap_attr_speak", "is_attr_speak_disobeyed")
    for row, target in enumerate(written_by_layer2):  # rows: flight head's two values, then speech head's
        weights["layer2.output"][row, slot[target]] = 1

    # Parity FFN (W1, b1, W2): per ability, count the flips (object has it,
    # action swaps, action disobeyed) and output whether the count is odd.
    for output_column, ability in enumerate(("fly", "speak")):
        hidden = slice(4 * output_column, 4 * output_column + 4)
        for source in (f"object_attribute_{ability}", f"is_swap_attr_{ability}", f"is_attr_{ability}_disobeyed"):
            weights["parity_ffn.W1"][slot[source], hidden] = 1
        weights["parity_ffn.b1"][hidden] = torch.tensor(PARITY_THRESHOLDS)
        weights["parity_ffn.W2"][hidden, output_column] = torch.tensor(PARITY_READOUT)
    return weights


# -- the factory registered as 'puzzle' ---------------------------------------------

CONFIG_KEYS = ("positions", "max_tokens", "slots", "context_length", "vocab_size")


def build_puzzle(config: dict[str, Any], components=None) -> PuzzleTransformer:
    """A zero network for the card's config; its checkpoint holds the hand-set weights."""
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise ZooError(
            f"architecture 'puzzle': unknown config key(s) {', '.join(unknown)} (known: {', '.join(CONFIG_KEYS)})"
        )
    max_tokens = config.get("max_tokens", 6)
    context_length = config.get("context_length", max_tokens)
    if context_length != max_tokens:
        raise ZooError(
            f"architecture 'puzzle': context_length {context_length} must equal max_tokens {max_tokens} (one position per token)"
        )
    vocab_size = config.get("vocab_size", len(VOCABULARY))
    if vocab_size != len(VOCABULARY):
        raise ZooError(
            f"architecture 'puzzle': vocab_size must be {len(VOCABULARY)} (the puzzle's words), not {vocab_size}"
        )
    return PuzzleTransformer(positions=config.get("positions", True), max_tokens=max_tokens, slots=config.get("slots"))
