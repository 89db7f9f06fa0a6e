"""A transformers folder's chat template and special tokens, as the card's ``chat``.

transformers keeps the template in ``chat_template.jinja`` (since 4.47) or, as
before, under ``chat_template`` in ``tokenizer_config.json``: a string, or a
list of named templates of which "default" is the one ``apply_chat_template``
uses. ``bos_token`` and ``eos_token`` there are a token's text, or an
AddedToken written as an object with its text under ``content``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from ..catalogue.cards import ChatSpec
from ..errors import ZooError
from ..storage.files import read_limited

# A tokenizer_config.json is kilobytes; the largest chat templates in use are tens of kilobytes.
MAX_TOKENIZER_CONFIG_BYTES = 16 * 1024 * 1024
MAX_TEMPLATE_BYTES = 1024 * 1024


def tokenizer_config(folder: Path) -> dict[str, Any]:
    """The folder's tokenizer_config.json, or {} without one."""
    config: dict[str, Any] = {}
    config_path = folder / "tokenizer_config.json"
    if config_path.is_file():
        try:
            config = json.loads(read_limited(config_path, MAX_TOKENIZER_CONFIG_BYTES, "tokenizer config"))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            raise ZooError(f"{config_path}: not a JSON file") from None
        if not isinstance(config, dict):
            raise ZooError(f"{config_path}: not a JSON object")
    return config


def folder_bos(folder: Path, bos_id: int | None, token_id: Callable[[str], int | None]) -> int | None:
    """The token to put first: the tokenizer.json's (``bos_id``) unless tokenizer_config.json's
    ``add_bos_token`` says otherwise, as transformers' Llama and Gemma tokenizers rebuild their
    post-processor from it; ``token_id`` looks its ``bos_token`` up."""
    config = tokenizer_config(folder)
    wanted = config.get("add_bos_token")
    if not isinstance(wanted, bool):
        return bos_id
    if not wanted:
        return None
    text = _token_text(config.get("bos_token"), "bos_token", folder / "tokenizer_config.json")
    return bos_id if bos_id is not None or text is None else token_id(text)


def folder_chat(folder: Path) -> ChatSpec | None:
    """The folder's chat template and the texts of its bos and eos tokens, or None without a template."""
    config = tokenizer_config(folder)
    config_path = folder / "tokenizer_config.json"
    template_path = folder / "chat_template.jinja"
    template: str | None
    if template_path.is_file():
        try:
            template = read_limited(template_path, MAX_TEMPLATE_BYTES, "chat template").decode("utf-8")
        except UnicodeDecodeError:
            raise ZooError(f"{template_path}: the chat template is not UTF-8 text") from None
    else:
        template = _default_template(config.get("chat_template"), config_path)
    if not template:
        return None
    return ChatSpec(
        template=template,
        bos_token=_token_text(config.get("bos_token"), "bos_token", config_path),
        eos_token=_token_text(config.get("eos_token"), "eos_token", config_path),
    )


def _default_template(value: Any, where: Path) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        if isinstance(named.get("default"), str):
            return named["default"]
    raise ZooError(f"{where}: chat_template is neither a template nor a list with one named 'default'")


def _token_text(value: Any, key: str, where: Path) -> str | None:
    if isinstance(value, dict):  # an AddedToken, saved with its settings
        value = value.get("content")
    if value is None or isinstance(value, str):
        return value
    raise ZooError(f"{where}: {key} is neither a token's text nor an object with its text as 'content'")
