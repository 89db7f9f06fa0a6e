"""The zoo's tokenizers as Hugging Face `tokenizers` objects with identical ids.

- Byte-level BPE (tiktoken ranks): GPT-2's byte-to-unicode alphabet, the zoo's
  split pattern, and merges derived from the ranks. tiktoken merges, among the
  adjacent pairs, the one whose concatenation has the lowest rank; a `tokenizers`
  BPE merges the pair listed first. Listing every split of every token (not only
  the one training made), ordered by the rank of the token it makes, gives the
  same choice at every step, so the ids are the same.
- Characters: a word-level vocabulary over single characters, every character
  split off on its own, decoded by joining without spaces.
- A tokenizer.json the zoo read (the 'hf' tokenizer plugin): itself.
"""

from __future__ import annotations

import json
import subprocess
import sys

from ..errors import ZooError, printable


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (as in its encoder.py):
    printable Latin-1 bytes stand for themselves, the rest are moved above 255."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    characters = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            characters.append(256 + extra)
            extra += 1
    return {byte: chr(c) for byte, c in zip(printable, characters)}


def bpe_tokenizer(ranks: dict[bytes, int], split_pattern: str):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    alphabet = bytes_to_unicode()

    def shown(token: bytes) -> str:
        return "".join(alphabet[b] for b in token)

    vocabulary = {shown(token): rank for token, rank in ranks.items()}
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                merges.append((rank, shown(left), shown(right)))
    merges.sort(key=lambda m: m[0])  # stable: splits of one token keep left-to-right order
    model = models.BPE(vocab=vocabulary, merges=[(a, b) for _, a, b in merges], fuse_unk=False)
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split_pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def char_tokenizer(characters: list[str]):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel(vocab={c: i for i, c in enumerate(characters)}, unk_token=None))
    # Every character, newlines too.
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    return tokenizer


def backend_tokenizer_for(zoo_tokenizer):
    """A `tokenizers.Tokenizer` giving the zoo tokenizer's ids, or a one-line refusal:
    the `tokenizers` package alone (the GGUF export needs no transformers)."""
    if hasattr(zoo_tokenizer, "backend"):  # zoo_plugins.hf_tokenizer: already a `tokenizers.Tokenizer`
        backend = zoo_tokenizer.backend
    elif hasattr(zoo_tokenizer, "encoding") and hasattr(zoo_tokenizer.encoding, "_mergeable_ranks"):
        ranks = zoo_tokenizer.encoding._mergeable_ranks
        pattern = zoo_tokenizer.encoding._pat_str
        backend = bpe_tokenizer(ranks, pattern)
    elif hasattr(zoo_tokenizer, "characters"):
        backend = char_tokenizer(list(zoo_tokenizer.characters))
    else:
        raise ZooError(
            f"no Hugging Face tokenizer for {type(zoo_tokenizer).__name__}: only byte-level BPE, characters and tokenizer.json map"
        )
    return backend


def hf_tokenizer_for(zoo_tokenizer, context_length: int, chat=None):
    """A `PreTrainedTokenizerFast` giving the zoo tokenizer's ids, or a one-line refusal;
    with ``chat`` (the card's ChatSpec), its template and its bos and eos tokens, so
    that `apply_chat_template` renders the prompt the zoo renders and decoding knows
    where a turn ends."""
    from transformers import PreTrainedTokenizerFast

    backend = backend_tokenizer_for(zoo_tokenizer)
    special = {}
    if chat is not None:
        special = {
            name: text
            for name, text in (("bos_token", chat.bos_token), ("eos_token", chat.eos_token))
            if text is not None and backend.token_to_id(text) is not None
        }
        special["chat_template"] = chat.template
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, model_max_length=context_length, clean_up_tokenization_spaces=False, **special
    )


# Texts that make a backtracking pre-tokenizer regex (``(a+)+b``, ``(\s*\w+)*$``)
# show itself: long runs of one class of character, each ended by another class
# (where backtracking starts), and plain prose. Prompts are at most a few thousand
# characters (the server's max_prompt_chars is 8,000), so are the probes.
PROBE_RUN = 4000
PROBES = [
    *(
        character * PROBE_RUN + end
        for character in ("a", " ", "1", "é", "\n", "!", "\t")
        for end in ("", "!", "a", " ")
    ),
    "a " * (PROBE_RUN // 2) + "!",
    "a1" * (PROBE_RUN // 2) + " !",
    "The library stood at the corner of two quiet streets. " * 70,
]
PROBE_SECONDS = 5.0
_PROBE = """
import json, sys
from tokenizers import Tokenizer
tokenizer = Tokenizer.from_file(sys.argv[1])
for probe in json.load(sys.stdin):
    tokenizer.encode(probe, add_special_tokens=False)
"""


def probe_tokenizer(path) -> None:
    """Encode `PROBES` with the tokenizer.json at ``path`` in a separate process
    with a deadline: a pattern that trips the regex engine's limit (a Rust panic in
    the process that meets it) or backtracks for seconds is refused here, at
    import, in one line, rather than at a user's prompt or in a server's thread."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _PROBE, str(path)],
            input=json.dumps(PROBES),
            capture_output=True,
            text=True,
            timeout=PROBE_SECONDS,
            env={"RUST_BACKTRACE": "0", "PATH": ""},
        )
    except subprocess.TimeoutExpired:
        raise ZooError(
            f"{path}: the tokenizer took more than {PROBE_SECONDS:g} s to encode {len(PROBES)} test texts of "
            f"{PROBE_RUN:,} characters (a pre-tokenizer regex that backtracks without bound?); it is not imported"
        ) from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        why = next((line for line in lines if "rror" in line), lines[-1] if lines else f"exit {done.returncode}")
        raise ZooError(
            f"{path}: the tokenizer fails on a test text of {PROBE_RUN:,} characters ({printable(why.strip())[:160]}); "
            "it is not imported"
        )
