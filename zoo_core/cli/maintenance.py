"""Looking after the catalogue: datasets (list, add, remove), remove. Free of
torch and pydantic, as `zoo datasets` and `zoo remove` are (verify and
card-schema, which need them, are in checks.py)."""

from __future__ import annotations

import json
import os

from ..catalogue.removal import remove_variant
from ..corpus.text_files import USER
from ..corpus.user_datasets import add_user_dataset, remove_user_dataset
from ..errors import ZooError
from ..plugin_api.manager import get_plugins
from ..storage.locations import user_registry_path
from .tables import render_table


def _dataset_rows() -> list[dict]:
    """Every dataset, usable ones by name, then the user's that plugins shadow."""
    plugins = get_plugins()

    def row(d, shadowed_by: list[str] | None = None) -> dict:
        size = d.size
        if size is None:
            try:
                size = os.stat(d.path).st_size
            except OSError:
                size = None
        info = plugins.plugins.get(d.plugin)
        return {
            "name": d.name,
            "source": USER if d.plugin == USER else "built-in" if info is not None and info.builtin else d.plugin,
            "plugin": d.plugin,
            "kind": d.kind,
            "file": str(d.path),
            "size": size,
            "sha256": d.sha256,
            "train_fraction": d.train_fraction,
            "description": d.description,
            "added": d.added or None,
            "shadowed_by": shadowed_by,
        }

    datasets = plugins.datasets
    rows = [row(d) for d in datasets]
    rows += [row(d, datasets.plugin_owners(d.name)) for d in datasets.shadowed()]
    return rows


def cmd_datasets(args) -> int:
    rows = _dataset_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        raise ZooError("no datasets registered")
    print(
        render_table(
            ["name", "source", "size", "split", "sha256", "files"],
            [
                [
                    r["name"],
                    r["source"] + (" (shadowed)" if r["shadowed_by"] else ""),
                    f"{r['size']:,}" if r["size"] is not None else "-",
                    f"{r['train_fraction']:.0%} train",
                    r["sha256"][:16] + "…",
                    r["file"] + ("/" if r["kind"] == "folder" else ""),
                ]
                for r in rows
            ],
            right={2},
        )
    )
    shadowed = [r for r in rows if r["shadowed_by"]]
    if shadowed:
        print()
        for r in shadowed:
            owners = " and ".join(f"'{p}'" for p in r["shadowed_by"])
            print(
                f"your dataset '{r['name']}' is unused: plugin {owners} registers that name too, and wins; "
                f"`zoo datasets remove {r['name']}`, then add it under another name"
            )
    return 0


def cmd_datasets_add(args) -> int:
    dataset, text, replaced = add_user_dataset(
        args.name, args.path, args.description, args.train_fraction, replace=args.replace, plugins=get_plugins()
    )
    count = len(text.files)
    print(
        f"{'replaced' if replaced else 'added'} dataset '{dataset.name}': {count} file{'s' if count != 1 else ''}, "
        f"{dataset.size:,} bytes, sha256 {dataset.sha256[:16]}…"
    )
    return 0


def cmd_datasets_remove(args) -> int:
    removed = remove_user_dataset(args.name, plugins=get_plugins())
    print(f"removed dataset '{removed.name}' from your datasets; its files ({removed.path}) are untouched")
    return 0


def cmd_remove(args) -> int:
    removed, deleted = remove_variant(args.name, with_adapters=args.with_adapters)
    adapters = ", ".join(f"'{name}'" for name in removed[1:])
    print(
        f"removed '{args.name}'{f' and its adapters {adapters}' if adapters else ''} from your catalogue"
        + "".join(f"\n  deleted {path}" for path in deleted)
        + "".join(
            f"\n  kept its run logs in {folder} (the record of how it was trained; delete them by hand)"
            for folder in _run_logs(removed)
        )
    )
    return 0


def _run_logs(names: list[str]) -> list:
    """The run-log folders of removed variants that are still there: kept, since
    a training record outlives its weights, and named, so nothing is left unsaid."""
    runs = user_registry_path().expanduser().parent / "runs"
    return [runs / name for name in names if (runs / name).is_dir()]
