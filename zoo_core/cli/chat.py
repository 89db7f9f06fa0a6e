"""Chatting with a variant in the terminal: chat."""

from __future__ import annotations

import signal
import sys
import threading

from ..errors import ZooError
from ..inference.chat import chat_prompt_ids, chat_spec, chat_stops
from ..inference.sampling import stream_text
from ..loading.api import get_variant
from .options import load_on_threads, sampling_settings

PROMPT = ">>> "


def cmd_chat(args) -> int:
    # Check what the user typed, and that the variant can chat, before paying for the checkpoint.
    settings = sampling_settings(args)
    settings = settings.replace(stop=chat_stops(chat_spec(get_variant(args.name).card)))
    model = load_on_threads(args)
    opening = [{"role": "system", "content": args.system}] if args.system else []
    history: list[dict] = []
    print(
        f"Chatting with {model.name}: /reset forgets the conversation, /exit or Ctrl-D leaves, Ctrl-C ends a reply.",
        file=sys.stderr,
    )
    while True:
        # Not input(): on a terminal it writes its prompt to stderr, away from the replies.
        print(PROMPT, end="", flush=True)
        try:
            line = sys.stdin.readline()
        except KeyboardInterrupt:  # at the prompt: drop the line being typed, as a shell does
            print()
            continue
        if not line:  # Ctrl-D, or the end of piped input
            print()
            return 0
        line = line.removesuffix("\n")
        command = line.strip()
        if command == "/exit":
            return 0
        if command == "/reset":
            history = []
            print("(the conversation is forgotten)", file=sys.stderr)
            continue
        if not command:
            continue
        asked = [*history, {"role": "user", "content": line}]
        try:
            ids = chat_prompt_ids(model, opening + asked)
        except ZooError as exc:  # the conversation stays as it was: the user can /reset or go on
            print(f"zoo: {exc}", file=sys.stderr)
            continue
        history = asked + [{"role": "assistant", "content": _reply(model, ids, settings)}]


def _reply(model, ids: list[int], settings) -> str:
    """The reply, printed piece by piece as it is drawn. Ctrl-C ends it at the
    next token rather than raising where it lands (between printing a piece and
    keeping it), so the reply the conversation keeps is exactly what was printed."""
    interrupted = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda number, frame: interrupted.set())
    reply = ""
    try:
        for piece in stream_text(model.network, model.tokenizer, ids, settings=settings, cancel=interrupted):
            print(piece, end="", flush=True)
            reply += piece
    finally:
        signal.signal(signal.SIGINT, previous)
        print(flush=True)
    return reply
