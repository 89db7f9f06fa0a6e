"""Help that teaches, and finding models: every command and option described
with its default, --version, bare `zoo`, "did you mean", shell completion,
`zoo list` filters and sorting, `zoo search`."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zoo_core import cli

from .conftest import ROOT

ZOO = Path(sys.executable).with_name("zoo")


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _every_parser(parser: argparse.ArgumentParser):
    """``parser`` and every command's and action's parser under it (`zoo datasets add`)."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):
                yield from _every_parser(command)


def test_every_command_has_a_description_and_every_option_its_default():
    parser = cli.build_parser()
    commands = _commands(parser)
    assert len(commands) >= 15
    for name, command in commands.items():
        assert command.description, f"`zoo {name}` has no description"
        text = " ".join(command.format_help().split())  # help lines are wrapped: join them
        assert command.description.split()[0] in text
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            label = action.option_strings[-1] if action.option_strings else action.dest
            assert action.help, f"`zoo {name}`: {label} has no help text"
            if action.option_strings and not action.required and action.default != []:  # a repeatable option: none
                shown = command.formatter_class("zoo")._get_help_string(action)
                assert "default" in shown, f"`zoo {name}`: {label} does not show its default"
        for action in command._actions:  # and the rendered help carries them
            if action.option_strings and not action.required and action.default != [] and not isinstance(action, argparse._HelpAction):
                assert "default" in text


def test_no_help_shows_an_empty_default():
    # `--registry FILE ... (repeatable) (default: )` was on every command's help
    for parser in _every_parser(cli.build_parser()):
        text = " ".join(parser.format_help().split())
        assert "(default: )" not in text and "(default: none) (default" not in text, parser.prog
        if any(action.dest == "sub_registry" for action in parser._actions):  # every command's own --registry
            assert "--registry FILE also read variants from this registry file (repeatable)" in text, parser.prog


def test_sample_help_text(capsys):
    with pytest.raises(SystemExit):
        cli.main(["sample", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for expected in ("--max-new-tokens MAX_NEW_TOKENS how many tokens to draw at most (default: 100)",
                     "--temperature TEMPERATURE divides the logits; 0 is greedy decoding (default: 1.0)",
                     "--top-p TOP_P", "--num-samples", "--stop STRING", "--json print the prompt, tokens, text and settings",
                     "name the variant to sample"):
        assert expected in text


def test_bare_zoo_prints_help_and_succeeds(zoo):
    result = zoo()
    assert result.code == 0
    assert "usage: zoo" in result.out and "sample" in result.out and result.err == ""


def test_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"zoo {version('zoo-lm')}"


@pytest.mark.parametrize("typed, suggested", [("lst", "'list'"), ("smaple", "'sample'"), ("trian", "'train'")])
def test_unknown_command_gets_a_suggestion(zoo, typed, suggested):
    result = zoo(typed)
    assert result.code == 2
    assert result.err.startswith(f"zoo: error: unknown command '{typed}'; did you mean {suggested}")
    assert result.err.count("\n") == 1  # one line, no usage


@pytest.mark.parametrize(
    "command, message",
    [
        (["sample", "gpt-char-mini", "--promt", "ROMEO:"], "unrecognized option '--promt' of `zoo sample`; did you mean '--prompt'?"),
        (["train", "x", "--learnig-rate=0.1"], "unrecognized option '--learnig-rate' of `zoo train`; did you mean '--learning-rate'?"),
        (["datasets", "add", "a", "b", "--descripton", "x"], "unrecognized option '--descripton' of `zoo datasets add`; did you mean '--description'?"),
        (["--debg", "list"], "unrecognized option '--debg' of `zoo list`; did you mean '--debug'?"),  # the zoo's own, before the command
        (["list", "--xyzzy"], "unrecognized option '--xyzzy' of `zoo list`; `zoo list --help` lists its options"),
        (["list", "rope", "extra"], "unrecognized arguments: extra"),
    ],
)
def test_a_mistyped_option_gets_one_line_naming_the_meant_one(zoo, command, message):
    result = zoo(*command)
    assert (result.code, result.out, result.err) == (2, "", f"zoo: error: {message}\n")


def test_the_help_an_unknown_option_suggests_runs(zoo, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["list", "--help"])
    assert exit_.value.code == 0 and "--architecture" in capsys.readouterr().out


def _help_of(argv: list[str], capsys) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_zoo_help_command_is_the_commands_help(zoo, capsys):
    # `zoo help train` once answered "unknown command 'help'; did you mean 'eval'?"
    for name in _commands(cli.build_parser()):
        result = zoo("help", name)
        assert (result.code, result.err) == (0, ""), name
        assert result.out == _help_of([name, "--help"], capsys), name
        assert result.out.startswith(f"usage: zoo {name} "), name
    assert zoo("help", "datasets", "add").out == _help_of(["datasets", "add", "--help"], capsys)
    bare = zoo("help")
    assert bare.code == 0 and bare.out == _help_of(["--help"], capsys)


@pytest.mark.parametrize(
    "words, message",
    [
        (["trian"], "unknown command 'trian'; did you mean 'train'?"),
        (["datasets", "ad"], "`zoo datasets` has no action 'ad'; did you mean 'add'?"),
        (["list", "rope"], "`zoo list` has no action 'rope'; `zoo list --help` lists what it takes"),
    ],
)
def test_zoo_help_of_no_command(zoo, words, message):
    result = zoo("help", *words)
    assert (result.code, result.out, result.err) == (1, "", f"zoo: error: {message}\n")


def test_an_abbreviated_option_before_the_command_keeps_its_value(zoo):
    # argparse accepts `--reg` for `--registry`; its FILE must not be taken for the command
    result = zoo("--reg", str(ROOT / "registry.toml"), "list", "gpt-char-mini")
    assert result.code == 0 and "gpt-char-mini" in result.out and "unknown command" not in result.err


def test_help_before_a_command_still_lists_every_command(zoo, capsys):
    # A command line naming a command builds that command's parser alone; help
    # asked for before it is the whole program's and lists them all.
    with pytest.raises(SystemExit):
        cli.main(["--help", "list"])
    text = capsys.readouterr().out
    assert all(f"    {name} " in text for name in _commands(cli.build_parser()))


def test_options_before_the_command_with_one_command_built(zoo, tmp_path):
    assert cli._command_to_build(["--debug", "--registry", "x.toml", "--max-memory=1G", "list"]) == "list"
    assert cli._command_to_build(["--registry", "list", "show"]) == "show"  # "list" is the file's name there
    for unusual in (["--help", "list"], ["-h"], [], ["lst"], ["--deb", "list"], ["--", "list"]):
        assert cli._command_to_build(unusual) is None, unusual
    result = zoo("--max-parameters", "1000000", "--registry", str(tmp_path / "none.toml"), "list")
    assert result.code == 1 and "none.toml: registry file not found" in result.err
    assert _names(zoo("--max-memory", "4G", "list", "gpt-char-m*", "--json")) == ["gpt-char-mini", "gpt-char-mini-rope"]


def test_unknown_command_without_a_close_one(zoo):
    result = zoo("xyzzy")
    assert result.code == 2 and "zoo --help" in result.err


@pytest.mark.parametrize("shell, marker", [("bash", "complete "), ("zsh", "compdef")])
def test_completion_scripts(zoo, shell, marker):
    result = zoo("completion", shell)
    assert result.code == 0 and marker in result.out and "zoo" in result.out


def _complete(lines: list[str], cwd: Path, out: Path) -> dict[str, list[str]]:
    """What the shell is offered after each command line: `zoo` run as bash's completion
    function runs it, every line at once. Each also checks that completing imported
    neither torch nor pydantic (completion is a front command)."""
    running = []
    for number, line in enumerate(lines):
        answer = out / f"completions-{number}"
        env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
               "_ARGCOMPLETE_STDOUT_FILENAME": str(answer), "PYTHONPROFILEIMPORTTIME": "1"}
        process = subprocess.Popen([str(ZOO)], env=env, cwd=cwd, stderr=subprocess.PIPE, text=True)
        running.append((line, answer, process))
    offered = {}
    for line, answer, process in running:
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, (line, stderr[-2000:])
        imported = {m.group(1) for m in re.finditer(r"\|\s+(\S+)$", stderr, re.MULTILINE)}
        assert not imported & {"torch", "pydantic"}, line
        offered[line] = sorted(filter(None, (word.strip() for word in answer.read_text().split("\v"))))
    return offered


def test_completion_offers_the_names_each_argument_and_option_takes(zoo, tmp_path):
    here = tmp_path / "here"  # the folder the user completes in
    here.mkdir()
    (here / "notes.txt").write_text("To be, or not to be: that is the question. " * 50)
    (here / "shared").mkdir()
    (here / "model.zoo").write_bytes(b"")
    assert zoo("datasets", "add", "my-notes", str(here / "notes.txt")).code == 0
    assert zoo("remote", "add", "team", str(here / "shared")).code == 0
    assert zoo("list").code == 0  # the card cache warm, as after any first command: no pydantic
    options = ["--help", "--registry", "-h"]
    expected = {
        "zoo sample gpt-char-m": ["gpt-char-mini", "gpt-char-mini-rope"],
        "zoo train new --from gpt-char-m": ["gpt-char-mini", "gpt-char-mini-rope"],
        "zoo experiment --arms transformer-6b-s": ["transformer-6b-sin"],
        "zoo remote publish out transformer-6b-s": ["transformer-6b-sin"],
        "zoo train x --data ": ["model.zoo", "my-notes", "notes.txt", "shared/", "tinyshakespeare"],
        "zoo eval x --data my": ["my-notes"],
        "zoo train-tokenizer --data no": ["notes.txt"],
        "zoo list --dataset ": ["my-notes", "tinyshakespeare"],
        "zoo datasets remove ": ["--help", "-h", "my-notes"],
        "zoo train x --trainer ": ["hand-built", "lora", "trained"],
        "zoo train x --log-to ": ["csv", "mlflow", "tensorboard"],
        "zoo experiment --log-to t": ["tensorboard"],
        "zoo export x --format ": ["gguf", "hf", "onnx", "transformer-lens"],
        "zoo list --tag depth": ["depth-study"],
        "zoo list --architecture ": ["bigram", "gpt", "puzzle", "transformer"],
        "zoo list --tokenizer ": ["bpe", "char", "hf", "puzzle-words"],
        "zoo train-tokenizer --kind b": ["bpe"],
        "zoo list --remote ": ["team"],
        "zoo remote remove ": ["--help", "-h", "team"],
        "zoo pull ": sorted([*options, "--deadline", "--min-rate", "--name", "team/"]),
        "zoo install ": sorted([*options, "--deadline", "--min-rate", "--name", "model.zoo", "shared/"]),
        "zoo check-plugin lo": ["lora"],
        "zoo help tr": ["train", "train-tokenizer"],
        "zoo new-plugin ": sorted([*options, "--dir"]),
    }
    assert _complete(list(expected), here, tmp_path) == expected


def test_completion_offers_every_run_log_kind():
    # The parser's list (the front's, torch-free) is the run log's, less the jsonl log every run writes.
    from zoo_core.cli.completers import LOG_KINDS
    from zoo_core.training.run_log import LOG_KINDS as RUN_LOG_KINDS

    assert {*LOG_KINDS, "jsonl"} == set(RUN_LOG_KINDS)


# -- finding models ---------------------------------------------------------------------------


def _names(result) -> list[str]:
    return [row["name"] for row in json.loads(result.out)]


def test_list_matches_substrings_and_wildcards(zoo):
    assert _names(zoo("list", "rope", "--json")) == ["gpt-char-mini-rope"]
    assert _names(zoo("list", "gpt-char-*", "--json")) == ["gpt-char-mini", "gpt-char-mini-rope", "gpt-char-speedrun"]
    assert "transformer-6b-sin" in _names(zoo("list", "6B", "--json"))  # case does not matter


def test_list_filters(zoo):
    chars = _names(zoo("list", "--tokenizer", "char", "--json"))
    assert chars and all("-char" in name for name in chars)  # gpt-char-*, llama-char-mini, ...
    assert _names(zoo("list", "--architecture", "puzzle", "--json")) == ["puzzle-disobeys", "puzzle-disobeys-nopos"]
    depth = _names(zoo("list", "--tag", "depth-study", "--json"))
    assert "transformer-6b-learned-ctx8" in depth and "bigram" not in depth
    shakespeare = _names(zoo("list", "--dataset", "tinyshakespeare", "--json"))
    assert "bigram" in shakespeare and "puzzle-disobeys" not in shakespeare  # hand-built: no data
    none = zoo("list", "--tag", "no-such-tag")
    assert none.code == 1 and "no variant matches --tag no-such-tag" in none.err


def test_list_sorts(zoo):
    rows = json.loads(zoo("list", "--sort", "validation_loss", "--json").out)
    losses = [row["validation_loss"] for row in rows if row["validation_loss"] is not None]
    assert losses == sorted(losses) and rows[0]["validation_loss"] == min(losses)
    assert rows[-1]["validation_loss"] is None  # no loss: last
    by_size = [row["parameters"] for row in json.loads(zoo("list", "--sort", "parameters", "--json").out) if row["parameters"]]
    assert by_size == sorted(by_size)
    names = _names(zoo("list", "--sort", "name", "--json"))
    assert names == sorted(names)


def test_search_looks_in_names_descriptions_and_tags(zoo):
    assert _names(zoo("search", "rope", "--json"))[0] == "gpt-char-mini-rope"
    assert "transformer-6b-learned-ctx8" in _names(zoo("search", "depth-study", "--json"))  # a tag
    assert _names(zoo("search", "bag of words", "--json")) == ["puzzle-disobeys-nopos"]  # a description
    assert _names(zoo("search", "without position", "--json"))[0] == "transformer-6b-nopos"  # the phrase first
    missing = zoo("search", "nothing-is-called-this")
    assert missing.code == 1 and "nothing-is-called-this" in missing.err


def test_search_matches_whole_words_and_reads_no_as_bound_to_the_next_word(zoo):
    no_positions = _names(zoo("search", "no positions", "--json"))
    assert no_positions[0] == "transformer-6b-nopos"
    assert set(no_positions) == {"transformer-6b-nopos", "puzzle-disobeys-nopos"}  # neither has a position encoding
    assert _names(zoo("search", "nopos", "--json"))[0] == "transformer-6b-nopos"  # a word of the name
    # "no" is a word: it does not find "pre-norm" or "nothing", only cards saying "no" (or "without")
    assert "transformer-6b-sin" not in _names(zoo("search", "no", "--json"))
    assert _names(zoo("search", "no dropout", "--json")) == ["gpt-char-mini"]


def test_list_table_is_whole_rows_in_a_pipe(zoo):
    result = zoo("list")
    lines = result.out.splitlines()
    assert lines[0].split()[:3] == ["name", "architecture", "layers"]
    row = next(line for line in lines if line.startswith("gpt-char-mini-rope"))
    assert row.split()[-3:] == ["1.7066", "tinyshakespeare", "built-in"] and "806,849" in row
