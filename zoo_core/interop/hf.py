"""Hugging Face transformers: `zoo export --format hf` and `zoo import hf`.

What a family is (its model types, config fields, tensor names and layouts,
refusals) lives in its record (``zoo_core.plugin_api.families``), registered by
the plugin that builds its networks: a folder imports through the record of its
``model_type``; a variant exports in the family its card records, or else the
first family that claims and takes it, and anything none takes is refused with
the reason (see docs/interop.md). This module holds what every family shares:
reading folders within bounds, the tokenizer, the card, and the check that the
written folder computes the zoo's logits. A folder may also be named by its Hub
repository id, read from the Hugging Face cache offline (hf_cache).
"""

from __future__ import annotations

import base64
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..catalogue.limits import limits
from ..corpus.batches import encodable_text, split_text
from ..errors import ZooError, printable
from ..inference.chat import chat_stops
from ..loading.texts import variant_text
from ..plugin_api import families
from ..plugin_api.manager import get_plugins
from ..storage.checkpoints import MAX_HEADER_BYTES, read_header, sha256_file
from ..storage.files import describe_os_error, open_regular, read_limited
from ..training.progress import WorkProgress
from .hf_cache import cached_snapshot, looks_like_repo_id
from .hf_card import card_fields_from_hub, read_hub_card, write_hub_card
from .hf_chat import folder_bos, folder_chat
from .hf_shards import read_tensors, weight_files, weights_in
from .hf_tokenizers import backend_tokenizer_for, bytes_to_unicode, hf_tokenizer_for, probe_tokenizer
from .imports import (
    check_card_fits_tensors,
    check_name_is_free,
    check_tokenizer,
    count_parameters,
    imported_card,
    publish_import,
    tokenizer_backend,
    tokenizer_for_vocabulary,
)

# How far another library's float32 logits may be from the zoo's. Its arithmetic is
# the same in another order (fused attention, other SIMD widths), so the drift grows
# with the logits' size: 1e-4, or 1e-5 of the largest logit where that is more
# (SmolLM2's 30 layers, largest logit 36.8, differed by 1.25e-4 on CI's CPU and by
# less than 1e-4 here); a misplaced tensor differs by whole units.
LOGIT_TOLERANCE = 1e-4
RELATIVE_LOGIT_TOLERANCE = 1e-5


def logit_difference(theirs: torch.Tensor, ours: torch.Tensor) -> tuple[float, float]:
    """The largest difference between two float32 runs' logits, and how much is allowed."""
    largest = float(ours.abs().max())
    return float((theirs - ours).abs().max()), max(LOGIT_TOLERANCE, RELATIVE_LOGIT_TOLERANCE * largest)


def _require_transformers():
    """The transformers module, or one line saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise ZooError("Hugging Face export and import need transformers: pip install 'zoo-lm[hf]'") from None
    return transformers


def verification_ids(model, count: int = 64) -> tuple[list[int], str]:
    """The first ``count`` tokens of the validation split (cut to the context), and
    that split's text, as the card trained on it: without the characters its
    vocabulary lacks when the recipe dropped them (``skip_unknown``)."""
    card = model.card
    text = variant_text(model.variant).text
    if card.skips_unknown:
        text = encodable_text(text, model.tokenizer)
    validation = split_text(text, card.train_fraction)[1]
    return checked_encoding(model, validation[: 4 * count])[: min(count, model.card.context_length)], validation


def checked_encoding(model, text: str) -> list[int]:
    """The zoo's ids of the text an export checks itself on; a character the
    vocabulary lacks is refused with what the card says about it."""
    try:
        return model.tokenizer.encode(text)
    except ZooError as exc:
        raise ZooError(
            f"{exc}; the export checks itself on the validation text of '{model.name}' ({model.card.evaluation_data}), "
            f"which its card says was trained on every character (recipe.skip_unknown is not set): "
            f"retrain it with --skip-unknown, or check that its recipe names the text it was trained on"
        ) from None


# The id generate pads a batch of prompts of unequal length with: any id does,
# since the attention mask hides padded positions, and the zoo's vocabularies
# have no padding token of their own. 0 is what the TransformerLens export pads with too.
PAD_TOKEN_ID = 0


def generation_config(context_length: int, end_ids: list[int] | None = None):
    """generation_config.json: ``generate`` stops at the context window (max_length:
    GPT-2's learned positions end there, and one token more is an IndexError), and
    at ``end_ids``: a chat model's end-of-sequence and end-of-turn tokens, where the
    zoo's chat ends a reply. The zoo's own vocabularies (characters, byte-level BPE)
    have no end-of-text token, their models were trained on one running text, and
    naming an ordinary token (a newline) as the end would cut every sample at its
    first line: without a chat template, no eos_token_id."""
    transformers = _require_transformers()
    GenerationConfig = transformers.GenerationConfig
    if not end_ids:
        return GenerationConfig(max_length=context_length, pad_token_id=PAD_TOKEN_ID)
    return GenerationConfig(
        max_length=context_length,
        pad_token_id=PAD_TOKEN_ID,
        eos_token_id=end_ids[0] if len(end_ids) == 1 else end_ids,
    )


def hub_base_model(card) -> str | None:
    """The Hub repository an export's README names as base_model: where imported
    weights came from, when the source said. A zoo base (a fine-tune's
    ``recipe.base``) is a zoo name, never a Hub id, and is not written there."""
    return card.imported.hub_repository if card.imported is not None else None


def chat_end_ids(model) -> list[int]:
    """The ids at which the zoo's chat ends a reply (the card's eos token and stop
    texts, ``chat_stops``) that are single tokens: what ``generate`` can stop at."""
    if model.card.chat is None:
        return []
    backend = backend_tokenizer_for(model.tokenizer)
    found = [backend.token_to_id(text) for text in chat_stops(model.card.chat)]
    return list(dict.fromkeys(i for i in found if i is not None))


def quiet_transformers() -> None:
    """No download-style progress bars for files on this disk."""
    logging = _require_transformers().utils.logging
    logging.disable_progress_bar()
    logging.set_verbosity_error()


def _not_laid_out(model, exc) -> ZooError:
    return ZooError(
        f"cannot export to Hugging Face: '{model.name}' is not laid out like the zoo's transformer (no {exc})"
    )


def hf_model(model):
    """The transformers model computing the variant's logits, in its family's
    layout (`families.for_variant`), or a one-line refusal."""
    transformers = _require_transformers()
    AutoConfig, AutoModelForCausalLM = transformers.AutoConfig, transformers.AutoModelForCausalLM
    try:
        record = families.for_variant(model, "Hugging Face")
        exported = record.to_hf(model)
    except ZooError as exc:
        raise ZooError(f"cannot export to Hugging Face: {exc}") from None
    except (KeyError, AttributeError) as exc:  # a plugin's block with other tensor names
        raise _not_laid_out(model, exc) from None
    hf = AutoModelForCausalLM.from_config(AutoConfig.for_model(exported.model_type, **exported.fields))
    state = dict(exported.state)
    # Biases the family always has and the variant has not (NeoX's feed-forward, a bias-free LayerNorm) are zeros.
    for name, tensor in hf.state_dict().items():
        if name.endswith(".bias") and name not in state:
            state[name] = torch.zeros_like(tensor)
    missing, unexpected = hf.load_state_dict(state, strict=False)
    # transformers' causal LMs name their head lm_head, and tie it to the embedding themselves.
    if [m for m in missing if not (exported.tied and m == "lm_head.weight")] or unexpected:
        raise ZooError(f"{record.hf_class} layout mismatch: missing {missing}, unexpected {unexpected}")
    return hf, record


def export_hf(model, out: Path) -> tuple[list[Path], dict]:
    """Write ``out`` for `AutoModelForCausalLM` and `AutoTokenizer`; check both
    against the zoo (logits as `logit_difference` allows, ids on the whole validation text) before
    returning. The variant goes out in its family's layout (`hf_model`)."""
    transformers = _require_transformers()
    quiet_transformers()
    written, _ = hf_model(model)
    end_ids = chat_end_ids(model)
    written.generation_config = generation_config(model.card.context_length, end_ids)
    if end_ids:  # the model's own config names its end too, as transformers' chat models do
        written.config.eos_token_id = written.generation_config.eos_token_id
    out.mkdir(parents=True, exist_ok=True)
    written.save_pretrained(out)  # config.json, model.safetensors, generation_config.json
    tokenizer = hf_tokenizer_for(model.tokenizer, model.card.context_length, model.card.chat)
    tokenizer.save_pretrained(out)
    (out / "zoo_card.json").write_text(
        json.dumps(model.card.model_dump(mode="json", exclude_none=True), indent=2) + "\n"
    )

    ids, validation = verification_ids(model)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        theirs = loaded(torch.tensor([ids])).logits
        ours, _ = model.network(torch.tensor([ids]))
    difference, tolerance = logit_difference(theirs, ours)
    if difference > tolerance:
        raise ZooError(
            f"exported logits differ from the zoo's by {difference:.2e} (> {tolerance:.1e}); nothing usable was written"
        )
    loaded_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    expected = checked_encoding(model, validation)
    if loaded_tokenizer(validation, add_special_tokens=False, verbose=False)["input_ids"] != expected:
        raise ZooError("the exported tokenizer's ids differ from the zoo's on the validation text")

    write_hub_card(
        model.card, out, written.config.model_type, hub_base_model(model.card)
    )  # last: a README describes only a folder that passed the checks
    checks = {"max_logit_difference": difference, "logit_tokens": len(ids), "tokenizer_ids_checked": len(expected)}
    return sorted(path for path in out.iterdir() if path.is_file()), checks


# --- import -------------------------------------------------------------------


def with_hub_card(card, folder: Path, license_given: bool):
    """``card`` with what the folder's README.md front matter says (see
    `zoo_core.interop.hf_card.card_fields_from_hub`): its license unless one was
    given, its tags beside the import's, its description, its dataset when that
    is registered here (what `zoo eval` then scores on), and notes for the rest.
    Metrics a README reports go to the notes, never to ``metrics``: the zoo
    records only what it measured."""
    found = read_hub_card(folder)
    if found is None:
        return card
    fields = card_fields_from_hub(*found)
    update: dict = {}
    if "license" in fields and not license_given:
        update["license"] = fields["license"]
    if "tags" in fields:
        update["tags"] = list(dict.fromkeys([*card.tags, *fields["tags"]]))
    if "description" in fields:
        update["description"] = fields["description"]
    found_update: dict = {}
    notes = list(fields.get("notes", []))
    for dataset in fields.get("datasets", []):
        if dataset in get_plugins().datasets:
            found_update["dataset"] = dataset
            break
    else:
        if fields.get("datasets"):
            notes.append(f"trained on {', '.join(fields['datasets'])} (not registered here)")
    if notes:
        found_update["notes"] = "; ".join(filter(None, [card.imported.notes, *notes]))
    if found_update:
        update["imported"] = card.imported.model_copy(update=found_update)
    if "base_model" in fields:
        update["lineage"] = f"{card.lineage}; fine-tuned from {', '.join(fields['base_model'])} (Hugging Face Hub)"
    return type(card).model_validate({**card.model_dump(), **update}) if update else card


MAX_CONFIG_BYTES = 1024 * 1024


def _folder_config(folder: Path) -> tuple[dict, families.FamilyRecord]:
    """config.json, and the family of its model type."""
    path = folder / "config.json"
    try:
        config = json.loads(read_limited(path, MAX_CONFIG_BYTES, "config"))
    except FileNotFoundError:
        raise ZooError(f"{folder}: no config.json; not a transformers model folder") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise ZooError(f"{path}: not JSON") from None
    kind = config.get("model_type") if isinstance(config, dict) else None
    return config, families.for_hf_model_type(kind, path)


def _folder_tokenizer(folder: Path, vocab_size: int, scratch: Path) -> Path | None:
    """The folder's tokenizer.json in the zoo's form, when it has one: single
    characters (word level), or byte-level BPE whose first 256 ids are the bytes
    in order (what `zoo export` writes); otherwise the tokenizer.json itself,
    which the 'hf' tokenizer runs. None when the folder has no tokenizer."""
    path = folder / "tokenizer.json"
    if not path.exists():
        return None
    try:
        model = json.loads(read_limited(path, 64 * 1024 * 1024, "tokenizer"))["model"]
        vocabulary = model["vocab"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, RecursionError):
        raise ZooError(f"{path}: not a tokenizers JSON file") from None
    by_id = sorted(vocabulary.items(), key=lambda item: item[1]) if isinstance(vocabulary, dict) else []
    if [i for _, i in by_id] != list(range(len(by_id))) or len(by_id) != vocab_size:
        return path
    if model.get("type") == "WordLevel" and all(len(token) == 1 for token, _ in by_id):
        target = scratch / "characters.json"
        target.write_text(
            json.dumps({"characters": [token for token, _ in by_id]}, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        return target
    if model.get("type") == "BPE":
        to_byte = {c: b for b, c in bytes_to_unicode().items()}
        try:
            tokens = [bytes(to_byte[c] for c in token) for token, _ in by_id]
        except KeyError:
            tokens = []
        if tokens[:256] == [bytes([b]) for b in range(256)]:  # tiktoken's ranks format: rank = id
            target = scratch / "ranks.tiktoken"
            target.write_text(
                "".join(f"{base64.b64encode(t).decode('ascii')} {i}\n" for i, t in enumerate(tokens)), encoding="ascii"
            )
            return target
    return path


def _check_weights_file(weights: Path) -> None:
    """Regular files (a FIFO is refused without waiting on it), the file or its
    shards together no larger than the parameter limit allows (8 bytes a value,
    and the largest header): they are refused before any of them is read."""
    size = 0
    for path in weight_files(weights):
        try:
            with open_regular(path, "weights file") as handle:
                size += os.fstat(handle.fileno()).st_size
        except OSError as exc:  # a shard's name comes from the index: shown escaped
            raise ZooError(f"{printable(str(path), None)}: cannot read: {describe_os_error(exc)}") from None
    largest = 8 * limits()[0] + 8 + MAX_HEADER_BYTES
    if size > largest:
        raise ZooError(
            f"{weights}: {size:,} bytes, more than weights within the parameter limit can take ({largest:,})"
        )


# config.json's counts, in the names transformers' configs use: each is checked
# against the weights' own tensors (their headers only) before transformers or a
# family builds anything from it; transformers' config class alone took 44 s and
# 3.4 GB to refuse num_hidden_layers 1000000.
LAYER_COUNTS = ("num_hidden_layers", "num_layers")  # GPT-2's own is its family's to check
SIZES = (
    "hidden_size",
    "n_embd",
    "d_model",
    "intermediate_size",
    "n_inner",
    "num_attention_heads",
    "n_head",
    "num_key_value_heads",
    "head_dim",
    "num_local_experts",
    "num_experts",
    "moe_intermediate_size",
)
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d{1,9})\.")


def check_config_counts(raw: Any, config_path: Path, weights: Path) -> None:
    """config.json's layer count no more than the layers the weights' tensor names
    number, and each width, head count and head size a whole number from 1 to the
    largest dimension of any tensor: read from the safetensors headers, in
    milliseconds, whatever the config claims. Values that are not whole numbers are
    left to the family's own reading, which names them."""
    if not isinstance(raw, dict):
        return
    layers: set[int] = set()
    widest = 0
    for path in weight_files(weights):
        try:
            header = read_header(path)
        except ZooError as exc:  # a shard's name comes from the index: shown escaped
            raise ZooError(printable(str(exc), None)) from None
        for name, entry in header.items():
            if name == "__metadata__" or not isinstance(entry, dict):
                continue
            shape = entry.get("shape")
            if isinstance(shape, list) and all(isinstance(d, int) for d in shape):
                widest = max([widest, *shape])
            match = _LAYER_INDEX.search(name)
            if match:
                layers.add(int(match.group(1)))
    held = max(layers) + 1 if layers else 0

    def whole(field: str) -> int | None:
        value = raw.get(field)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    for field in LAYER_COUNTS:
        value = whole(field)
        if value is not None and value > held:
            raise ZooError(f"{config_path}: config.json says {field} {value}, the file holds {held} layers")
    for field in SIZES:
        value = whole(field)
        if value is None:
            continue
        if value < 1:
            raise ZooError(f"{config_path}: field 'config.{field}': must be at least 1, not {value}")
        if value > widest:
            raise ZooError(
                f"{config_path}: config.json says {field} {value:,}, larger than every dimension "
                f"of the weights' tensors (at most {widest:,})"
            )


def import_hf(
    source: Path,
    name: str,
    tokenizer_file: Path | None = None,
    license: str | None = None,
    replace: bool = False,
    progress: WorkProgress | None = None,
):
    """Convert a transformers folder (config.json + model.safetensors or its shards; GPT-2 or
    a family of hf_layouts) to a zoo variant in the user's catalogue (over the
    user's own variant of that name only with ``replace``). ``source`` is the
    folder, or a repository id (ORG/NAME) found in the Hugging Face cache
    offline (hf_cache). The folder's README.md (a Hub model card), when it has
    one, gives the license (unless ``license`` is given), tags, description and
    dataset (`hub_card_fields`). ``progress`` is told of each stage (reading the
    weights file by file; hashing, checking and writing)."""
    progress = progress or WorkProgress("import", enabled=False)
    folder = cached_snapshot(str(source)) if looks_like_repo_id(str(source)) else source
    if not folder.is_dir():
        raise ZooError(f"{folder}: not a folder (zoo import hf reads a transformers model folder or ORG/NAME)")
    check_name_is_free(name, replace)
    raw, record = _folder_config(folder)
    weights = weights_in(folder)
    if weights is None:
        raise ZooError(
            f"{folder}: no model.safetensors nor model.safetensors.index.json "
            "(pickled pytorch_model.bin is not read: it could run code)"
        )
    _check_weights_file(weights)
    check_config_counts(raw, folder / "config.json", weights)
    zoo_config, context_length = record.config_from_hf(
        raw, folder / "config.json", lambda: _transformers_config(folder)
    )
    progress.stage("reading weights", len(weight_files(weights)))
    zoo_config, renamed = record.tensors_from_hf(zoo_config, read_tensors(weights, progress.advance), weights)
    progress.stage("hashing, checking, writing", 3)
    vocab = record.vocab_size(renamed)
    with tempfile.TemporaryDirectory() as scratch:
        own_tokenizer = tokenizer_file is None
        if tokenizer_file is None:
            tokenizer_file = _folder_tokenizer(folder, vocab, Path(scratch))
        try:
            spec, tokenizer_path = tokenizer_for_vocabulary(vocab, tokenizer_file)
            check_tokenizer(spec, tokenizer_path)
            if spec.kind == "hf":
                probe_tokenizer(tokenizer_path)
            if spec.kind == "hf" and own_tokenizer:  # the folder's tokenizer_config.json may say otherwise
                lookup = tokenizer_backend(tokenizer_path).token_to_id
                spec = spec.model_copy(update={"bos_id": folder_bos(folder, spec.bos_id, lookup)})
        except ZooError as exc:  # a tokenizer rewritten in the scratch folder is gone when the message is read
            if tokenizer_file is not None and tokenizer_file.parent == Path(scratch):
                raise ZooError(str(exc).replace(str(tokenizer_file), f"{folder / 'tokenizer.json'}")) from None
            raise
        card = imported_card(
            name,
            zoo_config,
            context_length,
            spec,
            count_parameters(renamed),
            weights,
            _hashed(weights, progress),
            f"transformers {record.title}",
            None,
            license=license or "unspecified",
            architecture=record.architectures[0],
            family=record.name,
            hub_repository=str(source) if looks_like_repo_id(str(source)) else None,
        )
        card = with_hub_card(card, folder, license_given=license is not None)
        card = card.model_copy(update={"chat": folder_chat(folder)})
        check_card_fits_tensors(weights, card, renamed, record)
        progress.advance()
        registry = publish_import(card, renamed, tokenizer_path)
        progress.advance()
    return card, registry


def _hashed(weights: Path, progress: WorkProgress) -> str:
    """The weights file's sha256 (of a sharded folder: its index's), counted as a stage's step."""
    sha = sha256_file(weights, "weights file")
    progress.advance()
    return sha


def _transformers_config(folder: Path):
    """config.json read through transformers' own config class, which also reads
    the older field names (``rope_theta``, ``rope_scaling``, ``rotary_pct``)."""
    transformers = _require_transformers()
    quiet_transformers()
    try:
        return transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
    except (ValueError, TypeError, KeyError, OSError) as exc:
        raise ZooError(
            f"{folder / 'config.json'}: transformers cannot read it: {' '.join(str(exc).split())[:200]}"
        ) from None
