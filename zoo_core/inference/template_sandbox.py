"""Chat templates rendered in a separate process, with a deadline, an output cap and a memory cap.

A chat template is a program from the model's author: Jinja's sandbox stops it
reaching Python's internals, but not from looping for hours (nested loops,
``lipsum(10**6)``), allocating gigabytes (``'x' * 2*10**9``) or recursing
without end (a macro calling itself). So the zoo never renders one in its own
process: each rendering goes to a worker process (this file run as a script:
it imports nothing but the standard library and Jinja) that

- renders in transformers' environment (`environment`: the sandbox that cannot
  change its inputs, trimmed blocks, ``loopcontrols``, ``tojson`` without HTML
  escapes, ``raise_exception``, ``strftime_now``), with string and list
  repetition and powers bounded before they are computed;
- stops a rendering past `MAX_OUTPUT_CHARS` characters (it streams the output
  and counts), and runs under an address-space limit (`MAX_MEMORY_BYTES`), so
  an allocation past it is a MemoryError in the worker, not in the caller;
- answers every failure as one line of text.

The caller (`TemplateSandbox.render`) waits at most `DEADLINE_SECONDS` for the
answer; a worker that has not answered by then is killed, which stops any loop,
and the caller gets one line saying so. Workers are kept between renderings (a
rendering costs a round trip through a pipe, well under a millisecond beyond the
template's own work; starting a worker costs Python's start and Jinja's import,
once), and at most `MAX_WORKERS` render at a time, so a burst of hostile
templates holds a few processes for a few seconds each and nothing else.
"""

from __future__ import annotations

import json
import os
import resource
import select
import subprocess
import sys
import threading
import time
from datetime import datetime
from functools import lru_cache

from jinja2 import TemplateError, TemplateSyntaxError
from jinja2.exceptions import SecurityError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

DEADLINE_SECONDS = 2.0  # real templates render in milliseconds
MAX_OUTPUT_CHARS = 1_000_000  # far past any model's context window, in characters
MAX_MEMORY_BYTES = 1 << 30  # the worker's whole address space: Python and Jinja take ~60 MB of it
MAX_WORKERS = 4
MAX_WAIT_SECONDS = 10.0  # for a free worker, when MAX_WORKERS are busy
MAX_ERROR_CHARS = 300


class TemplateFailure(Exception):
    """A rendering that failed, timed out or was refused: its message is one line."""


# -- the worker's side: nothing here may import the zoo (the worker runs this file alone) --


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML; a prompt wants the JSON itself.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def environment():
    """transformers' chat-template environment (transformers 5.x,
    ``utils/chat_template_utils.py``), with repetition and powers bounded."""

    def raise_exception(message):
        raise TemplateError(message)

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**"])

        def call_binop(self, context, operator, left, right):
            if operator == "*":
                for items, times in ((left, right), (right, left)):
                    if isinstance(items, (str, list, tuple)) and isinstance(times, int):
                        if len(items) * times > MAX_OUTPUT_CHARS:
                            raise SecurityError(
                                f"repeating {len(items):,} items {times:,} times is past the limit "
                                f"of {MAX_OUTPUT_CHARS:,}"
                            )
            if operator == "**" and isinstance(left, int) and isinstance(right, int):
                if right > 0 and abs(left) > 1 and right * max(abs(left).bit_length(), 1) > 4096:
                    raise SecurityError(f"{left} ** {right} has more than 4,096 bits")
            return super().call_binop(context, operator, left, right)

    bounded = Bounded(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    bounded.filters["tojson"] = _tojson
    bounded.globals.update(raise_exception=raise_exception, strftime_now=_strftime_now)
    return bounded


@lru_cache(maxsize=16)
def _compiled(template: str):
    return environment().from_string(template)


def _render(template: str, variables: dict) -> str:
    pieces, size = [], 0
    for piece in _compiled(template).generate(**variables):
        size += len(piece)
        if size > MAX_OUTPUT_CHARS:
            raise TemplateFailure(f"rendered more than {MAX_OUTPUT_CHARS:,} characters (stopped)")
        pieces.append(piece)
    return "".join(pieces)


def _answer(request: dict) -> dict:
    try:
        return {"text": _render(request["template"], request["variables"])}
    except TemplateFailure as exc:
        why = str(exc)
    except TemplateSyntaxError as exc:
        why = f"is not a Jinja template Jinja can read: {exc}"
    except TemplateError as exc:  # raise_exception() in the template, or a refusal of the sandbox
        why = f"refused the conversation: {exc}"
    except MemoryError:
        why = f"needed more than {MAX_MEMORY_BYTES >> 20:,} MiB of memory (stopped)"
    except RecursionError:
        why = "called itself too deeply (RecursionError)"
    except Exception as exc:  # the template's own arithmetic: 1 // 0, int('x'), range(10**9) ...
        why = f"failed: {type(exc).__name__}: {exc}"
    return {"error": why[:MAX_ERROR_CHARS]}


def _serve() -> None:
    """The worker: one JSON request a line on stdin, one JSON answer a line on stdout."""
    resource.setrlimit(resource.RLIMIT_AS, (MAX_MEMORY_BYTES, MAX_MEMORY_BYTES))
    environment()  # Jinja imported and its compiler warm before the first request
    for line in sys.stdin:
        answer = _answer(json.loads(line))
        try:
            sys.stdout.write(json.dumps(answer) + "\n")
        except MemoryError:
            sys.stdout.write(json.dumps({"error": "its output did not fit in memory"}) + "\n")
        sys.stdout.flush()


# -- the caller's side --


class _Worker:
    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, "-I", __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )

    def ask(self, line: bytes, deadline: float) -> dict | None:
        """The answer to ``line``, or None when the deadline passed or the worker died."""
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(line)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        descriptor, received = self.process.stdout.fileno(), bytearray()
        while not received.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([descriptor], [], [], remaining)[0]:
                return None
            chunk = os.read(descriptor, 1 << 20)
            if not chunk:
                return None
            received += chunk
        return json.loads(received)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


class TemplateSandbox:
    """Renders templates in worker processes, each rendering within ``seconds``."""

    def __init__(self, seconds: float = DEADLINE_SECONDS, workers: int = MAX_WORKERS):
        self.seconds = seconds
        self._slots = threading.BoundedSemaphore(workers)
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def render(self, template: str, variables: dict) -> str:
        """The rendered text; `TemplateFailure` with one line for anything else."""
        line = (json.dumps({"template": template, "variables": variables}) + "\n").encode()
        if not self._slots.acquire(timeout=MAX_WAIT_SECONDS):
            raise TemplateFailure(f"could not be rendered: {MAX_WORKERS} renderings were busy for {MAX_WAIT_SECONDS} s")
        try:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            worker = worker or _Worker()
            started = time.monotonic()
            answer = worker.ask(line, started + self.seconds)
            if answer is None:
                worker.stop()  # a loop still running, or a worker that died: either way, gone
                if time.monotonic() - started >= self.seconds:
                    raise TemplateFailure(f"took more than {self.seconds:g} s to render (stopped)")
                raise TemplateFailure("stopped its renderer (it ran out of memory or crashed)")
            with self._lock:
                self._idle.append(worker)
        finally:
            self._slots.release()
        if "error" in answer:
            raise TemplateFailure(answer["error"])
        return answer["text"]

    def close(self) -> None:
        with self._lock:
            workers, self._idle = self._idle, []
        for worker in workers:
            worker.stop()


if __name__ == "__main__":
    _serve()
