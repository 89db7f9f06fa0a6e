"""`zoo import gguf`: a llama.cpp GGUF file as a zoo variant.

The file is first walked by gguf_files (every count, length and offset
bounded, the metadata read as plain values, the counts it claims checked
against the tensors the file holds); its tensors are then memory-mapped as
llama.cpp's own Python reader (`gguf.GGUFReader`) gives them.
Its ``general.architecture`` names the family record that reads it
(``zoo_core.plugin_api.families``): the record turns the architecture's
metadata keys into the card's config and llama.cpp's tensors (dequantised
to float32 by the package's own `gguf.quants.dequantize`) into the
architecture's, undoing llama.cpp's own row orders where it has them.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Mapping

import gguf
import numpy as np
import torch
from tokenizers import Tokenizer

from ..catalogue.cards import ChatSpec, ModelCard
from ..errors import ZooError, printable
from ..evaluation.bits import summed_nll
from ..loading.packed_modules import PACKED_KEY, pack_modules
from ..plugin_api import families
from ..storage.checkpoints import adopt_mapped, sha256_file, tied_names
from ..storage.files import describe_os_error
from ..storage.locations import zoo_home
from ..storage.tensor_files import spilled
from ..storage.user_catalogue import add_user_variant
from ..training.progress import WorkProgress
from .deferred_tensors import Deferred
from .gguf_files import GGUFHeader, check_counts_fit_tensors, check_gguf_header, tensor_data
from .gguf_packing import RowPacking, logical_values, value_shaped, without_tied_heads
from .gguf_tokenizer import tokenizer_from_gguf
from .imports import (
    check_card_fits_tensors,
    check_name_is_free,
    check_tokenizer,
    count_parameters,
    hub_repository_of,
    imported_card,
    tokenizer_for_vocabulary,
)

# The fixed text whose perplexity the import records (metrics.paragraph_*):
# plain English prose, written for the zoo, that any English model should read well.
REFERENCE_PARAGRAPH = (
    "The library stood at the corner of two quiet streets, and every morning the same old man "
    "unlocked its heavy wooden door. He swept the steps, opened the windows to let in the air, and "
    "set out the newspapers on a long table near the entrance. Children came in the afternoon to "
    "borrow books about animals, ships and distant countries, while their parents read in the soft "
    "chairs by the fire. When the evening came, he turned off the lamps one by one, listened to the "
    "silence for a moment, and walked home along the river."
)


def import_gguf(
    source: Path,
    name: str | None = None,
    license: str | None = None,
    replace: bool = False,
    dequantize: bool = False,
    progress: WorkProgress | None = None,
):
    """Convert a GGUF file of a registered family into a variant in the user's
    catalogue (over the user's own variant of that name only with ``replace``):
    its quantised matrices kept as the file gives them (zoo_core.interop.gguf_packing;
    all float32 with ``dequantize``), its tokenizer as tokenizer.json ('hf'), its chat template,
    licence, name and sha256 in the card, and its perplexity on `REFERENCE_PARAGRAPH`.
    ``progress`` (a zoo_core.training.progress.WorkProgress) is told of each stage:
    a 135M-parameter file takes half a minute.

    It streams: the network's tensors are read from the memory-mapped file and made one
    at a time (zoo_core.interop.deferred_tensors), each written to a scratch file and
    mapped back from there, so the import holds about one tensor beside what the
    reference paragraph's forward pass touches, never the model twice."""
    progress = progress or WorkProgress("import", enabled=False)
    header = check_gguf_header(source)
    metadata = header.metadata
    architecture = _text(source, metadata, gguf.Keys.General.ARCHITECTURE)
    record = families.for_gguf_architecture(architecture, metadata)
    if record is None:
        raise ZooError(
            f"{source}: architecture '{printable(architecture)}'; the GGUF architectures that import are "
            f"{', '.join(families.gguf_readers())} (other files: convert with transformers and use zoo import hf)"
        )
    name = name if name is not None else _variant_name(source, metadata)
    check_name_is_free(name, replace)
    check_counts_fit_tensors(source, header, architecture)
    settings, context_length = record.config_from_gguf(metadata, source)
    tensors = tensor_data(source, header)
    packing = None if dequantize else RowPacking(source, header, lambda tensor: _dequantized(source, tensor))
    # The record is handed deferred tensors: it arranges shapes only, and each of the
    # network's tensors is read, made and written one at a time below.
    settings, renamed = record.tensors_from_gguf(
        settings, tensors, lambda tensor: _deferred(source, tensor, packing), source
    )
    # The scratch file beside the catalogue, not in /tmp: where /tmp is memory (tmpfs, as on
    # Fedora and Arch) the streamed tensors would sit in RAM, and the checkpoint is going there anyway.
    with tempfile.TemporaryDirectory(dir=_catalogue_folder(), prefix=".import-") as scratch:
        progress.stage("reading tensors", len({id(tensor) for tensor in renamed.values()}))
        renamed, types = _streamed(renamed, packing, Path(scratch) / "tensors.bin", progress)
        vocab = record.vocab_size(renamed)
        tokenizer_file = Path(scratch) / "tokenizer.json"
        tokenizer = _tokenizer(source, metadata)
        tokenizer_file.write_text(tokenizer.to_str(), encoding="utf-8")
        try:
            spec, tokenizer_path = tokenizer_for_vocabulary(vocab, tokenizer_file)
            check_tokenizer(spec, tokenizer_path)
        except ZooError as exc:  # the scratch file is gone by the time anyone reads the message
            raise ZooError(str(exc).replace(str(tokenizer_file), f"{source} (its tokenizer)")) from None
        card = imported_card(
            name,
            settings,
            context_length,
            spec,
            count_parameters(renamed) if not types else logical_values(renamed, types),
            source,
            sha256_file(source, "GGUF file"),
            f"GGUF {architecture}",
            None,
            notes=_types(header, kept=bool(types)),
            hub_repository=hub_repository_of(
                *(_optional_text(metadata, key) for key in ("general.source.repo_url", "general.source.url"))
            ),
            license=license or _optional_text(metadata, gguf.Keys.General.LICENSE) or "unspecified",
            architecture=record.architectures[0],
            family=record.name,
        )
        card = card.model_copy(update={"chat": _chat(source, metadata), "tags": [*card.tags, _main_type(header)]})
        progress.stage("checking, measuring, writing", 3)  # build, reference paragraph, checkpoint
        renamed = without_tied_heads(renamed, types)  # a tied head is stored once
        network = check_card_fits_tensors(
            source,
            card,
            renamed,
            record,
            prepare=lambda net: pack_modules(net, types),
            shaped=value_shaped(renamed, types),
        )
        # The network takes the mapped tensors as they are (no copy); a tied head shares the embedding's.
        tied = tied_names(network)
        adopt_mapped(network, {**renamed, **{head: renamed[first] for head, first in tied.items()}})
        progress.advance()
        card = _with_paragraph_metrics(card, network, tokenizer)
        packed = {PACKED_KEY: json.dumps(types, sort_keys=True)} if types else None
        progress.advance()
        # Each tensor is its own map of the scratch file: written as it is, no copy made.
        registry = add_user_variant(card, renamed, tokenizer_path, metadata=packed)
        progress.advance()
        del network, renamed  # the scratch file's maps, before the folder goes
    progress.close()
    return card, registry


def _catalogue_folder() -> Path:
    home = zoo_home()
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ZooError(f"{home}: cannot write the user catalogue ($ZOO_HOME): {describe_os_error(exc)}") from None
    return home


def read_back(source: Path) -> tuple[dict[str, Any], int, dict[str, torch.Tensor]]:
    """The file's configuration, context length and tensors (the zoo's names,
    float32), read as `zoo import gguf --dequantize` reads them, with the gguf package
    alone: what `zoo export --format gguf` checks the file it wrote against."""
    header = check_gguf_header(source)
    metadata = header.metadata
    architecture = _text(source, metadata, gguf.Keys.General.ARCHITECTURE)
    record = families.for_gguf_architecture(architecture, metadata)
    if record is None:
        raise ZooError(f"{source}: architecture '{printable(architecture)}' does not import")
    settings, context_length = record.config_from_gguf(metadata, source)
    tensors = tensor_data(source, header)
    settings, renamed = record.tensors_from_gguf(settings, tensors, lambda tensor: _dequantized(source, tensor), source)
    return settings, context_length, renamed


def _optional_text(metadata: Mapping[str, Any], key: str) -> str | None:
    value = metadata.get(key)
    return value if isinstance(value, str) and value.strip() else None


def _text(source: Path, metadata: Mapping[str, Any], key: str) -> str:
    value = _optional_text(metadata, key)
    if value is None:
        raise ZooError(f"{source}: no {key} in the file's metadata")
    return value


def _variant_name(source: Path, metadata: Mapping[str, Any]) -> str:
    """general.name as a variant name: lower case, runs of anything else one '-'."""
    title = _optional_text(metadata, gguf.Keys.General.NAME)
    name = re.sub(r"[^a-z0-9.]+", "-", (title or "").lower()).strip("-.")
    if not name:
        raise ZooError(f"{source}: the file has no general.name; give the variant's name with --name NAME")
    return name


DEQUANTIZE_CHUNK_BYTES = 16 << 20  # float32 made at once: gguf.quants' own temporaries are a few times this


def _torch_shape(source: Path, tensor) -> tuple[int, ...]:
    """A reader's tensor's shape in torch's order (ggml lists the row length first)."""
    shape = tuple(int(d) for d in reversed(tensor.shape))
    if len(shape) > 3:  # three: experts stacked, (experts, rows, row length)
        raise ZooError(f"{source}: tensor '{printable(tensor.name)}' has {len(shape)} dimensions (at most 3)")
    return shape


def _dequantized(source: Path, tensor) -> torch.Tensor:
    """One of the reader's tensors as float32 in torch's shape, made a few megabytes
    of rows at a time: the package's dequantisers hold several temporaries the size of
    what they are given, which for a whole embedding table would be gigabytes."""
    shape = _torch_shape(source, tensor)
    rows = tensor.data.reshape(-1, tensor.data.shape[-1])  # rows of values, or of block bytes
    out = np.empty((rows.shape[0], shape[-1]), dtype=np.float32)
    step = max(1, DEQUANTIZE_CHUNK_BYTES // (4 * shape[-1]))
    for start in range(0, rows.shape[0], step):
        out[start : start + step] = gguf.quants.dequantize(rows[start : start + step], tensor.tensor_type)
    return torch.from_numpy(out.reshape(shape))


def _deferred(source: Path, tensor, packing: RowPacking | None) -> Deferred:
    """One of the reader's tensors, to be read only when the network's tensor it goes
    into is made: as tagged rows of blocks (``packing``) or as float32 values."""
    if packing is not None and packing.tagged(tensor):
        return Deferred(packing.tagged_shape(tensor), torch.uint8, lambda: packing.read(tensor))
    return Deferred(_torch_shape(source, tensor), torch.float32, lambda: _dequantized(source, tensor))


def _streamed(
    renamed: dict[str, torch.Tensor], packing: RowPacking | None, scratch: Path, progress: WorkProgress
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The record's tensors made one at a time (packed ones settled into their blocks),
    each written to ``scratch`` and let go before the next is made; returned mapped from
    there, one tensor under two names (a tied head) still one, with {name: type} of
    those kept as blocks."""
    first_name: dict[int, str] = {}
    types: dict[str, str] = {}

    def one_at_a_time():
        for name, tensor in renamed.items():
            if id(tensor) in first_name:
                continue
            first_name[id(tensor)] = name
            values = tensor.materialize() if isinstance(tensor, Deferred) else tensor
            if packing is not None and values.dtype == torch.uint8:
                values, kind = packing.settle(name, values)
                if kind is not None:
                    types[name] = kind
            progress.advance()
            yield name, values
            del values  # before the next is made

    mapped = spilled(one_at_a_time(), scratch)
    made = {name: mapped[first_name[id(tensor)]] for name, tensor in renamed.items()}
    for name, tensor in renamed.items():
        if first_name[id(tensor)] in types:
            types[name] = types[first_name[id(tensor)]]
    return made, types


def _tokenizer(source: Path, metadata: Mapping[str, Any]) -> Tokenizer:
    try:
        tokenizer = tokenizer_from_gguf(metadata)
    except ZooError as exc:
        raise ZooError(f"{source}: {exc}") from None
    # The import scores the reference paragraph: a vocabulary that cannot spell it in
    # at least two tokens (say, a few tokens and no byte fallback) has nothing to score.
    for special in (False, True):
        count = len(tokenizer.encode(REFERENCE_PARAGRAPH, add_special_tokens=special).ids)
        if count < 2:
            raise ZooError(
                f"{source}: the file's tokenizer turns the reference paragraph ({len(REFERENCE_PARAGRAPH)} "
                f"characters of English) into {count} token(s): its vocabulary cannot spell plain text"
            )
    return tokenizer


def _token_text(source: Path, metadata: Mapping[str, Any], key: str) -> str | None:
    index = metadata.get(key)
    if index is None:
        return None
    tokens = metadata.get(gguf.Keys.Tokenizer.LIST) or []
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(tokens):
        raise ZooError(f"{source}: {key} is {printable(repr(index))}, not a token of the vocabulary")
    return tokens[index]


def _chat(source: Path, metadata: Mapping[str, Any]) -> ChatSpec | None:
    """The chat template with its special tokens' texts; the end-of-sequence
    and end-of-turn tokens both end the assistant's turn."""
    template = _optional_text(metadata, gguf.Keys.Tokenizer.CHAT_TEMPLATE)
    if template is None:
        return None
    eos = _token_text(source, metadata, gguf.Keys.Tokenizer.EOS_ID)
    ends = [_token_text(source, metadata, key) for key in (gguf.Keys.Tokenizer.EOS_ID, gguf.Keys.Tokenizer.EOT_ID)]
    return ChatSpec(
        template=template,
        bos_token=_token_text(source, metadata, gguf.Keys.Tokenizer.BOS_ID),
        eos_token=eos,
        stop=list(dict.fromkeys(text for text in ends if text)),
    )


def _types(header: GGUFHeader, kept: bool = False) -> str:
    """The tensor types, most used first: what was quantised how."""
    counts = Counter(tensor.type.name for tensor in header.tensors)
    fate = "quantised blocks kept as the file gives them" if kept else "dequantised to float32"
    return ", ".join(f"{count} {kind}" for kind, count in counts.most_common()) + f" tensors, {fate}"


def _main_type(header: GGUFHeader) -> str:
    """The type holding most of the weights, as a tag: 'gguf-q4_1'."""
    values: Counter[str] = Counter()
    for tensor in header.tensors:
        values[tensor.type.name] += math.prod(tensor.dims)
    return f"gguf-{values.most_common(1)[0][0].lower()}" if values else "gguf"


def _with_paragraph_metrics(card: ModelCard, network: torch.nn.Module, tokenizer: Tokenizer) -> ModelCard:
    """The card with the perplexity and bits per byte of `REFERENCE_PARAGRAPH`,
    read as llama.cpp reads a text: after the special tokens the file says to
    put first (`tokenizer.ggml.add_bos_token`), each token predicted from
    those before it; without such a token, the first is only history."""
    text = tokenizer.encode(REFERENCE_PARAGRAPH, add_special_tokens=False).ids
    framed = tokenizer.encode(REFERENCE_PARAGRAPH).ids
    first = framed.index(text[0]) if text[0] in framed else 0
    ids, scored = framed[:first] + text, REFERENCE_PARAGRAPH  # an end-of-sequence token after it is not scored
    if first == 0:
        first, scored = 1, REFERENCE_PARAGRAPH[len(tokenizer.decode(text[:1])) :]
    nats = summed_nll(network, ids, first, card.context_length)
    metrics = card.metrics.model_copy(
        update={
            "paragraph_perplexity": round(math.exp(nats / (len(ids) - first)), 3),
            "paragraph_bits_per_byte": round(nats / math.log(2) / len(scored.encode("utf-8")), 4),
        }
    )
    return card.model_copy(update={"metrics": metrics})
