"""Head roles checked by ablation: the report's shape and its text.

A network that states what each of its heads does (the puzzle, in
``zoo_plugins.puzzle.roles``) offers ``network.verify_roles(tokenizer)``; it
returns this report, which `zoo inspect NAME --verify-roles` prints::

    {"sentences": N, "answers_as_rule": n, "holds": bool,
     "roles": [{"head", "title", "hook", "role", "sentences", "predicted_to_change",
                "changed_as_predicted", "unchanged_as_predicted", "verdict", "holds",
                "mismatches_total", "mismatches": [{"sentence", "predicted", "answer",
                "ablated", "role_reading"}], "note"}]}

``verdict`` is "holds" (exactly the sentences the role predicts change),
"fails", or "absent" (the network has no such head; ``note`` says so).
"""

from __future__ import annotations

from typing import Any

from ..errors import ZooError
from ..plugin_api.protocols import AnswerAblating, RoleVerifying, implements


def verify_roles(model) -> dict[str, Any]:
    """The network's own check of its stated head roles, or a ZooError naming why there is none."""
    if not implements(model.network, RoleVerifying):
        raise ZooError(
            f"'{model.name}' states no head roles to verify; --verify-roles is for networks whose explanation "
            "names each head's role (the puzzle: puzzle-disobeys, puzzle-disobeys-nopos)"
        )
    return model.network.verify_roles(model.tokenizer)


def task_ablation(model, groups) -> dict[str, Any] | None:
    """For a task network that answers questions (the puzzle offers
    ``network.ablate_answers``), the answer changes when each group of heads is
    zeroed (``groups`` None: each head alone); None for a language model, whose
    ablation is the loss change on validation windows."""
    if not implements(model.network, AnswerAblating):
        return None
    return model.network.ablate_answers(model.tokenizer, groups)


def format_role_report(report: dict[str, Any], name: str = "") -> list[str]:
    """The report as a table, one row per role, then each role in words and the mismatches of those that fail."""
    lines = [
        f"{name + ': ' if name else ''}each head of the explanation zeroed over the {report['sentences']} "
        f"well-formed sentences (the network answers {report['answers_as_rule']} of them as the rule does)",
        "",
    ]
    header = ("head", "hook point", "predicted to change", "changed", "unchanged as predicted", "verdict")
    rows = []
    for entry in report["roles"]:
        others = entry["sentences"] - entry["predicted_to_change"]
        absent = entry["verdict"] == "absent"
        rows.append(
            (
                entry["title"],
                entry["hook"],
                str(entry["predicted_to_change"]),
                "-" if absent else f"{entry['changed_as_predicted']}/{entry['predicted_to_change']}",
                "-" if absent else f"{entry['unchanged_as_predicted']}/{others}",
                entry["verdict"],
            )
        )
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines.append("  ".join(cell.ljust(width) for cell, width in zip(header, widths)).rstrip())
    lines.append("  ".join("-" * width for width in widths))
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.append("")
    for entry in report["roles"]:
        lines.append(f"{entry['title']}: {entry['role']}")
        if entry["verdict"] == "absent":
            lines.append(f"  absent: {entry['note']}")
        elif not entry["holds"]:
            lines.append(
                f"  fails: on {entry['mismatches_total']} of the {entry['sentences']} sentences the ablation did not "
                "do what the role predicts; for example:"
            )
            for wrong in entry["mismatches"][:3]:
                lines.append(
                    f"    {wrong['sentence']}: predicted {wrong['predicted']}, answer {wrong['answer']} -> "
                    f"{wrong['ablated']} ablated (the role's reading: {wrong['role_reading']})"
                )
    lines.append("")
    if report["holds"]:
        lines.append("every role holds")
    else:
        by_verdict: dict[str, list[str]] = {}
        for entry in report["roles"]:
            by_verdict.setdefault(entry["verdict"], []).append(entry["title"])
        lines.append("not every role holds: " + "; ".join(f"{v}: {', '.join(t)}" for v, t in by_verdict.items()))
    return lines
