"""The parser of chatting with a variant in the terminal: chat. Its handler is in zoo_core/cli/chat.py."""

from __future__ import annotations

from .options import device_options


def chat_arguments(commands) -> None:
    p = commands.add_parser(
        "chat",
        help="chat with a variant that has a chat template, its replies streamed as they are drawn",
        description="Chat with a variant through its card's chat template. Type a message and Enter; "
        "/reset forgets the conversation, /exit or Ctrl-D leaves. Ctrl-C during a reply ends that reply "
        "and keeps what was said. Every reply is drawn with --seed, as `zoo serve` draws the same "
        "conversation's reply with that seed.",
    )
    p.add_argument("name", help="the variant to chat with (see `zoo list`)")
    p.add_argument("--system", metavar="TEXT", help="a system message that opens the conversation (default: none)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="how many tokens a reply has at most")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of each reply's draws: any whole number from -2**63 to 2**64-1",
    )
    p.add_argument("--temperature", type=float, default=1.0, help="divides the logits; 0 is greedy decoding")
    device_options(p, "chat", threads=True)
    p.set_defaults(run="chat:cmd_chat")
