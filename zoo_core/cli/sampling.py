"""Drawing text from a variant: sample."""

from __future__ import annotations

import json
import re
import sys

from ..errors import ZooError
from ..inference.prompts import read_prompt
from ..plugin_api.protocols import TaskModel, implements
from .options import load_on_threads, sampling_settings


def _unescape(text: str) -> str:
    r"""``\n`` and ``\t`` typed in a shell argument mean a newline and a tab (``\\``: a backslash)."""
    return re.sub(r"\\([nt\\])", lambda m: {"n": "\n", "t": "\t", "\\": "\\"}[m.group(1)], text)


def cmd_sample(args) -> int:
    if args.greedy:
        args.temperature = 0.0
    # Check what the user typed before paying for torch and the checkpoint.
    settings = sampling_settings(args, stop=[_unescape(stop) for stop in args.stop or []])
    prompt = read_prompt(args.prompt, args.prompt_file)
    if not prompt:
        raise ZooError("the prompt is empty; give some text to continue (--prompt TEXT)")
    model = load_on_threads(args)
    if implements(model.network, TaskModel):  # task models (the puzzle) answer instead of continuing
        ignored = [
            option
            for option, default in args.option_defaults.items()
            if hasattr(args, option) and getattr(args, option) != default
        ]
        if ignored:
            flags = ", ".join("--" + option.replace("_", "-") for option in ignored)
            print(
                f"zoo: note: '{args.name}' answers the prompt rather than continuing it; {flags} "
                f"{'does' if len(ignored) == 1 else 'do'} not apply",
                file=sys.stderr,
            )
        answer = model.network.ask(model.tokenizer, prompt, explain=args.explain, png=args.png)
        print(json.dumps({"name": model.name, "prompt": prompt, "answer": answer}, indent=2) if args.json else answer)
        return 0
    if args.explain or args.png:
        raise ZooError(f"--explain and --png are for task models such as the puzzle; '{args.name}' continues text")
    stream = (
        args.stream if args.stream is not None else (sys.stdout.isatty() and not args.json and args.num_samples == 1)
    )
    if stream and (args.json or args.num_samples > 1):
        raise ZooError("--stream shows one sample as plain text; drop --json and --num-samples, or --stream")
    if stream:
        # What is printed stays printed: Ctrl-C ends the sample (exit 130) but
        # keeps the text so far on the terminal.
        print(prompt, end="", flush=True)
        try:
            for piece in model.stream(prompt, settings):
                print(piece, end="", flush=True)
        finally:
            print(flush=True)
        return 0
    samples = model.sample(prompt, settings)
    if args.json:
        print(
            json.dumps(
                {
                    "name": model.name,
                    "settings": settings.as_dict(),
                    "samples": [sample.as_dict() for sample in samples],
                },
                indent=2,
            )
        )
    elif len(samples) == 1:
        print(samples[0].prompt + samples[0].text)
    else:
        for number, sample in enumerate(samples, 1):
            print(f"--- sample {number} of {len(samples)} (seed {sample.seed}) ---\n{sample.prompt + sample.text}")
    return 0
