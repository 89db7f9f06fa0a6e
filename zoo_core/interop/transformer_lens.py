"""TransformerLens: a variant as a `HookedTransformer`, built in memory or written to a folder.

TransformerLens 3.x (the last line with `HookedTransformer`; 4.0 removed it in
favour of `TransformerBridge`, which wraps a transformers model) takes a
config built by hand and a state dict, so nothing is downloaded: the
config names no pretrained model and no tokenizer to fetch, and the tokenizer
given is the zoo's own, converted as for `zoo export --format hf`.

What maps, and under which names, is the family record's
(``zoo_core.plugin_api.families``, `FamilyRecord.to_lens`): this module builds
the `HookedTransformer`, writes it and checks it computes the zoo's logits.
"""

from __future__ import annotations

import json
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..errors import ZooError
from ..loading.api import load
from ..plugin_api import families
from .hf import PAD_TOKEN_ID, logit_difference, quiet_transformers, verification_ids
from .hf_tokenizers import hf_tokenizer_for

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def _require_transformer_lens():
    try:
        import transformer_lens  # noqa: F401
    except ImportError:
        raise ZooError("TransformerLens export needs transformer_lens: pip install 'zoo-lm[lens]'") from None


def _lens_form(model) -> tuple[dict, dict]:
    """The variant's `HookedTransformerConfig` fields and TransformerLens state dict, or a one-line refusal."""
    try:
        record = families.for_lens(model)
        refusal = record.lens_refusal(model)
        if refusal:
            raise ZooError(refusal)
        return record.to_lens(model)
    except ZooError as exc:
        raise ZooError(f"cannot convert to TransformerLens: {exc}") from None
    except (KeyError, AttributeError) as exc:  # a plugin's block with other tensor names
        raise ZooError(
            f"cannot convert to TransformerLens: '{model.name}' is not laid out like the zoo's transformer (no {exc})"
        ) from None


@contextmanager
def _quiet_construction():
    """HookedTransformer's constructor warns that the class is deprecated (in 3.x,
    pointing to 4.0's TransformerBridge); that is TransformerLens' news, not the user's."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*HookedTransformer is deprecated.*")
        yield


def _tokenizer(model):
    """The zoo tokenizer as a transformers tokenizer, or None where none maps."""
    try:
        tokenizer = hf_tokenizer_for(model.tokenizer, model.card.context_length)
    except ZooError:
        return None
    # TransformerLens pads every call to its tokenizer, which needs a pad token
    # with an id; the zoo has no special tokens, so padding uses id 0. Only the
    # padded positions of a ragged batch carry it, and TransformerLens masks those.
    tokenizer.pad_token = tokenizer.convert_ids_to_tokens(PAD_TOKEN_ID)
    return tokenizer


def hooked_transformer(model_or_name):
    """A `transformer_lens.HookedTransformer` computing the variant's logits, converted
    in memory (nothing is downloaded), with the zoo's tokenizer where it maps to a
    transformers one. ``model_or_name`` is a loaded `ZooModel` or a variant name."""
    _require_transformer_lens()
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    model = model_or_name
    if isinstance(model_or_name, str):
        model = load(model_or_name, merge_adapter=True)
    fields, state = _lens_form(model)
    with _quiet_construction():
        lens = HookedTransformer(HookedTransformerConfig(**fields), tokenizer=_tokenizer(model), move_to_device=False)
    missing, unexpected = lens.load_state_dict(state, strict=False)
    # TransformerLens' own buffers (its causal mask, rotary tables) are not weights.
    missing = [name for name in missing if not name.endswith((".mask", ".IGNORE", ".rotary_sin", ".rotary_cos"))]
    if missing or unexpected:
        raise ZooError(f"TransformerLens layout mismatch: missing {missing}, unexpected {unexpected}")
    return lens.eval()


def load_exported(folder: Path):
    """What the documented snippet does: the `HookedTransformer` a `zoo export
    --format transformer-lens` folder describes."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformers import AutoTokenizer

    config = HookedTransformerConfig(**json.loads((folder / CONFIG_FILE).read_text()))
    tokenizer = AutoTokenizer.from_pretrained(folder) if (folder / "tokenizer.json").exists() else None
    with _quiet_construction():
        lens = HookedTransformer(config, tokenizer=tokenizer)
    lens.load_state_dict(load_file(folder / WEIGHTS_FILE), strict=False)
    return lens.eval()


def export_transformer_lens(model, out: Path) -> tuple[list[Path], dict]:
    """Write ``out``: ``config.json`` (`HookedTransformerConfig` fields),
    ``model.safetensors`` (TransformerLens' state dict), the tokenizer files
    `AutoTokenizer` loads, and ``zoo_card.json``; then load it back as the
    documented snippet does and check its logits against the zoo's (1e-4)."""
    lens = hooked_transformer(model)
    quiet_transformers()
    fields, state = _lens_form(model)
    out.mkdir(parents=True, exist_ok=True)
    (out / CONFIG_FILE).write_text(json.dumps(fields, indent=2) + "\n")
    weights = {name: tensor.contiguous() for name, tensor in state.items()}
    save_file(weights, str(out / WEIGHTS_FILE))
    if lens.tokenizer is not None:
        _tokenizer(model).save_pretrained(out)
    (out / "zoo_card.json").write_text(
        json.dumps(model.card.model_dump(mode="json", exclude_none=True), indent=2) + "\n"
    )
    ids, _ = verification_ids(model)
    loaded = load_exported(out)
    with torch.no_grad():
        theirs = loaded(torch.tensor([ids]))
        ours, _ = model.network(torch.tensor([ids]))
    difference, tolerance = logit_difference(theirs, ours)
    if difference > tolerance:
        raise ZooError(
            f"TransformerLens logits differ from the zoo's by {difference:.2e} (> {tolerance:.1e}); nothing usable was written"
        )
    checks = {"max_logit_difference": difference, "logit_tokens": len(ids)}
    return sorted(path for path in out.iterdir() if path.is_file()), checks
