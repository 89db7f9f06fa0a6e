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

import atexit
import threading
from typing import Any, Mapping, Sequence

from ..catalogue.cards import ChatSpec, ModelCard
from ..errors import ZooError, printable
from .template_sandbox import TemplateFailure, TemplateSandbox

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


def render_chat(
    spec: ChatSpec, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True, name: str | None = None
) -> str:
    """The prompt for ``messages`` (dicts with ``role`` and ``content``): the
    template rendered as transformers' ``apply_chat_template(..., tokenize=False)``
    renders it, in a worker process with a deadline and caps on its output and
    memory (zoo_core.inference.template_sandbox). Every failure, a template that
    refuses the conversation, loops, recurses, divides by zero or renders nothing,
    is one line naming the template (of ``name``, when given)."""
    if not messages:
        raise ZooError("the conversation is empty; give at least one message")
    conversation = [{key: value for key, value in dict(m).items() if value is not None} for m in messages]
    special = {name: value for name, value in (("bos_token", spec.bos_token), ("eos_token", spec.eos_token)) if value}
    whose = f"the chat template of '{name}'" if name else "the chat template"
    # tools and documents are None, not undefined, as transformers passes them without any:
    # a template's `tools is not none` must read the same.
    variables = dict(
        messages=conversation, tools=None, documents=None, add_generation_prompt=add_generation_prompt, **special
    )
    try:
        text = _sandbox().render(spec.template, variables)
    except TemplateFailure as exc:
        raise ZooError(f"{whose} {printable(str(exc))}") from None
    if not text.strip():
        raise ZooError(f"{whose} rendered nothing for this conversation: there is no prompt to continue")
    return text


_SANDBOX: TemplateSandbox | None = None
_SANDBOX_LOCK = threading.Lock()


def _sandbox() -> TemplateSandbox:
    """One sandbox per process, its workers started on first use and stopped at exit."""
    global _SANDBOX
    with _SANDBOX_LOCK:
        if _SANDBOX is None:
            _SANDBOX = TemplateSandbox()
            atexit.register(_SANDBOX.close)
        return _SANDBOX


def chat_prompt_ids(model, messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """``messages`` rendered with ``model``'s template and encoded: the ids of the
    prompt the reply continues. A conversation longer than the model's window is
    refused rather than cut, since cutting would drop the template's beginning."""
    text = render_chat(chat_spec(model.card), messages, name=model.name)
    ids = model.tokenizer.encode(text)
    window = model.card.context_length
    if len(ids) > window:
        raise ZooError(
            f"the conversation is {len(ids)} tokens, more than the {window} '{model.name}' reads; start a new one"
        )
    return ids
