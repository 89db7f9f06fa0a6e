"""`zoo gallery`: a static site of every variant and study that opens from file://.

Layout of the output folder::

    index.html              every variant: sortable, filterable table; each results/*.csv
                            (a study's table, zoo_core.training.study_table) sortable too
    variants/NAME.html      card, lineage, loss curves, samples, attention, vs bigram,
                            logit lens and head ablation (zoo_core.inspection)
    studies/NAME.html       one page per study of docs/experiments.md
    puzzle.html             task variants: slots, heads, answers, head roles checked by ablation
    img/                    SVG pictures drawn here (and the studies' PNGs)
    static/zoo.css          the one style sheet

Nothing is fetched at view time: data are written into the pages, pictures are
files beside them, and there are no remote fonts, scripts or styles. What costs
model time (samples, attention maps, the bigram comparison, the logit lens,
the head ablations, the puzzle's role check) is cached per
variant under the checkpoint's sha256, so a second run only re-renders.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from ..catalogue.history import TrainingHistory, read_history
from ..catalogue.publishing import history_of
from ..corpus.batches import Corpus, mean_loss
from ..errors import ZooError
from ..evaluation.bits import bits_per_byte, validation_text
from ..evaluation.budget import (
    COMPUTE_BUDGET,
    MIN_WINDOWS,
    default_context,
    shape_of,
    size_windows,
    text_characters,
)
from ..evaluation.compare import shared_windows
from ..inference.settings import SamplingSettings
from ..inspection.ablation import ablate_heads, every_head
from ..inspection.logit_lens import logit_lens
from ..loading.api import catalogue, has_published_weights
from ..loading.texts import variant_text
from ..plugin_api.protocols import LanguageModel, NamedHeads, NamedSlots, RoleVerifying, Traceable, implements
from ..storage.files import describe_os_error
from ..storage.locations import cache_dir
from . import svg
from .generation import ModelCache, is_task_model

if TYPE_CHECKING:
    from ..inference.model import ZooModel

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent

# Fixed so that every variant's page shows the same thing and a reader can
# reproduce it: `zoo sample NAME --prompt PROMPT --max-new-tokens N --seed S`.
SAMPLE_PROMPT = "ROMEO:"
SAMPLE_SEEDS = (0, 1)
SAMPLE_TOKENS = 60
SAMPLING = SamplingSettings(max_new_tokens=SAMPLE_TOKENS)  # each sample replaces the seed
ATTENTION_PROMPT = "ROMEO:\nBut soft, what light"
COMPARE_WINDOWS = 128
COMPARE_SEED = 42
BASELINE = "bigram"
# Questions every task variant (the puzzle) answers side by side: the same words
# in another order change the answer only for the network that sees positions.
PUZZLE_QUESTIONS = (
    "Crow disobeys keep-flight swap-speech he-is?",
    "Crow keep-flight disobeys swap-speech he-is?",
    "Human swap-flight disobeys keep-speech he-is?",
    "Human disobeys swap-flight keep-speech he-is?",
    "Rock swap-flight disobeys swap-speech he-is?",
    "Rock disobeys swap-flight swap-speech he-is?",
)
# Head ablation on a small fixed sample of validation windows (chosen by the
# same seed as `zoo eval`'s): enough to rank the heads, cheap for every variant.
ABLATION_WINDOWS = 32
# What one variant's page may cost (zoo_core.evaluation.budget): every built-in
# variant's measurements fit whole; a larger model's are cut to fit, each part
# saying on what it was measured. A third of a `zoo eval` each for the head
# ablation and the bits-per-byte comparison, which are the costly parts.
ABLATION_BUDGET = COMPUTE_BUDGET / 4
BITS_BUDGET = COMPUTE_BUDGET / 4
SAMPLED_ABLATION = (4, 64)  # windows and tokens per head where the heads are sampled
ATTENTION_PANELS = 32  # heat maps a page shows at most (the built-in variants have at most 24 heads)
# Drawing a token reads every weight once: a large model's samples are shorter, so
# that drawing them reads at most SAMPLE_READS weights (every built-in variant draws SAMPLE_TOKENS).
SAMPLE_READS = 4e9
SAMPLED_HEADS_SEED = 0  # chooses the heads shown or ablated where not all are
# Bump when what is cached changes shape or meaning.
CACHE_VERSION = 3


def default_cache_folder() -> Path:
    """Where measurements are kept: ``gallery/`` in the zoo's cache folder
    (``$ZOO_CACHE``, else ``$XDG_CACHE_HOME/zoo``), which `zoo cache clear` empties."""
    return cache_dir() / "gallery"


def served_site_folder() -> Path:
    """The gallery `zoo serve` writes and serves when given no --site."""
    return cache_dir() / "site"


def _remove_pages_not_written(folder: Path, written: set[str]) -> None:
    """Pages (and measurements) of variants this build did not write go: a
    variant removed or uninstalled since the last build must not stay reachable."""
    if not folder.is_dir():
        return
    for page in folder.iterdir():
        if page.is_file() and page.stem not in written:
            page.unlink(missing_ok=True)


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9.\-]+", "-", name.lower()).strip("-") or "page"


def _templates():
    try:
        from jinja2 import Environment, FileSystemLoader, select_autoescape
    except ImportError:
        raise ZooError("the gallery needs the web extra: pip install 'zoo-lm[web]'") from None
    environment = Environment(
        loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(), trim_blocks=True, lstrip_blocks=True
    )
    environment.filters["loss"] = lambda v: "—" if v is None else f"{v:.4f}"
    environment.filters["thousands"] = lambda v: "—" if v is None else f"{v:,}"
    return environment


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ZooError(f"cannot write {path}: {describe_os_error(exc)}") from None


# -- what the card and files say (no torch) -----------------------------------------


def _history(variant) -> TrainingHistory | None:
    """The variant's training history, through its schema; a damaged or hostile
    one (from an archive, say) costs the page its loss chart and one line, never
    the gallery."""
    try:
        return read_history(history_of(variant.checkpoint_path))
    except ZooError as exc:
        print(f"zoo: warning: variant '{variant.name}': {exc}; its loss chart is left out", file=sys.stderr)
        return None


def _loss_chart(name: str, history: TrainingHistory) -> str:
    series: dict[str, Sequence[tuple[float, float]]] = {}
    for key, label in (("train", "train"), ("validation", "validation")):
        points = [(row.step, value) for row in history.history if (value := getattr(row, key)) is not None]
        if points:
            series[label] = points
    return svg.line_chart(series, f"{name}: loss during training", "update", "loss (nats per token)") if series else ""


def _row(variant) -> dict:
    card = variant.card

    metrics = card.metrics
    return {
        "name": card.name,
        "slug": _slug(card.name),
        "description": card.description,
        "architecture": card.architecture,
        "tokenizer": f"{card.tokenizer.kind}-{card.tokenizer.vocab_size}",
        "context": card.context_length,
        "parameters": card.parameters,
        "validation_loss": metrics.validation_loss,
        "bits_per_byte": metrics.validation_bits_per_byte,  # compares across tokenizers; not every card has it
        "accuracy": metrics.accuracy,
        "plugin": variant.plugin,
        "source": variant.source.name,  # the registry file; its folder is this machine's business
        "tags": list(card.tags),
        "lineage": card.lineage,
        "weights": has_published_weights(variant),
    }


# -- what costs model time (cached) ----------------------------------------------------


class _Baseline:
    """The bigram's model and tokenised corpus, loaded once for every comparison."""

    def __init__(self, catalogue) -> None:
        self.variant = catalogue.get(BASELINE) if BASELINE in catalogue.names() else None
        self.model: ZooModel | None = None
        self.corpora: dict[str, Corpus] = {}

    def shares_tokenizer(self, variant) -> bool:
        if self.variant is None:
            return False
        mine, theirs = variant.card.tokenizer, self.variant.card.tokenizer
        if (mine.kind, mine.vocab_size) != (theirs.kind, theirs.vocab_size):
            return False
        a, b = variant.tokenizer_path, self.variant.tokenizer_path
        return a == b or (a is not None and b is not None and a.read_bytes() == b.read_bytes())


def _compare_with_baseline(model, baseline: _Baseline, cache_models) -> dict | None:
    """What `zoo compare bigram NAME --windows 128 --seed 42` reports, without its samples.
    A variant of another tokenizer whose card states no bits per byte (an imported
    model) is compared in bits per byte instead (`_compare_in_bits`)."""
    if model.name == BASELINE or baseline.variant is None:
        return None
    if not baseline.shares_tokenizer(model.variant):
        if model.card.metrics.validation_bits_per_byte is not None:
            return None  # the card's own figure, on the whole validation text, stands in the index
        return _compare_in_bits(model, baseline, cache_models)
    if baseline.model is None:
        baseline.model = cache_models.get(BASELINE)
    first = baseline.model
    text = variant_text(first.variant)
    key = text.sha256
    if key not in baseline.corpora:
        baseline.corpora[key] = Corpus.from_text(text.text, first.tokenizer, first.card.train_fraction)
    corpus = baseline.corpora[key]
    context = min(first.card.context_length, model.card.context_length)
    generator = torch.Generator().manual_seed(COMPARE_SEED)
    batches = {
        split: shared_windows(corpus.split(split), context, COMPARE_WINDOWS, generator)
        for split in ("train", "validation")
    }
    result = {"context": context, "windows": COMPARE_WINDOWS, "seed": COMPARE_SEED, "baseline": BASELINE}
    for split, (inputs, targets) in batches.items():
        ours, theirs = mean_loss(model.network, inputs, targets), mean_loss(first.network, inputs, targets)
        result[split] = {"variant": ours, "baseline": theirs, "delta": ours - theirs}
    return result


def _compare_in_bits(model, baseline: _Baseline, cache_models) -> dict | None:
    """Bits per byte of the variant and the bigram on the same start of the bigram's
    validation text (as much of it as BITS_BUDGET scores), each with its own tokenizer:
    `zoo compare bigram NAME --bits-per-byte --text-chars N` reports the same."""
    if not implements(model.network, LanguageModel):
        return None
    if baseline.model is None:
        baseline.model = cache_models.get(BASELINE)
    first = baseline.model
    text = variant_text(first.variant)
    whole, before = validation_text(text.text, first.card.recipe.train_fraction)
    shape = shape_of(model)
    context = default_context(shape)
    characters = text_characters(shape, len(whole), len(model.tokenizer.encode(whole)), context, 1.0, BITS_BUDGET)
    scored = whole[:characters] if characters is not None else whole
    try:
        ours = bits_per_byte(model, scored, before, context=context)
        theirs = bits_per_byte(first, scored, before)
    except ZooError:
        return None  # a text the variant cannot encode: no comparison, the rest of the page stands
    return {
        "unit": "bits per byte",
        "baseline": BASELINE,
        "dataset": text.name,
        "characters": len(scored),
        "of": len(whole),
        "context": context,
        "variant": ours["bits_per_byte"],
        "baseline_bits": theirs["bits_per_byte"],
        "delta": ours["bits_per_byte"] - theirs["bits_per_byte"],
    }


def sample_tokens(parameters: int) -> int:
    """New tokens per sample: SAMPLE_TOKENS, fewer (not under 16) for a model so large that
    drawing them all would read more than SAMPLE_READS weights."""
    return max(16, min(SAMPLE_TOKENS, int(SAMPLE_READS / (len(SAMPLE_SEEDS) * max(1, parameters)))))


def _attention(model, prompt: str) -> dict | None:
    network = model.network
    if not implements(network, LanguageModel):
        return None
    ids = model.encode_prompt(prompt)[-model.card.context_length :]
    with torch.no_grad():
        maps = network.attention_maps(torch.tensor([ids]))
    if not maps:
        return None
    labels = [model.tokenizer.decode([i]) for i in ids]
    panels = []
    if isinstance(maps, dict):
        for name, matrix in maps.items():
            panels.append({"title": name, "matrix": matrix.squeeze(0).tolist()})
    else:
        for layer, matrix in enumerate(maps):
            for head in range(matrix.shape[1]):
                panels.append({"title": f"layer {layer + 1}, head {head + 1}", "matrix": matrix[0, head].tolist()})
    total = len(panels)
    if total > ATTENTION_PANELS:  # a large model's hundreds of heads: a seeded sample of them, in order
        chosen = torch.randperm(total, generator=torch.Generator().manual_seed(SAMPLED_HEADS_SEED))[:ATTENTION_PANELS]
        panels = [panels[i] for i in sorted(chosen.tolist())]
    for panel in panels:
        panel["matrix"] = [[round(float(v), 4) for v in row] for row in panel["matrix"]]
    return {"prompt": prompt, "labels": labels, "panels": panels, "heads": total}


def _inspection(model, prompt: str) -> dict | None:
    """The logit lens on ``prompt`` (its last context of tokens) and every head zeroed
    alone on the first validation windows, through the hook points; None for a
    network without a residual stream of blocks (the bigram)."""
    ids = torch.tensor([model.encode_prompt(prompt)[-model.card.context_length :]])
    try:
        lens = logit_lens(model, ids).to_dict()
        heads = every_head(model)
        groups, windows, context = _ablation_plan(model, heads)
        ablation = ablate_heads(model, groups, "zero", windows=windows, context=context).to_dict()
    except ZooError:
        return None
    ablation["heads_total"] = len(heads)
    return {"prompt": prompt, "logit_lens": lens, "ablation": ablation}


def _ablation_plan(model, heads: list) -> tuple[list, int, int]:
    """The heads to zero one by one, and the windows and context to do it on, within
    ABLATION_BUDGET: every head on ABLATION_WINDOWS windows of the card's context
    where that fits (every built-in variant); else windows and context cut first
    (zoo_core.evaluation.budget), and where even MIN_WINDOWS windows of MIN_CONTEXT
    tokens per head would not fit, a seeded sample of the heads."""
    shape = shape_of(model)
    sizing = size_windows(shape, None, None, ABLATION_WINDOWS, passes=len(heads) + 1, budget=ABLATION_BUDGET)
    if sizing.windows >= min(MIN_WINDOWS, ABLATION_WINDOWS):
        return heads, sizing.windows, sizing.context
    windows, context = SAMPLED_ABLATION[0], min(shape.context, SAMPLED_ABLATION[1])
    passes = int(ABLATION_BUDGET / (windows * context * shape.flops_per_token(context)))
    count = max(1, min(len(heads), passes - 1))
    chosen = torch.randperm(len(heads), generator=torch.Generator().manual_seed(SAMPLED_HEADS_SEED))[:count]
    return [heads[i] for i in sorted(chosen.tolist())], windows, context


def _role_check(model) -> dict | None:
    """A task network's own check of its explanation by ablation (the puzzle's `verify_roles`)."""
    return model.network.verify_roles(model.tokenizer) if implements(model.network, RoleVerifying) else None


def _task_answers(model) -> list[dict]:
    answers = []
    for question in PUZZLE_QUESTIONS:
        try:
            answers.append({"question": question, "answer": model.network.ask(model.tokenizer, question)})
        except ZooError as exc:
            answers.append({"question": question, "answer": f"(cannot answer: {exc})"})
    return answers


def _task_structure(model) -> dict:
    """Slots and heads of a task network that names them (the puzzle)."""
    network = model.network
    slots = list(network.slots.names or []) if implements(network, NamedSlots) else []
    heads = list(network.head_names or []) if implements(network, NamedHeads) else []
    attention = None
    if implements(network, Traceable):
        ids = model.tokenizer.encode(PUZZLE_QUESTIONS[0])
        trace = network.trace(torch.tensor(ids, dtype=torch.long))
        labels = [model.tokenizer.decode([i]) for i in ids]
        attention = {
            "prompt": PUZZLE_QUESTIONS[0],
            "labels": labels,
            "panels": [
                {"title": name, "matrix": [[round(float(v), 4) for v in row] for row in matrix.tolist()]}
                for name, matrix in trace["attention"].items()
            ],
        }
    return {"slots": slots, "heads": heads, "attention": attention}


def _measure(variant, models, baseline: _Baseline) -> dict:
    model = models.get(variant.name)
    measured: dict = {"parameters": model.parameters()}
    if is_task_model(model):
        measured["answers"] = _task_answers(model)
        measured["task"] = _task_structure(model)
        measured["roles"] = _role_check(model)
        return measured
    tokens = sample_tokens(model.parameters())
    measured["sample_tokens"] = tokens
    measured["samples"] = [
        {"seed": seed, "text": model.generate(SAMPLE_PROMPT, SAMPLING.replace(seed=seed, max_new_tokens=tokens))}
        for seed in SAMPLE_SEEDS
    ]
    measured["attention"] = _attention(model, ATTENTION_PROMPT)
    measured["comparison"] = _compare_with_baseline(model, baseline, models)
    measured["inspection"] = _inspection(model, ATTENTION_PROMPT)
    return measured


def _cached_measure(variant, models, baseline: _Baseline, cache: Path) -> tuple[dict, bool]:
    sha = variant.card.checkpoint.sha256
    key = {
        "version": CACHE_VERSION,
        "sha256": sha,
        "prompt": SAMPLE_PROMPT,
        "seeds": SAMPLE_SEEDS,
        "tokens": SAMPLE_TOKENS,
        "attention": ATTENTION_PROMPT,
        "windows": COMPARE_WINDOWS,
        "baseline": baseline.variant.card.checkpoint.sha256 if baseline.variant else None,
        "questions": PUZZLE_QUESTIONS,
        "ablation_windows": ABLATION_WINDOWS,
        "budget": [SAMPLE_READS, ABLATION_BUDGET, BITS_BUDGET, ATTENTION_PANELS, SAMPLED_HEADS_SEED, SAMPLED_ABLATION],
    }
    path = cache / f"{_slug(variant.name)}.json"
    if sha is not None and path.is_file():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
            if stored.get("key") == json.loads(json.dumps(key)):
                return stored["measured"], True
        except (OSError, ValueError):
            pass  # a damaged cache entry is measured again
    measured = _measure(variant, models, baseline)
    if sha is not None:  # weights without a checksum may change under the same name
        try:
            cache.mkdir(parents=True, exist_ok=True)
            temporary = path.with_suffix(".tmp")
            temporary.write_text(json.dumps({"key": key, "measured": measured}), encoding="utf-8")
            temporary.replace(path)
        except OSError:
            pass  # an unwritable cache only costs time
    return measured, False


# -- pictures ----------------------------------------------------------------------------


def _printable(label: str) -> str:
    return "".join(c if c.isprintable() and c != " " else {"\n": "\\n", " ": "␣"}.get(c, "·") for c in label)


def _attention_images(name: str, attention: dict | None, images: Path, prefix: str = "") -> list[dict]:
    if not attention:
        return []
    labels = [_printable(label) for label in attention["labels"]]
    figures = []
    for i, panel in enumerate(attention["panels"]):
        file = f"{_slug(name)}-{prefix}attention-{i + 1}.svg"
        _write(images / file, svg.heatmap(panel["matrix"], labels, labels, panel["title"]))
        figures.append({"file": f"img/{file}", "title": panel["title"]})
    return figures


def _inspection_images(name: str, inspection: dict | None, images: Path) -> dict:
    """The logit lens (the probability each layer gives the model's final prediction, a
    heat map of layers by positions) and the loss change of each head zeroed alone."""
    if not inspection:
        return {}
    figures = {}
    lens = inspection["logit_lens"]
    labels = [_printable(token) for token in lens["tokens"]]
    file = f"{_slug(name)}-logit-lens.svg"
    _write(
        images / file,
        svg.heatmap(
            lens["final_token_probabilities"],
            lens["layers"],
            labels,
            "logit lens: top token by layer (colour: p of the final prediction)",
            cell_text=[[_printable(token) for token in row] for row in lens["predictions"]],
        ),
    )
    figures["logit_lens"] = f"img/{file}"
    ablation = inspection["ablation"]
    heads: dict[int, dict[int, float]] = {}
    for entry in ablation["ablations"]:
        layer, head = (int(n) for n in entry["heads"][0].split("."))
        heads.setdefault(layer, {})[head] = entry["delta"]
    if heads:
        width = max(len(row) for row in heads.values())
        matrix = [[heads[layer].get(h) for h in range(width)] for layer in sorted(heads)]
        file = f"{_slug(name)}-ablation.svg"
        _write(
            images / file,
            svg.signed_heatmap(
                matrix,
                [f"block {layer}" for layer in sorted(heads)],
                [f"head {h}" for h in range(width)],
                "validation loss change, each head zeroed",
            ),
        )
        figures["ablation"] = f"img/{file}"
    return figures


# -- studies -------------------------------------------------------------------------------


def _studies(source: Path, variant_names: set[str]) -> tuple[str, list[dict]]:
    """docs/experiments.md cut at its second-level headings: one page per study."""
    if not source.is_file():
        return "", []
    try:
        import markdown
    except ImportError:
        raise ZooError("the gallery needs the web extra: pip install 'zoo-lm[web]'") from None
    text = source.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.MULTILINE)
    introduction = markdown.markdown(parts[0], extensions=["tables", "fenced_code"])
    studies = []
    for part in parts[1:]:
        heading, _, body = part.partition("\n")
        name = heading.split(":", 1)[0].strip()
        html = markdown.markdown(body, extensions=["tables", "fenced_code"])
        # Pictures sit beside the markdown file; the site keeps them under img/.
        html = re.sub(r'src="experiments/([^"/]+)"', r'src="../img/studies/\1"', html)

        # Arms named in code spans link to their variant page.
        def link(match):
            arm = match.group(1)
            return (
                f'<a href="../variants/{_slug(arm)}.html"><code>{arm}</code></a>'
                if arm in variant_names
                else match.group(0)
            )

        html = re.sub(r"<code>([a-z0-9.\-]+)</code>", link, html)
        studies.append({"name": name, "slug": _slug(name), "title": heading.strip(), "html": html})
    return introduction, studies


# -- results tables ------------------------------------------------------------------------


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def shipped_results(everything) -> Path:
    """The results tables shipped with the zoo: results/ beside the built-in registry
    (a checkout's top folder, or the wheel's copy of it, pyproject.toml's package data);
    the checkout's own where a test replaced the built-in registry."""
    for variant in everything:
        if variant.layer == "built-in" and (variant.source.parent / "results").is_dir():
            return variant.source.parent / "results"
    return PROJECT_ROOT / "results"


def _results_tables(folder: Path, variant_names: set[str]) -> list[dict]:
    """Each CSV of ``folder`` (the checkout's results/, like timm's results tables) as a
    table of its own columns: numeric where every cell is a number, the first column
    linked to the variant's page where the gallery has it. A CSV that is not a table
    (no header, rows of another width) costs its table and one line, never the gallery."""
    tables = []
    for path in sorted(folder.glob("*.csv")) if folder.is_dir() else []:
        try:
            with path.open(encoding="utf-8", newline="") as file:
                header, *rows = list(csv.reader(file))
        except (OSError, UnicodeDecodeError, csv.Error, ValueError) as exc:
            print(f"zoo: warning: {path}: cannot read it ({exc}); its table is left out", file=sys.stderr)
            continue
        if not header or any(len(row) != len(header) for row in rows):
            print(f"zoo: warning: {path}: not a table of {len(header)} columns; it is left out", file=sys.stderr)
            continue
        numeric = [all(_is_number(row[i]) for row in rows if row[i]) for i in range(len(header))]
        tables.append(
            {
                "name": path.stem,
                "slug": _slug(path.stem),
                "file": path.name,
                "columns": [{"name": name, "numeric": n} for name, n in zip(header, numeric)],
                "rows": [
                    {"cells": row, "link": f"variants/{_slug(row[0])}.html" if row[0] in variant_names else None}
                    for row in rows
                ],
            }
        )
    return tables


# -- the site -------------------------------------------------------------------------------


def write_gallery(
    out: Path,
    pattern: str | None = None,
    cache: Path | None = None,
    quiet: bool = False,
    experiments: Path | None = None,
    results: Path | None = None,
    on_progress: Callable[[dict], None] | None = None,
) -> dict:
    """Write the site into ``out``; returns counts and the seconds it took. The index
    shows every CSV of ``results`` (default: the results tables shipped with the zoo).
    ``on_progress`` is told ``{"total": N}``, then ``{"measuring": NAME}`` and
    ``{"written": K}`` for each variant page."""
    started = time.perf_counter()
    environment = _templates()
    everything = catalogue()
    variants = everything.match(pattern)
    if not variants:
        raise ZooError(f"no variant matches '{pattern}'" if pattern else "no variants registered")
    cache = cache or default_cache_folder()
    out = Path(out)
    _prepare_site(out)
    if on_progress is not None:
        on_progress({"total": len(variants)})
    rows, tasks, cached = _write_variant_pages(out, environment, variants, everything, cache, quiet, on_progress)
    _remove_pages_not_written(out / "variants", {row["slug"] for row in rows})
    if pattern is None:  # the whole catalogue: measurements of variants that are gone go too
        _remove_pages_not_written(cache, {_slug(variant.name) for variant in everything})
    introduction, studies = _write_studies(out, environment, experiments, {r["name"] for r in rows})
    _write_puzzle(out, environment, tasks)
    tables = _results_tables(results or shipped_results(everything), {r["name"] for r in rows})
    _write_index(out, environment, rows, tasks, introduction, studies, tables)
    return {
        "variants": len(rows),
        "studies": len(studies),
        "results": len(tables),
        "tasks": len(tasks),
        "cached": cached,
        "seconds": time.perf_counter() - started,
        "index": str(out / "index.html"),
    }


def _prepare_site(out: Path) -> None:
    """The site's folder with its static files; pictures of variants no longer shown go away."""
    if out.exists() and not out.is_dir():
        raise ZooError(f"{out} exists and is not a folder")
    shutil.rmtree(out / "img", ignore_errors=True)
    (out / "static").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(STATIC / "zoo.css", out / "static" / "zoo.css")
    shutil.copyfile(STATIC / "gallery.js", out / "static" / "gallery.js")


def _write_variant_pages(out: Path, environment, variants, everything, cache: Path, quiet: bool, on_progress=None):
    """One page per variant; returns the index's rows, the task models' entries
    for the puzzle page, and how many measurements came from the cache."""

    models = ModelCache()
    baseline = _Baseline(everything)
    rows: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    cached = 0
    for written, variant in enumerate(variants):
        if on_progress is not None:
            on_progress({"measuring": variant.name})
        row = _row(variant)
        page, task, hit = _variant_page(variant, row, models, baseline, cache, out / "img")
        cached += hit
        if task is not None:
            tasks.append(task)
        rows.append(row)
        _write(
            out / "variants" / f"{row['slug']}.html",
            environment.get_template("variant.html").render(
                root="../",
                page=page,
                sample_prompt=SAMPLE_PROMPT,
                sample_tokens=SAMPLE_TOKENS,
                attention_prompt=ATTENTION_PROMPT,
            ),
        )
        if on_progress is not None:
            on_progress({"written": written + 1})
        if not quiet:
            print(
                f"  {variant.name}{'' if not row['weights'] else ' (cached)' if page['measured'] and hit else ''}",
                file=sys.stderr,
                flush=True,
            )
    return rows, tasks, cached


def _variant_page(variant, row: dict, models, baseline, cache: Path, images: Path):
    """What a variant's page shows: its card, loss chart and measurements (a
    problem measuring it is shown on the page, not raised); with the puzzle
    page's entry for a task model, and whether the measurements were cached."""
    history = _history(variant)
    chart = _loss_chart(variant.name, history) if history else ""
    page: dict[str, Any] = {
        "row": row,
        "card": variant.card.model_dump(mode="json", exclude_none=True),
        "loss_chart": None,
        "measured": None,
        "attention": [],
        "inspection": {},
        "problem": None,
    }
    if chart:
        _write(images / f"{row['slug']}-loss.svg", chart)
        page["loss_chart"] = f"img/{row['slug']}-loss.svg"
    task, hit = None, False
    if row["weights"]:
        try:
            measured, hit = _cached_measure(variant, models, baseline, cache)
            page["measured"] = measured
            comparison = measured.get("comparison") or {}
            if comparison.get("unit") == "bits per byte" and row["bits_per_byte"] is None:
                # Measured here, on the start of the validation text the Shakespeare variants' cards were scored on.
                row["bits_per_byte"] = comparison["variant"]
                row["bits_note"] = (
                    f"measured by the gallery on the first {comparison['characters']:,} of the "
                    f"{comparison['of']:,} validation characters of {comparison['dataset']}"
                )
            page["attention"] = _attention_images(variant.name, measured.get("attention"), images)
            page["inspection"] = _inspection_images(variant.name, measured.get("inspection"), images)
            if "task" in measured:
                structure = measured["task"]
                task = {
                    "row": row,
                    "answers": measured["answers"],
                    "slots": structure["slots"],
                    "heads": structure["heads"],
                    "roles": measured.get("roles"),
                    "attention": _attention_images(variant.name, structure["attention"], images, "task-"),
                }
        except ZooError as exc:  # one broken variant must not hide the others
            page["problem"] = str(exc)
    return page, task, hit


def _write_studies(out: Path, environment, experiments: Path | None, variant_names: set[str]):
    """The studies' pages and their pictures; returns the introduction and the studies.
    Arms link to their pages only where this gallery has them (--variants may leave some out)."""
    introduction, studies = _studies(experiments or PROJECT_ROOT / "docs" / "experiments.md", variant_names)
    pictures = (experiments or PROJECT_ROOT / "docs" / "experiments.md").parent / "experiments"
    images = out / "img"
    if studies and pictures.is_dir():
        (images / "studies").mkdir(parents=True, exist_ok=True)
        for picture in pictures.glob("*.png"):
            shutil.copyfile(picture, images / "studies" / picture.name)
    for study in studies:
        _write(
            out / "studies" / f"{study['slug']}.html",
            environment.get_template("study.html").render(root="../", study=study, studies=studies),
        )
    return introduction, studies


def _write_puzzle(out: Path, environment, tasks: list[dict[str, Any]]) -> None:
    """The puzzle page, the task models' answers side by side; none without task models."""
    if not tasks:
        (out / "puzzle.html").unlink(missing_ok=True)
        return
    question_answers = [
        {
            "question": q,
            "answers": [next(a["answer"] for a in task["answers"] if a["question"] == q) for task in tasks],
        }
        for q in PUZZLE_QUESTIONS
    ]
    _write(
        out / "puzzle.html",
        environment.get_template("puzzle.html").render(root="", tasks=tasks, questions=question_answers),
    )


def _write_index(out: Path, environment, rows, tasks, introduction, studies, tables) -> None:
    columns = {
        key: sorted({str(v) for r in rows for v in ([r[key]] if key != "tags" else r[key])})
        for key in ("architecture", "tokenizer", "tags")
    }
    _write(
        out / "index.html",
        environment.get_template("index.html").render(
            root="",
            rows=rows,
            filters=columns,
            studies=studies,
            tables=tables,
            introduction=introduction,
            has_puzzle=bool(tasks),
            has_bits=any(r["bits_per_byte"] is not None for r in rows),
        ),
    )
