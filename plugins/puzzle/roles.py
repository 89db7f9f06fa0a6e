"""The explanation's head roles, stated declaratively, and their check by ablation.

Each role says what one head carries (the seed's explanation, `HEAD_TITLES`) and
therefore how the puzzle reads without it: a rewriting of the sentence that
`rule.expected_answer` then answers. The prediction of which sentences an
ablation changes comes from that reading and the rule alone, never from running
the network. `verify_roles` then zeroes each head's ``result`` hook point over
every well-formed sentence and compares: the sentences predicted to change must
change, and the others must not. (It also counts the ablated answers that equal
the rule's answer for the reading, ``answers_as_role_reading``: all of them
where the rest of the network is right.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from zoo_core.errors import ZooError
from zoo_core.inspection.roles import format_role_report
from zoo_core.plugin_api.hook_points import hook_point_names, hooks

from .readout import HEAD_TITLES, read_answer
from .rule import FLIGHT_ACTIONS, OBJECT_ABILITIES, SPEECH_ACTIONS, expected_answer, well_formed_sentences
from .slots import DISOBEYS, QUESTION

if TYPE_CHECKING:
    from .model import PuzzleTransformer

Words = Sequence[str]


@dataclass(frozen=True)
class HeadRole:
    """One head's role: ``head`` (a key of HEAD_TITLES), the hook point whose
    zeroing removes it, the role in words, and ``reads_as``: the sentence as the
    rest of the network reads it once this head is gone."""

    head: str
    hook: str
    role: str
    reads_as: Callable[[Words], list[str]]

    @property
    def title(self) -> str:
        return HEAD_TITLES.get(self.head, self.head)

    def predicts_change(self, words: Words) -> bool:
        """Whether removing the head changes the rule's answer (no network involved)."""
        return expected_answer(self.reads_as(words)) != expected_answer(words)


def _as_rock(words: Words) -> list[str]:
    # Rock is the object with no ability: what the question sees with no abilities copied.
    return ["Rock" if word in OBJECT_ABILITIES else word for word in words]


def _without_disobeys(words: Words) -> list[str]:
    return [word for word in words if word != DISOBEYS]


def _kept_obeyed(actions: tuple[str, ...], kept: str) -> Callable[[Words], list[str]]:
    """The sentence with its action among ``actions`` read as ``kept``, obeyed: what the
    question sees when the head that fetches that action's swap and disobey bits is gone."""

    def reads_as(words: Words) -> list[str]:
        out: list[str] = []
        for word in words:
            if word in actions:
                if out and out[-1] == DISOBEYS:
                    out.pop()
                word = kept
            out.append(word)
        return out

    return reads_as


ROLES: tuple[HeadRole, ...] = (
    HeadRole(
        "object",
        "layer1.object_head.result",
        "the question copies the object's abilities (flies, speaks); without it every object reads as Rock",
        _as_rock,
    ),
    HeadRole(
        "previous_word",
        "layer1.previous_word_head.result",
        "each word learns whether the word before it is 'disobeys'; without it no action is disobeyed",
        _without_disobeys,
    ),
    HeadRole(
        "flight",
        "layer2.flight_head.result",
        "the question fetches whether the flight action swaps and was disobeyed; without it flight is kept, obeyed",
        _kept_obeyed(FLIGHT_ACTIONS, "keep-flight"),
    ),
    HeadRole(
        "speech",
        "layer2.speech_head.result",
        "the question fetches whether the speech action swaps and was disobeyed; without it speech is kept, obeyed",
        _kept_obeyed(SPEECH_ACTIONS, "keep-speech"),
    ),
)


def _zero(activation: torch.Tensor, name: str) -> torch.Tensor:
    return torch.zeros_like(activation)


@torch.no_grad()
def _answers(network: PuzzleTransformer, batches, ablate: Sequence[str] = ()) -> list[str]:
    """The network's answer to every sentence of ``batches``, the hook points ``ablate`` zeroed."""
    answers: list[str] = []
    with hooks(network, {name: _zero for name in ablate}):
        for sentences, ids in batches:
            outputs, _ = network(ids)
            answers += [read_answer(output[words.index(QUESTION)]) for words, output in zip(sentences, outputs)]
    return answers


def _sentence_batches(network: PuzzleTransformer, tokenizer) -> list[tuple[list[list[str]], torch.Tensor]]:
    """Every well-formed sentence, batched by length: attention has no mask, so nothing may be padded."""
    by_length: dict[int, list[list[str]]] = {}
    for words in well_formed_sentences(network.max_tokens):
        by_length.setdefault(len(tokenizer.encode(" ".join(words))), []).append(list(words))
    return [
        (group, torch.tensor([tokenizer.encode(" ".join(words)) for words in group], dtype=torch.long))
        for group in by_length.values()
    ]


def _head_hook(network: PuzzleTransformer, layer: int, head: int) -> tuple[str, str]:
    """(title, hook point) of head LAYER.HEAD, or a ZooError naming the heads there are."""
    layers = network.heads_by_layer
    listing = "; ".join(
        f"{i}.{j} {HEAD_TITLES[name]}" for i, names in enumerate(layers) for j, name in enumerate(names)
    )
    if layer >= len(layers) or head >= len(layers[layer]):
        raise ZooError(f"no head {layer}.{head} in this puzzle network; its heads are {listing}")
    name = layers[layer][head]
    return HEAD_TITLES[name], f"layer{layer + 1}.{name}_head.result"


def ablate_answers(
    network: PuzzleTransformer, tokenizer, groups: Sequence[Sequence[tuple[int, int]]] | None = None
) -> dict[str, Any]:
    """For each group of heads (LAYER.HEAD, from 0; None: each head alone), zeroed
    together: how many of the well-formed sentences change their answer, with the
    first few as examples."""
    if groups is None:
        groups = [[(layer, head)] for layer, names in enumerate(network.heads_by_layer) for head in range(len(names))]
    batches = _sentence_batches(network, tokenizer)
    ordered = [" ".join(words) for group, _ in batches for words in group]
    clean = _answers(network, batches)
    ablations = []
    for group in groups:
        named = [_head_hook(network, layer, head) for layer, head in group]
        ablated = _answers(network, batches, [hook for _, hook in named])
        changed = [
            {"sentence": sentence, "answer": before, "ablated": after}
            for sentence, before, after in zip(ordered, clean, ablated)
            if before != after
        ]
        ablations.append(
            {
                "heads": [f"{layer}.{head}" for layer, head in group],
                "titles": [title for title, _ in named],
                "changed": len(changed),
                "examples": changed[:3],
            }
        )
    return {"method": "zero", "sentences": len(ordered), "ablations": ablations}


def verify_roles(network: PuzzleTransformer, tokenizer, roles: Sequence[HeadRole] = ROLES) -> dict[str, Any]:
    """Ablate each role's head over every well-formed sentence and compare with the role's prediction.

    A role holds when every sentence predicted to change changes and every other
    sentence keeps its answer. ``answers_as_role_reading`` also counts the ablated
    answers equal to the rule's answer for the role's reading: all of them where
    the rest of the network is right, fewer where it is not (without positions,
    where no action is ever disobeyed). A role whose
    hook point the network lacks (the previous-word head without positions) is
    reported absent. ``holds`` is true only when every role holds."""
    batches = _sentence_batches(network, tokenizer)
    ordered = [words for group, _ in batches for words in group]
    clean = _answers(network, batches)
    points = set(hook_point_names(network))
    results = []
    for role in roles:
        predicted = [role.predicts_change(words) for words in ordered]
        entry: dict[str, Any] = {
            "head": role.head,
            "title": role.title,
            "hook": role.hook,
            "role": role.role,
            "sentences": len(ordered),
            "predicted_to_change": sum(predicted),
        }
        if role.hook not in points:
            entry.update(verdict="absent", holds=False, changed_as_predicted=0, unchanged_as_predicted=0)
            entry["note"] = f"this network has no hook point '{role.hook}': the head does not exist"
            results.append(entry)
            continue
        ablated = _answers(network, batches, [role.hook])
        changed = [a != b for a, b in zip(ablated, clean)]
        changed_ok = sum(p and c for p, c in zip(predicted, changed))
        unchanged_ok = sum(not p and not c for p, c in zip(predicted, changed))
        wrong = [
            {
                "sentence": " ".join(words),
                "predicted": "change" if p else "no change",
                "answer": before,
                "ablated": after,
                "role_reading": expected_answer(role.reads_as(words)),
            }
            for words, p, c, before, after in zip(ordered, predicted, changed, clean, ablated)
            if p != c
        ]
        holds = not wrong
        entry.update(
            changed_as_predicted=changed_ok,
            unchanged_as_predicted=unchanged_ok,
            answers_as_role_reading=sum(
                answer == expected_answer(role.reads_as(words)) for words, answer in zip(ordered, ablated)
            ),
            verdict="holds" if holds else "fails",
            holds=holds,
            mismatches_total=len(wrong),
            mismatches=wrong[:5],
        )
        results.append(entry)
    rule_agrees = sum(answer == expected_answer(words) for words, answer in zip(ordered, clean))
    return {
        "sentences": len(ordered),
        "answers_as_rule": rule_agrees,
        "roles": results,
        "holds": all(entry["holds"] for entry in results),
    }


__all__ = ["ROLES", "HeadRole", "ablate_answers", "format_role_report", "verify_roles"]
