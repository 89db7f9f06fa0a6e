"""What the puzzle network says: answers, explanations, pictures and its score.

Kept apart from the network so that `model.py` reads as the seed's construction.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from zoo_core.errors import ZooError
from zoo_core.evaluation.plots import attention_grid_png

from .readout import HEAD_TITLES, read_answer
from .rule import expected_answer, well_formed_sentences
from .slots import QUESTION

if TYPE_CHECKING:
    from .model import PuzzleTransformer

EXAMPLE_QUESTION = "Crow disobeys keep-flight swap-speech he-is?"
MAX_FAILURES_SHOWN = 10


def format_vector(values) -> str:
    # round first, then add 0.0: a value like -1e-6 would otherwise print as -0.00
    return "[" + ", ".join(f"{round(float(v), 2) + 0.0:.2f}" for v in values) + "]"


def _words_of(tokenizer, ids: list[int]) -> list[str]:
    return [tokenizer.decode([token_id]) for token_id in ids]


def _check_question(network: PuzzleTransformer, words: list[str]) -> int:
    """The position of the question token; raises ZooError for a prompt the network cannot answer."""
    if QUESTION not in words:
        raise ZooError(f"the prompt must ask '{QUESTION}' (e.g. '{EXAMPLE_QUESTION}')")
    if len(words) > network.max_tokens:
        raise ZooError(f"the prompt has {len(words)} words but the puzzle network has {network.max_tokens} positions")
    return words.index(QUESTION)  # the seed reads the first question


def answer_question(
    network: PuzzleTransformer, tokenizer, prompt: str, explain: bool = False, png: Path | None = None
) -> str:
    ids = tokenizer.encode(prompt)
    words = _words_of(tokenizer, ids)
    question = _check_question(network, words)
    trace = network.trace(torch.tensor(ids, dtype=torch.long))
    output = trace["Y"][question]
    lines = [f"{read_answer(output)}  {format_vector(output)}"]
    if explain:
        lines += ["", *explanation(network, words, trace, question)]
    if png is not None:
        write_attention_png(network, words, trace, png)
        lines.append(f"attention maps written to {png}")
    return "\n".join(lines)


# -- the explanation, as text -----------------------------------------------------


def _cell(value: float) -> str:
    return "." if value == 0 else f"{value:.2f}"  # exact zeros fade, leaks stay visible


def _grid(row_labels: list[str], column_labels: list[str], rows, label_width: int) -> list[str]:
    widths = [max(len(label), 4) for label in column_labels]
    header = " " * label_width + "  " + "  ".join(label.rjust(w) for label, w in zip(column_labels, widths))
    body = [
        label.ljust(label_width) + "  " + "  ".join(_cell(float(v)).rjust(w) for v, w in zip(row, widths))
        for label, row in zip(row_labels, rows)
    ]
    return [header.rstrip(), *(line.rstrip() for line in body)]


def _residual_table(network: PuzzleTransformer, words: list[str], stream, previous=None) -> list[str]:
    names = network.slots.names
    labels = []
    for i, name in enumerate(names):
        written = previous is not None and bool((stream[:, i] != previous[:, i]).any())
        labels.append(f"{i:2} {name}{' *' if written else ''}")
    width = max(len(name) for name in names) + len("99  *")  # the same in every table
    return _grid(labels, words, stream.T, width)


def _attention_tables(words: list[str], trace, heads: list[str]) -> list[str]:
    lines = []
    width = max(len(word) for word in words)
    for name in heads:
        lines += [f"{HEAD_TITLES[name]} (rows: each token's attention over the tokens)"]
        lines += ["  " + line for line in _grid(words, words, trace["attention"][name], width)]
    return lines


def explanation(network: PuzzleTransformer, words: list[str], trace, question: int) -> list[str]:
    first_heads = [h for h in network.head_names if h in ("object", "previous_word")]
    second_heads = ["flight", "speech"]
    return [
        "residual stream X: token features and positions, by slot (tokens across)",
        *_residual_table(network, words, trace["X"]),
        "",
        *_attention_tables(words, trace, first_heads),
        "",
        "residual stream X1 after layer 1 (* = slots layer 1 wrote)",
        *_residual_table(network, words, trace["X1"], trace["X"]),
        "",
        *_attention_tables(words, trace, second_heads),
        "",
        "residual stream X2 after layer 2 (* = slots layer 2 wrote)",
        *_residual_table(network, words, trace["X2"], trace["X1"]),
        "",
        f"parity FFN output Y (flies, speaks), read at '{words[question]}' (token {question})",
        *_grid(["flies", "speaks"], words, trace["Y"].T, len("speaks")),
    ]


# -- the attention maps, as a picture ------------------------------------------------


def write_attention_png(network: PuzzleTransformer, words: list[str], trace, path: Path) -> None:
    panels = [[(HEAD_TITLES[name], trace["attention"][name].numpy()) for name in network.head_names]]
    attention_grid_png(panels, words, " ".join(words), path, annotate=True)


# -- the score ------------------------------------------------------------------------


@torch.no_grad()
def evaluate_network(network: PuzzleTransformer, tokenizer) -> dict[str, Any]:
    """Every well-formed sentence, the network's answer against the rule's."""
    # Sentences of one length run as one batch: nothing may be padded, since
    # attention has no mask and a pad token would be attended to.
    by_length: dict[int, list[tuple[list[str], list[int]]]] = {}
    for words in well_formed_sentences(network.max_tokens):
        ids = tokenizer.encode(" ".join(words))
        by_length.setdefault(len(ids), []).append((words, ids))
    if not by_length:
        raise ZooError(f"no well-formed sentence fits in {network.max_tokens} positions (the shortest has 4 words)")
    correct, total = 0, 0
    failures: list[str] = []
    for batch in by_length.values():
        outputs, _ = network(torch.tensor([ids for _, ids in batch], dtype=torch.long))
        for (words, _), output in zip(batch, outputs):
            answer = output[words.index(QUESTION)]
            got, expected = read_answer(answer), expected_answer(words)
            total += 1
            if got == expected:
                correct += 1
            elif len(failures) < MAX_FAILURES_SHOWN:
                failures.append(f"{' '.join(words)}: got {got} {format_vector(answer)}, expected {expected}")
    # "failures" lists the first few; "failures_total" counts them all.
    return {
        "accuracy": correct / total,
        "correct": correct,
        "total": total,
        "failures_total": total - correct,
        "failures": failures,
    }
