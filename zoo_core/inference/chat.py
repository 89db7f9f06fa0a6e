"""A conversation as the model's prompt: its card's chat template, rendered as transformers renders it.

A chat template is a Jinja template from the model's author (a Hugging Face
folder's ``chat_template``, a GGUF file's ``tokenizer.chat_template``), so it
gives the prompt the model was tuned on only when it is rendered exactly as
transformers' ``apply_chat_template`` renders it (transformers 5.x,
``transformers/utils/chat_template_utils.py``): a sandboxed environment that
cannot change the objects it is given, blocks trimmed (``trim_blocks``,
``lstrip_blocks``), the ``loopcontrols`` extension, a ``tojson`` that keeps
non-ASCII text and does not escape HTML, ``raise_exception(message)`` and
``strftime_now(format)``; the variables ``messages``, ``add_generation_prompt``,
``tools`` and ``documents`` (None: the zoo passes no tools) and the special
tokens (``bos_token``, ``eos_token``). Messages are plain JSON
data, and keys whose value is None are dropped, as transformers drops them.

A reply ends at the end-of-sequence token or at one of the card's ``stop``
texts; the reply shown stops before it (``chat_stops``).
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any, Mapping, Sequence

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..catalogue.cards import ChatSpec, ModelCard
from ..errors import ZooError

ROLES = ("system", "user", "assistant")


def chat_spec(card: ModelCard) -> ChatSpec:
    """The card's chat template, or the one line saying the variant cannot chat and what to do instead."""
    if card.chat is None:
        raise ZooError(
            f"'{card.name}' has no chat template (its card has no chat field), so it cannot chat: continue text "
            f"with `zoo sample {card.name} --prompt TEXT`, or chat with a model imported with its template "
            "(`zoo import hf FOLDER` reads the folder's chat_template)"
        )
    return card.chat


def chat_stops(spec: ChatSpec) -> tuple[str, ...]:
    """The texts a reply ends before: the end-of-sequence token's and the card's stop texts."""
    return tuple(dict.fromkeys([*([spec.eos_token] if spec.eos_token else []), *spec.stop]))


def render_chat(spec: ChatSpec, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> str:
    """The prompt for ``messages`` (dicts with ``role`` and ``content``): the
    template rendered as transformers' ``apply_chat_template(..., tokenize=False)``
    renders it; a template that refuses the conversation is one line."""
    if not messages:
        raise ZooError("the conversation is empty; give at least one message")
    conversation = [{key: value for key, value in dict(m).items() if value is not None} for m in messages]
    special = {name: value for name, value in (("bos_token", spec.bos_token), ("eos_token", spec.eos_token)) if value}
    try:
        # tools and documents are None, not undefined, as transformers passes them without any:
        # a template's `tools is not none` must read the same.
        return _compiled(spec.template).render(
            messages=conversation, tools=None, documents=None, add_generation_prompt=add_generation_prompt, **special
        )
    except TemplateError as exc:  # raise_exception() in the template, or a template Jinja cannot run
        raise ZooError(f"the chat template refused the conversation: {exc}") from None


def _raise_exception(message: str):
    raise TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML; a prompt wants the JSON itself.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


@lru_cache(maxsize=16)
def _compiled(template: str):
    """One compiled template per text: a conversation renders it at every turn."""
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    environment.filters["tojson"] = _tojson
    environment.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
    try:
        return environment.from_string(template)
    except TemplateError as exc:
        raise ZooError(f"the card's chat template is not a Jinja template Jinja can read: {exc}") from None


def chat_prompt_ids(model, messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """``messages`` rendered with ``model``'s template and encoded: the ids of the
    prompt the reply continues. A conversation longer than the model's window is
    refused rather than cut, since cutting would drop the template's beginning."""
    text = render_chat(chat_spec(model.card), messages)
    ids = model.tokenizer.encode(text)
    window = model.card.context_length
    if len(ids) > window:
        raise ZooError(
            f"the conversation is {len(ids)} tokens, more than the {window} '{model.name}' reads; start a new one"
        )
    return ids
