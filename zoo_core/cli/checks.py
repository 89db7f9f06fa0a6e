"""Checking the catalogue: verify (every checkpoint against its card) and
card-schema (the cards' schema, from pydantic)."""

from __future__ import annotations

import json

from ..catalogue.card_docs import card_schema, cards_markdown
from ..errors import ZooError
from ..loading.verify import FAILED, verify_catalogue
from .tables import render_table


def cmd_verify(args) -> int:
    rows = verify_catalogue(args.pattern)
    if not rows:
        raise ZooError(f"no variant matches '{args.pattern}'" if args.pattern else "no variants registered")
    if args.json:
        print(json.dumps([row.as_dict() for row in rows], indent=2))
    else:
        print(
            render_table(
                ["name", "plugin", "file", "status", "detail"],
                [[r.name, r.plugin, r.file, r.status, r.detail] for r in rows],
            )
        )
    failed = [row for row in rows if row.status == FAILED]
    if failed:
        shown = ", ".join(f"{row.name} ({row.file})" for row in failed[:3]) + (" …" if len(failed) > 3 else "")
        raise ZooError(f"{len(failed)} of {len(rows)} failed verification: {shown}")
    return 0


def cmd_card_schema(args) -> int:
    print(cards_markdown() if args.markdown else json.dumps(card_schema(), indent=2))
    return 0
