"""A Hugging Face Hub model card (README.md) for an exported variant, and reading one back.

`zoo export --format hf` writes README.md beside the weights: YAML front matter
the Hub reads (license, library, pipeline, tags, datasets, a model-index with the
measured validation loss and bits per byte) and a body for people (description,
lineage, recipe, how to load). huggingface_hub's ``ModelCard`` parses it and its
``ModelCardData`` checks the model-index locally; the Hub's server-side check
is not reachable offline.

What is written, and why:

- ``license``: the Hub's identifier when the zoo's text names one (``MIT`` ->
  ``mit``); otherwise ``other`` with a ``license_name`` and the card's own words
  in a LICENSE file (``license_link``). ``unspecified`` is the Hub's ``unknown``.
- ``datasets``: the recipe's dataset when a plugin registers it (another machine
  with the same plugins has the same text); a user's own dataset or a file path
  is private and not named.
- ``base_model``: never from the zoo. The Hub reads it as a Hub repository id, and
  a fine-tune's ``recipe.base`` is a zoo variant name (which cannot contain the
  '/' of an id): writing it there would point at some other model, or none. The
  zoo base (name and checkpoint sha256) goes in the text and under ``zoo``.
- ``zoo``: what the Hub has no field for (variant, architecture, checkpoint and
  data sha256, base, adapter, the plugins that provided each component, the
  card's license text), so `zoo import hf` can read it back exactly.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any

from ..errors import ZooError, printable
from ..plugin_api.manager import get_plugins
from ..storage.files import atomic_write_text, read_limited

# Lower-cased zoo license texts -> the Hub's license identifiers (its list of
# licenses; the Hub's identifiers are lower-case SPDX ones where SPDX has one).
HUB_LICENSES = {
    "mit": "mit",
    "apache-2.0": "apache-2.0",
    "apache 2.0": "apache-2.0",
    "apache license 2.0": "apache-2.0",
    "bsd-2-clause": "bsd-2-clause",
    "bsd-3-clause": "bsd-3-clause",
    "isc": "isc",
    "mpl-2.0": "mpl-2.0",
    "gpl-2.0": "gpl-2.0",
    "gpl-3.0": "gpl-3.0",
    "lgpl-2.1": "lgpl-2.1",
    "lgpl-3.0": "lgpl-3.0",
    "agpl-3.0": "agpl-3.0",
    "cc0-1.0": "cc0-1.0",
    "cc-by-4.0": "cc-by-4.0",
    "cc-by-sa-4.0": "cc-by-sa-4.0",
    "cc-by-nc-4.0": "cc-by-nc-4.0",
    "cc-by-nc-sa-4.0": "cc-by-nc-sa-4.0",
    "unlicense": "unlicense",
    "openrail": "openrail",
    "unspecified": "unknown",
    "unknown": "unknown",
}
# The spelling `zoo import hf` gives a Hub identifier back (the SPDX one).
ZOO_LICENSES = {"mit": "MIT", "apache-2.0": "Apache-2.0", "unknown": "unspecified"}
LICENSE_FILE = "LICENSE"
MAX_README_BYTES = 1024 * 1024
FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


def hub_license(text: str) -> tuple[str, str | None]:
    """The Hub's license identifier for a card's license text, and a
    ``license_name`` (a slug of the text) when the identifier is ``other``."""
    key = " ".join(text.lower().split())
    if key in HUB_LICENSES:
        return HUB_LICENSES[key], None
    slug = re.sub(r"[^a-z0-9.]+", "-", key).strip("-")[:64].strip("-")
    return "other", slug or "custom"


def registered_dataset(card: Any) -> str | None:
    """The recipe's dataset when a plugin registers it; None for a private text. For
    weights trained elsewhere (no recipe), the registered dataset their source named, if any."""
    if card.recipe is None:
        data = card.imported.dataset if card.imported is not None else None
    else:
        data = card.recipe.data if card.recipe.kind != "hand-built" else None
    return data if data and data in get_plugins().datasets.plugin_names() else None


def _zoo_section(card: Any) -> dict[str, Any]:
    recipe = card.recipe
    section: dict[str, Any] = {
        "variant": card.name,
        "architecture": card.architecture,
        "license": card.license,
        "checkpoint_sha256": card.checkpoint.sha256,
    }
    if recipe is None:
        if card.imported is not None:
            section["imported"] = card.imported.model_dump(mode="json", exclude_none=True)
    elif recipe.kind != "hand-built":
        section["data"] = registered_dataset(card) or "private"
        section["data_sha256"] = recipe.data_sha256
    if recipe is not None and recipe.base is not None:
        section["base"] = {"name": recipe.base, "sha256": recipe.base_sha256}
    if card.adapter is not None:
        adapter = card.adapter
        section["adapter"] = {"kind": adapter.kind, "base": adapter.base, "sha256": adapter.base_sha256}
    if card.components:
        section["components"] = {role: source.model_dump(mode="json") for role, source in card.components.items()}
    return {key: value for key, value in section.items() if value is not None}


def eval_results(card: Any) -> list[Any]:
    """The card's measured validation metrics as huggingface_hub ``EvalResult``s (none when none were measured)."""
    from huggingface_hub import EvalResult

    metrics, dataset = card.metrics, registered_dataset(card)
    measured = [
        ("loss", f"validation loss ({metrics.loss_unit})", metrics.validation_loss),
        ("bits_per_byte", "validation bits per byte", metrics.validation_bits_per_byte),
    ]
    share = f"last {1 - card.train_fraction:.0%} of the text"
    return [
        EvalResult(
            task_type="text-generation",
            task_name="Text Generation",
            dataset_type=dataset or "private",
            dataset_name=f"{dataset} ({share})" if dataset else f"private text ({share})",
            dataset_split="validation",
            metric_type=kind,
            metric_name=name,
            metric_value=value,
        )
        for kind, name, value in measured
        if value is not None
    ]


def hub_metadata(card: Any, family: str = "gpt2", base_model: str | None = None) -> Any:
    """The README's front matter as a huggingface_hub ``ModelCardData`` (which
    checks the model-index as it is built). ``family``: the transformers model
    type the folder is laid out as (a tag, as the Hub tags models); ``base_model``:
    the Hub repository the weights came from, when the source named one."""
    from huggingface_hub import ModelCardData

    license_id, license_name = hub_license(card.license)
    tags = [*card.tags, "zoo", card.architecture, family, f"{card.tokenizer.kind}-tokenizer"]
    if card.chat is not None:
        tags.append("conversational")
    dataset = registered_dataset(card)
    results = eval_results(card)
    return ModelCardData(
        license=license_id,
        license_name=license_name,
        license_link=LICENSE_FILE if license_name else None,
        library_name="transformers",
        base_model=base_model,
        pipeline_tag="text-generation",
        tags=list(dict.fromkeys(tags)),
        datasets=[dataset] if dataset else None,
        model_name=card.name if results else None,
        eval_results=results or None,
        zoo=_zoo_section(card),
    )


def _provenance_lines(card: Any) -> list[str]:
    """Where weights trained elsewhere came from, in place of a recipe the zoo never had."""
    found = card.imported
    if found is None:
        return ["Trained elsewhere; the zoo has no record of how.", ""]
    lines = [
        f"Trained elsewhere, not by the zoo: imported with `zoo import` from the {found.format} file "
        f"`{found.file}` (sha256 `{found.sha256}`), {card.parameters:,} parameters."
        if card.parameters is not None
        else f"Trained elsewhere, not by the zoo: imported with `zoo import` from the {found.format} file "
        f"`{found.file}` (sha256 `{found.sha256}`).",
        "",
    ]
    if found.notes:
        lines += [found.notes, ""]
    return lines


def _recipe_rows(card: Any) -> list[tuple[str, str]]:
    recipe = card.recipe.model_dump(mode="json", exclude_none=True)
    recipe.pop("notes", None)
    if "data" in recipe:
        recipe["data"] = registered_dataset(card) or "a private text (not published)"
    # A bare | would split the Markdown table's cell.
    return [(key, "`" + str(value).replace("|", "\\|") + "`") for key, value in recipe.items()]


def hub_readme(card: Any, family: str = "gpt2", base_model: str | None = None) -> str:
    """README.md for the exported folder: front matter, then the card for people."""
    metadata = hub_metadata(card, family, base_model)
    name, metrics = card.name, card.metrics
    lines = [f"# {name}", "", " ".join(card.description.split()), ""]
    lines += [
        f"A {card.architecture} language model from the zoo, exported with `zoo export {name} --format hf` "
        f"as a folder laid out as transformers' `{family}`: the export was checked to give the zoo's logits "
        "(to 1e-4) and token ids.",
        "",
        "## Lineage",
        "",
        card.lineage,
        "",
    ]
    if card.recipe is not None and card.recipe.base is not None:
        lines += [
            f"Fine-tuned from the zoo variant `{card.recipe.base}` (checkpoint sha256 `{card.recipe.base_sha256}`). "
            "That is a zoo name, not a Hub repository, so `base_model` is not set.",
            "",
        ]
    if card.adapter is not None:
        lines += [
            f"Made as a `{card.adapter.kind}` adapter on `{card.adapter.base}` "
            f"(sha256 `{card.adapter.base_sha256}`); this export has the adapter folded into the weights.",
            "",
        ]
    if card.recipe is None:
        lines += ["## Provenance", "", *_provenance_lines(card)]
    else:
        lines += ["## Recipe", "", "| setting | value |", "|---|---|"]
        lines += [f"| {key} | {value} |" for key, value in _recipe_rows(card)]
        lines.append("")
    measured = [
        ("validation loss", metrics.validation_loss, metrics.loss_unit),
        ("validation bits per byte", metrics.validation_bits_per_byte, "bits per UTF-8 byte"),
        ("validation perplexity", metrics.validation_perplexity, "per token"),
    ]
    if any(value is not None for _, value, _ in measured):
        lines += ["## Evaluation", "", "Measured by the zoo on the validation split:", ""]
        lines += ["| metric | value | unit |", "|---|---|---|"]
        lines += [f"| {what} | {value} | {unit} |" for what, value, unit in measured if value is not None]
        lines.append("")
    if card.components:
        lines += ["## Components", "", "| role | component | plugin | distribution |", "|---|---|---|---|"]
        lines += [
            f"| {role} | {s.name} | {s.plugin} | {s.distribution} {s.version} |" for role, s in card.components.items()
        ]
        lines.append("")
    lines += [
        "## How to load",
        "",
        "With transformers (this folder, or the Hub repository it is uploaded to):",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        'model = AutoModelForCausalLM.from_pretrained("PATH")',
        'tokenizer = AutoTokenizer.from_pretrained("PATH")',
        'ids = tokenizer("ROMEO:", return_tensors="pt").input_ids',
        f"# generation_config.json stops generate at the {card.context_length}-token context window (max_length)",
        "print(tokenizer.decode(model.generate(ids, do_sample=True)[0]))",
        "```",
        "",
        "With the zoo (`pip install 'zoo-lm[hf]'`), back into a zoo variant:",
        "",
        "```bash",
        f"zoo import hf PATH --name {name}-hf",
        f"zoo sample {name}-hf --prompt 'ROMEO:'",
        "```",
        "",
        "## License",
        "",
        card.license,
        "",
    ]
    return f"---\n{metadata.to_yaml()}\n---\n\n" + "\n".join(lines)


def write_hub_card(card: Any, out: Path, family: str = "gpt2", base_model: str | None = None) -> list[Path]:
    """README.md (and LICENSE, for a license the Hub has no identifier for) in ``out``."""
    written = [out / "README.md"]
    atomic_write_text(written[0], hub_readme(card, family, base_model))
    if hub_license(card.license)[1] is not None:
        written.append(out / LICENSE_FILE)
        atomic_write_text(written[1], card.license.rstrip() + "\n")
    return written


# --- reading one back -----------------------------------------------------------


def _warn(path: Path, problem: str) -> None:
    print(f"zoo: warning: {path}: {printable(problem)}; its metadata was not read", file=sys.stderr)


def read_hub_card(folder: Path) -> tuple[dict[str, Any], str] | None:
    """The front matter (a dict) and body of ``folder``/README.md. None, without a
    word, when there is none (a README is optional); None with one warning line
    when its front matter is not YAML, or not a table."""
    path = folder / "README.md"
    if not path.is_file():
        return None
    try:
        text = read_limited(path, MAX_README_BYTES, "model card").decode("utf-8")
    except (ZooError, UnicodeDecodeError) as exc:
        _warn(path, f"not read ({exc})" if isinstance(exc, ZooError) else "not UTF-8 text")
        return None
    match = FRONT_MATTER.match(text)
    if match is None:
        return {}, text  # a README without front matter: a body only
    try:  # PyYAML comes with huggingface_hub (the hf extra) and ships no types: read as Any
        yaml = importlib.import_module("yaml")
    except ImportError:
        _warn(path, "reading its front matter needs PyYAML (pip install 'zoo-lm[hf]')")
        return None
    try:
        metadata = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        _warn(path, "front matter is not valid YAML" + (f" (line {where.line + 2})" if where is not None else ""))
        return None
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        _warn(path, f"front matter is a YAML {type(metadata).__name__}, not a table")
        return None
    return metadata, text[match.end() :]


def _texts(value: Any) -> list[str]:
    """A metadata field that may be one string or a list of them, as strings (anything else: none)."""
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, str) and v.strip()]


def first_paragraph(body: str) -> str | None:
    """The body's first paragraph of prose (the description `hub_readme` writes under the title)."""
    for block in re.split(r"\n\s*\n", body):
        text = " ".join(block.split())
        if text and not text.startswith(("#", "|", "```", "<", "!", "-", "*")):
            return text[:500]
    return None


def card_fields_from_hub(metadata: dict[str, Any], body: str) -> dict[str, Any]:
    """What a zoo card takes from a Hub card: license, tags, description, a
    dataset name, and notes saying what it claims but the zoo did not measure
    (its metrics) or cannot point at (a Hub base model). Only fields present come back."""
    zoo: dict[str, Any] = metadata["zoo"] if isinstance(metadata.get("zoo"), dict) else {}
    fields: dict[str, Any] = {}
    license_id = metadata.get("license")
    if isinstance(zoo.get("license"), str) and zoo["license"].strip():
        fields["license"] = zoo["license"]  # the zoo's own words, which the Hub's identifier may have lost
    elif isinstance(license_id, str) and license_id.strip():
        if license_id == "other":
            fields["license"] = "other: " + (_texts(metadata.get("license_name")) or ["unnamed"])[0]
        else:
            fields["license"] = ZOO_LICENSES.get(license_id, license_id)
    tags = _texts(metadata.get("tags"))
    if tags:
        fields["tags"] = tags
    description = first_paragraph(body)
    if description:
        fields["description"] = description
    datasets = _texts(metadata.get("datasets"))
    if datasets:
        fields["datasets"] = datasets
    notes = []
    bases = _texts(metadata.get("base_model"))
    if bases:
        fields["base_model"] = bases
        notes.append(f"base model on the Hub: {', '.join(bases)}")
    if isinstance(zoo.get("variant"), str):
        notes.append(
            f"exported from the zoo variant '{zoo['variant']}' (checkpoint sha256 {zoo.get('checkpoint_sha256')})"
        )
    base = zoo.get("base") if isinstance(zoo.get("base"), dict) else None
    if base and isinstance(base.get("name"), str):
        notes.append(f"fine-tuned in the zoo from '{base['name']}' (sha256 {base.get('sha256')})")
    reported = _reported_metrics(metadata.get("model-index"))
    if reported:
        fields["reported_metrics"] = reported
        notes.append(
            "its model card reports "
            + "; ".join(f"{r['metric']} {r['value']} on {r['dataset']}" for r in reported)
            + " (not measured here: `zoo eval NAME --record` measures)"
        )
    if notes:
        fields["notes"] = notes
    return fields


def _reported_metrics(model_index: Any) -> list[dict[str, Any]]:
    """The model-index's results through huggingface_hub's own reading of it; none when it has none or is malformed."""
    if not model_index:
        return []
    try:
        from huggingface_hub.repocard_data import model_index_to_eval_results

        _, results = model_index_to_eval_results(model_index)
    except Exception:  # any malformed model-index: the README is optional, its metrics only notes
        return []
    return [
        {"metric": r.metric_name or r.metric_type, "value": r.metric_value, "dataset": r.dataset_name}
        for r in results
        if isinstance(r.metric_value, (int, float, str))
    ]
