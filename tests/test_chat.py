"""Chat as clients expect it: the card's chat template rendered as transformers
renders it, `zoo import hf` reading a folder's template, `zoo chat` in a
terminal (a pty: streaming, history, /reset, Ctrl-C, Ctrl-D) and
`POST /v1/chat/completions` through the official openai client, sync, async
and streamed.

The model is a tiny random Llama with a small byte-level BPE tokenizer whose
special tokens are ChatML's, saved by transformers with a ChatML template and
imported with `zoo import hf`. One row of its vocabulary head is swapped with
<|im_end|>'s so that transformers' own greedy reply to one conversation ends
at the end-of-sequence token after a few tokens: every reply is checked
against transformers' greedy tokens.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import pty
import select
import signal
import subprocess
import termios
import time
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the interop extra is not installed: pip install -e '.[interop]'"
)

from zoo_core import cli  # noqa: E402
from zoo_core.catalogue.cards import ChatSpec  # noqa: E402
from zoo_core.errors import ZooError  # noqa: E402
from zoo_core.inference.chat import render_chat  # noqa: E402
from zoo_core.interop.hf_chat import folder_chat  # noqa: E402

from .tiny_hf import CHATML_SPECIALS, byte_level_tokenizer  # noqa: E402
from .web_support import SMALL, ZOO, Server  # noqa: E402

NAME = "tiny-chat"
ENDLESS = "tiny-chat-endless"  # the same weights but <|im_end|>'s head row zero: a greedy reply never ends
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# The conversation whose greedy reply the fixture makes end at <|im_end|>.
ENDING = [{"role": "user", "content": "Good morrow, what news?"}]
# Llama-3's and Qwen2's ways of writing a template (headers, bos_token, a default
# system turn, namespace, loop controls, tojson, strftime_now, raise_exception),
# written here to exercise what transformers' renderer offers.
LLAMA3_STYLE = """{{- bos_token }}
{%- set ns = namespace(system="You answer briefly. Today is " + strftime_now("%d %b %Y") + ".") %}
{%- if messages[0]['role'] == 'system' %}
    {%- set ns.system = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + ns.system + '<|eot_id|>' }}
{%- for message in messages %}
    {%- if message['role'] not in ['user', 'assistant'] %}
        {{- raise_exception('roles are user and assistant after the system turn, not ' + message['role']) }}
    {%- endif %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""
QWEN2_STYLE = """{% if tools is not none %}<tools>{{ tools | tojson }}</tools>{% endif %}
{% for message in messages %}
    {% if loop.first and message['role'] != 'system' %}
<|im_start|>system
You are a helpful assistant.<|im_end|>
    {% endif %}
    {% if message['role'] == 'assistant' and message.meta is defined %}
<|im_start|>assistant
{{ message['content'] }} {{ message.meta | tojson }}<|im_end|>
        {% continue %}
    {% endif %}
<|im_start|>{{ message['role'] }}
{{ message['content'] }}<|im_end|>
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}"""
CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [
        {"role": "system", "content": "  Speak as Shakespeare would.  "},
        {"role": "user", "content": "Quelle heure est-il ? — 几点了?"},
        {"role": "assistant", "content": '\'Tis <noon> & "more"', "meta": {"mood": "été", "n": [1, 2]}},
        {"role": "user", "content": "And now?", "name": None},
    ],
]


def _hf_tokenizer(template: str, bos: str | None, eos: str | None):
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=byte_level_tokenizer(*CHATML_SPECIALS), bos_token=bos, eos_token=eos, chat_template=template
    )


@pytest.mark.parametrize("style", ["chatml", "llama3", "qwen2"])
@pytest.mark.parametrize("conversation", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_a_template_renders_as_transformers_renders_it(style, conversation, add_generation_prompt):
    template, bos, eos = {
        "chatml": lambda: (CHATML, None, "<|im_end|>"),
        "llama3": lambda: (LLAMA3_STYLE, "<|begin_of_text|>", "<|eot_id|>"),
        "qwen2": lambda: (QWEN2_STYLE, None, "<|im_end|>"),
    }[style]()
    messages = CONVERSATIONS[conversation]
    theirs = _hf_tokenizer(template, bos, eos).apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    ours = render_chat(ChatSpec(template=template, bos_token=bos, eos_token=eos), messages, add_generation_prompt)
    assert ours == theirs
    assert "<|im_start|>" in ours or "<|start_header_id|>" in ours


# SmolLM2's own template, read from its GGUF file, is rendered in tests/test_chat_smollm2.py (the real-model lane).


def test_a_template_that_refuses_a_conversation_is_one_line():
    spec = ChatSpec(template=LLAMA3_STYLE, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    with pytest.raises(ZooError, match="^the chat template refused the conversation: roles are user and assistant"):
        render_chat(spec, [{"role": "user", "content": "hi"}, {"role": "tool", "content": "42"}])
    with pytest.raises(ZooError, match="not a Jinja template"):
        render_chat(ChatSpec(template="{% for %}"), [{"role": "user", "content": "hi"}])
    # The sandbox: a template cannot reach Python's internals through what it is given.
    with pytest.raises(ZooError, match="refused the conversation"):
        render_chat(ChatSpec(template="{{ messages.__class__.__subclasses__() }}"), [{"role": "user", "content": "hi"}])


def test_a_folder_chat_template_is_read_from_its_tokenizer_config(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": CHATML}],
                "bos_token": {"content": "<|im_start|>", "special": True},
                "eos_token": "<|im_end|>",
            }
        )
    )
    assert folder_chat(tmp_path) == ChatSpec(template=CHATML, bos_token="<|im_start|>", eos_token="<|im_end|>")
    (tmp_path / "chat_template.jinja").write_text("J", encoding="utf-8")  # transformers' own file wins
    assert folder_chat(tmp_path).template == "J"
    (tmp_path / "chat_template.jinja").unlink()
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": {"default": 3}}))
    with pytest.raises(ZooError, match="chat_template is neither"):
        folder_chat(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("{}")
    assert folder_chat(tmp_path) is None


# --- the tiny chat model -----------------------------------------------------------


class ChatModel:
    """The transformers model and tokenizer, and the zoo home they were imported into."""

    def __init__(self, home: Path, model, tokenizer):
        self.home, self.model, self.tokenizer = home, model, tokenizer
        self.endless = model  # ENDLESS's model, once made
        self.ending_reply = ""  # transformers' greedy reply to ENDING, before <|im_end|>
        self.ending_tokens = 0  # how many tokens it has
        self.environment = {**os.environ, "ZOO_HOME": str(home), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

    def prompt_ids(self, messages) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def greedy(self, messages, new_tokens: int, model=None) -> list[int]:
        """transformers' greedy tokens after the conversation's prompt (it does not stop at eos: no eos id)."""
        ids = torch.tensor([self.prompt_ids(messages)])
        with torch.no_grad():
            out = (model or self.model).generate(
                ids, max_new_tokens=new_tokens, do_sample=False, attention_mask=torch.ones_like(ids)
            )
        return out[0, ids.shape[1] :].tolist()

    def greedy_text(self, messages, new_tokens: int, model=None) -> str:
        """The greedy reply's text, up to the end-of-sequence token."""
        text = self.tokenizer.decode(self.greedy(messages, new_tokens, model))
        return text.split("<|im_end|>")[0]


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory) -> ChatModel:
    transformers.utils.logging.set_verbosity_error()
    home = tmp_path_factory.mktemp("tiny-chat-home")
    tokenizer = _hf_tokenizer(CHATML, None, "<|im_end|>")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=320,
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        initializer_range=0.3,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    chat = ChatModel(home, model, tokenizer)
    # The greedy reply to ENDING ends at <|im_end|> after a few tokens: its head row
    # trades places with the row of the first token that is new to the reply.
    drawn = chat.greedy(ENDING, 8)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert end not in drawn
    k = next(i for i in range(2, len(drawn)) if drawn[i] not in drawn[:i])
    chat.endless = copy.deepcopy(model)
    with torch.no_grad():
        head = model.lm_head.weight
        head[[end, drawn[k]]] = head[[drawn[k], end]]
        # A logit of 0 among 319 random ones is never the largest.
        chat.endless.lm_head.weight[end] = 0
    assert chat.greedy(ENDING, k + 1) == drawn[:k] + [end]
    chat.ending_reply, chat.ending_tokens = tokenizer.decode(drawn[:k]), k
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZOO_HOME", str(home))
        for name, weights in ((NAME, model), (ENDLESS, chat.endless)):
            folder = tmp_path_factory.mktemp(name)
            weights.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            assert cli.main(["import", "hf", str(folder), "--name", name]) == 0
    return chat


def test_zoo_import_hf_puts_the_template_and_tokens_in_the_card(chat_model, monkeypatch):
    import zoo_core

    monkeypatch.setenv("ZOO_HOME", str(chat_model.home))
    card = zoo_core.load(NAME).card
    assert card.chat == ChatSpec(template=CHATML, bos_token=None, eos_token="<|im_end|>")


# --- zoo chat in a terminal ---------------------------------------------------------


class Terminal:
    """`zoo chat` on a pseudo-terminal (echo and output processing off, so what is read is what it printed)."""

    def __init__(self, chat: ChatModel, name: str, *arguments: str):
        self.master, follower = pty.openpty()
        attributes = termios.tcgetattr(follower)
        attributes[1] &= ~termios.OPOST
        attributes[3] &= ~termios.ECHO
        termios.tcsetattr(follower, termios.TCSANOW, attributes)
        self.process = subprocess.Popen(
            [*ZOO, "chat", name, *arguments],
            stdin=follower,
            stdout=follower,
            stderr=subprocess.PIPE,
            env=chat.environment,
        )
        os.close(follower)
        self.printed = b""  # decoded whole: a read may end inside a character

    @property
    def shown(self) -> str:
        return self.printed.decode(errors="replace")

    def read_until(self, condition, timeout: float = 120) -> str:
        """What it prints from now until ``condition(text)`` holds."""
        start, deadline = len(self.shown), time.monotonic() + timeout
        while not condition(self.shown[start:]):
            if time.monotonic() > deadline:
                raise AssertionError(f"zoo chat printed {self.shown[start:]!r}; stderr: {self.stop()}")
            if select.select([self.master], [], [], 0.5)[0]:
                try:
                    self.printed += os.read(self.master, 4096)
                except OSError:  # the process ended and the terminal closed
                    raise AssertionError(f"zoo chat ended: {self.shown[start:]!r}; stderr: {self.stop()}") from None
        return self.shown[start:]

    def say(self, line: str) -> str:
        """Type a line; the reply printed before the next prompt."""
        os.write(self.master, line.encode() + b"\n")
        return self.read_until(lambda text: text.endswith(">>> ")).removesuffix(">>> ")

    def stop(self) -> str:
        """End it (if it still runs) and return what it wrote to stderr."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        if self.master >= 0:
            os.close(self.master)
            self.master = -1
            self.errors = self.process.stderr.read().decode()
        return self.errors


def test_zoo_chat_streams_replies_keeps_history_resets_and_exits(chat_model):
    terminal = Terminal(chat_model, NAME, "--temperature", "0", "--max-new-tokens", "12")
    try:
        terminal.read_until(lambda text: text.endswith(">>> "))
        # Ends at <|im_end|>, which is never shown.
        assert terminal.say(ENDING[0]["content"]) == chat_model.ending_reply + "\n"
        question = {"role": "user", "content": "Say more."}
        history = [*ENDING, {"role": "assistant", "content": chat_model.ending_reply}, question]
        assert terminal.say(question["content"]) == chat_model.greedy_text(history, 12) + "\n"
        assert terminal.say("/reset") == ""
        assert terminal.say(question["content"]) == chat_model.greedy_text([question], 12) + "\n"
        os.write(terminal.master, b"\x04")  # Ctrl-D: the end of input
        assert terminal.process.wait(timeout=60) == 0
    finally:
        errors = terminal.stop()
    assert "/reset forgets the conversation" in errors and "Traceback" not in errors


def test_ctrl_c_ends_a_reply_and_keeps_what_was_said(chat_model):
    terminal = Terminal(
        chat_model, ENDLESS, "--temperature", "0", "--max-new-tokens", "100000", "--system", "Be brief."
    )
    first, second = {"role": "user", "content": "Tell me all."}, {"role": "user", "content": "Go on."}
    try:
        terminal.read_until(lambda text: text.endswith(">>> "))
        os.write(terminal.master, first["content"].encode() + b"\n")
        terminal.read_until(lambda text: len(text) >= 20)
        terminal.process.send_signal(signal.SIGINT)  # what Ctrl-C sends
        terminal.read_until(lambda text: text.endswith(">>> "))  # a new prompt: zoo chat goes on
        partial = terminal.shown.split(">>> ")[1].removesuffix("\n")
        assert len(partial) >= 20 and terminal.process.poll() is None
        os.write(terminal.master, second["content"].encode() + b"\n")
        terminal.read_until(lambda text: len(text) >= 20)
        terminal.process.send_signal(signal.SIGINT)
        terminal.read_until(lambda text: text.endswith(">>> "))
        reply = terminal.shown.split(">>> ")[2].removesuffix("\n")
        # The interrupted reply is the conversation's assistant turn: the next reply continues it.
        history = [{"role": "system", "content": "Be brief."}, first, {"role": "assistant", "content": partial}, second]
        expected = chat_model.greedy_text(history, 40, chat_model.endless)
        shared = min(len(reply), len(expected))
        assert shared >= 20 and reply[:shared] == expected[:shared]
        os.write(terminal.master, b"/exit\n")
        assert terminal.process.wait(timeout=60) == 0
    finally:
        errors = terminal.stop()
    assert "Traceback" not in errors


def test_a_variant_without_a_template_refuses_to_chat_naming_the_fix(zoo):
    refused = zoo("chat", SMALL)
    assert refused.code == 1 and refused.out == ""
    assert refused.err.count("\n") == 1 and "has no chat template" in refused.err
    # The commands it names: `zoo import hf FOLDER` is the chat_model fixture's; this one runs here.
    assert "`zoo import hf FOLDER`" in refused.err
    suggested = f"zoo sample {SMALL} --prompt TEXT"
    assert f"`{suggested}`" in refused.err
    done = zoo(*suggested.split()[1:-1], "ROMEO:", "--max-new-tokens", "3")
    assert done.code == 0 and done.out.startswith("ROMEO:")


# --- POST /v1/chat/completions through the openai client ------------------------------


@pytest.fixture(scope="module")
def server(chat_model):
    pytest.importorskip("starlette", reason="the web tests need the web extra: pip install 'zoo-lm[web]'")
    served = Server(environment={"ZOO_HOME": str(chat_model.home)})
    yield served
    served.stop()


@pytest.fixture(scope="module")
def openai_module():
    return pytest.importorskip("openai", reason="these tests need the web-test extra: pip install 'zoo-lm[web-test]'")


@pytest.fixture
def client(server, openai_module):
    with openai_module.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300) as client:
        yield client


def test_a_chat_completion_is_transformers_greedy_reply_ending_at_eos(chat_model, client):
    answer = client.chat.completions.create(model=NAME, messages=ENDING, temperature=0, max_tokens=20)
    choice = answer.choices[0]
    assert answer.object == "chat.completion" and choice.message.role == "assistant"
    assert choice.message.content == chat_model.ending_reply and choice.finish_reason == "stop"
    prompt = chat_model.prompt_ids(ENDING)
    assert answer.usage.prompt_tokens == len(prompt)
    assert answer.usage.completion_tokens == chat_model.ending_tokens + 1  # and <|im_end|>


def test_length_stop_and_logprobs_are_transformers(chat_model, client):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me all."}]
    tokens = chat_model.greedy(messages, 6, chat_model.endless)
    answer = client.chat.completions.create(
        model=ENDLESS, messages=messages, temperature=0, max_completion_tokens=6, logprobs=True, top_logprobs=3
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "length" and answer.usage.completion_tokens == 6
    assert choice.message.content == chat_model.tokenizer.decode(tokens)
    ids = torch.tensor([chat_model.prompt_ids(messages) + tokens])
    with torch.no_grad():
        theirs = torch.log_softmax(chat_model.endless(ids).logits[0, -7:-1].float(), dim=-1)
    entries = choice.logprobs.content
    assert [e.token for e in entries] == [chat_model.tokenizer.decode([t]) for t in tokens]
    for entry, token, row in zip(entries, tokens, theirs):
        assert entry.logprob == pytest.approx(float(row[token]), abs=1e-4)
        assert len(entry.top_logprobs) == 3 and entry.top_logprobs[0].logprob == pytest.approx(
            float(row.max()), abs=1e-4
        )
    stop = choice.message.content[3:6]
    cut = client.chat.completions.create(model=ENDLESS, messages=messages, temperature=0, max_tokens=6, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == choice.message.content[: choice.message.content.index(stop)]


def test_a_streamed_chat_completion_joins_to_the_reply(chat_model, client):
    messages = [{"role": "user", "content": "Sing."}]
    whole = client.chat.completions.create(model=NAME, messages=messages, seed=7, max_tokens=10, n=2)
    chunks = list(
        client.chat.completions.create(
            model=NAME,
            messages=messages,
            seed=7,
            max_tokens=10,
            n=2,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    for i in range(2):
        deltas = [c.choices[0].delta for c in chunks if c.choices and c.choices[0].index == i]
        assert deltas[0].role == "assistant"
        assert "".join(d.content or "" for d in deltas) == whole.choices[i].message.content
        reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].index == i]
        assert reasons[-1] == whole.choices[i].finish_reason and not any(reasons[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert whole.choices[0].message.content != whole.choices[1].message.content  # seeds 7 and 8


def test_async_clients_get_choice_i_with_seed_plus_i_and_zoo_chat_gives_the_same(chat_model, server, openai_module):
    messages = [{"role": "user", "content": "Sing."}]

    async def ask():
        async with openai_module.AsyncOpenAI(
            base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300
        ) as client:
            return await asyncio.gather(
                client.chat.completions.create(model=NAME, messages=messages, seed=4, max_tokens=8, n=2),
                client.chat.completions.create(model=NAME, messages=messages, seed=5, max_tokens=8),
            )

    both, second = asyncio.run(ask())
    assert both.choices[1].message.content == second.choices[0].message.content
    done = subprocess.run(
        [*ZOO, "chat", NAME, "--seed", "4", "--max-new-tokens", "8"],
        input="Sing.\n",
        capture_output=True,
        text=True,
        env=chat_model.environment,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f">>> {both.choices[0].message.content}\n>>> \n"


def test_a_variant_without_a_template_is_a_400_naming_the_fix(client, openai_module):
    with pytest.raises(openai_module.BadRequestError) as refused:
        client.chat.completions.create(model=SMALL, messages=[{"role": "user", "content": "hi"}])
    message = refused.value.body["message"]
    assert "has no chat template" in message and f"`zoo sample {SMALL} --prompt TEXT`" in message
    with pytest.raises(openai_module.BadRequestError, match="unsupported field 'tools'"):
        client.chat.completions.create(
            model=NAME, messages=ENDING, tools=[{"type": "function", "function": {"name": "f"}}]
        )
    with pytest.raises(openai_module.BadRequestError, match="'top_logprobs': give it with 'logprobs': true"):
        client.chat.completions.create(model=NAME, messages=ENDING, top_logprobs=2)
    with pytest.raises(openai_module.BadRequestError, match="messages.0.role"):
        client.chat.completions.create(model=NAME, messages=[{"role": "tool", "content": "x"}])
