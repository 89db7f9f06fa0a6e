"""The zoo as a person sees it in a terminal and as a log sees it in a pipe:
a live training bar with the running loss, periodic lines in a pipe, Ctrl-C
that leaves a run resumable, a streamed sample that keeps its text when
interrupted. Real processes of the installed `zoo` command, under a
pseudo-terminal where a terminal is the point."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
import tomllib
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import zoo_core

ZOO = Path(sys.executable).with_name("zoo")
TINY = "transformer-1b-learned-ctx8"  # the smallest trained variant: steps take milliseconds
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def small_corpus(tmp_path) -> Path:
    """The first 40,000 characters of the corpus: tokenized in a blink, so a
    test pays for training steps rather than for encoding Tiny Shakespeare."""
    text = (Path(__file__).resolve().parent.parent / "data" / "tinyshakespeare.txt").read_text()[:40_000]
    path = tmp_path / "small.txt"
    path.write_text(text)
    return path


def _environment() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def run_in_terminal(args: list[str], *, interrupt_when=None, timeout: float = 240) -> tuple[int, str]:
    """Run `zoo ARGS` on a pseudo-terminal 160 columns wide; SIGINT it once
    ``interrupt_when(output so far)`` holds. Returns the exit status and what it showed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    # SIGINT as a terminal's foreground job has it: a test run started in the background
    # (`make test &`, nohup) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt.
    process = subprocess.Popen([str(ZOO), *args], stdin=slave, stdout=slave, stderr=slave, env=_environment(), close_fds=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(slave)
    chunks, interrupted, deadline = [], False, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            if interrupt_when and not interrupted and interrupt_when(b"".join(chunks).decode(errors="replace")):
                process.send_signal(signal.SIGINT)
                interrupted = True
            if process.poll() is not None and not ready:
                break
        code = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(master)
    return code, b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")


def test_training_in_a_terminal_shows_a_bar_with_the_running_loss(tmp_path, small_corpus):
    code, shown = run_in_terminal(["train", TINY, "--steps", "80", "--out", str(tmp_path / "run"), "--data", str(small_corpus)])
    assert code == 0, shown[-2000:]
    plain = ANSI.sub("", shown)
    running = re.findall(r"(\d+)/80 +loss (\d+\.\d{4}) +[\d,]+ tok/s +ETA (\d+m\d\ds)", plain)
    assert running, plain[-2000:]
    steps_with_loss = {int(step) for step, _, _ in running}
    assert any(1 < step < 80 for step in steps_with_loss)  # between the two evaluations
    assert re.search(r"step 1/80 +train \d+\.\d{4} +val \d+\.\d{4}", plain)  # evaluations printed as they come
    assert re.search(r"step 80/80 +train \d+\.\d{4} +val \d+\.\d{4}", plain)
    assert "\x1b[" in shown  # drawn in place, not line after line


def test_training_in_a_pipe_prints_periodic_lines(zoo, tmp_path, small_corpus):
    result = zoo("train", TINY, "--steps", "12", "--log-every", "3", "--out", str(tmp_path / "run"), "--data", str(small_corpus))
    assert result.code == 0
    lines = [line for line in result.err.splitlines() if f"{TINY}: step" in line]
    steps = [int(re.search(r"step +(\d+)/12", line).group(1)) for line in lines]
    assert steps == [1, 3, 6, 9, 12]
    assert all(re.search(r"loss \d+\.\d{4} .*tok/s +ETA", line) for line in lines)
    assert "eval: train" in lines[0] and "eval: train" in lines[-1] and "eval" not in lines[1]
    assert "\x1b" not in result.err and "\r" not in result.err


def test_ctrl_c_at_step_5_saves_resumable_state_and_says_how_to_continue(zoo, tmp_path, small_corpus):
    out, steps, data = tmp_path / "run", "60", str(small_corpus)
    process = subprocess.Popen([str(ZOO), "train", TINY, "--steps", steps, "--out", str(out), "--log-every", "1", "--data", data],
                               stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_environment())
    seen = []
    for line in process.stderr:
        seen.append(line)
        if re.search(r"step +5/60", line):
            process.send_signal(signal.SIGINT)
            break
    rest_out, rest_err = process.communicate(timeout=120)
    err = "".join(seen) + rest_err
    assert process.returncode == 130, err
    stopped = int(re.search(r"stopped after step (\d+) of 60", err).group(1))
    assert 5 <= stopped < 60
    state = out / f"{TINY}.state.safetensors"
    assert state.exists()
    assert f"continue with: zoo train {TINY} --steps 60 --out {out} --log-every 1 --data {data} --resume" in err
    assert not (out / f"{TINY}.safetensors").exists()  # nothing half-finished was published

    # The interrupted run took its first steps with one thread; so do these, since
    # a different thread count may split float sums differently.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        resumed = zoo("train", TINY, "--steps", steps, "--out", str(out), "--data", data, "--resume", "--quiet")
        straight = zoo("train", TINY, "--steps", steps, "--out", str(tmp_path / "straight"), "--data", data, "--quiet")
    finally:
        torch.set_num_threads(threads)
    assert resumed.code == 0, resumed.err
    assert straight.code == 0
    cards = [tomllib.loads((folder / "registry.toml").read_text())[TINY] for folder in (out, tmp_path / "straight")]
    assert cards[0]["metrics"]["validation_loss"] == cards[1]["metrics"]["validation_loss"]
    weights = [load_file(folder / f"{TINY}.safetensors") for folder in (out, tmp_path / "straight")]
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[1])  # bit for bit


def test_interrupted_stream_keeps_its_text_and_exits_130():
    # No --stream: on a terminal a single sample streams by default.
    prompt = "ROMEO:"
    code, shown = run_in_terminal(["sample", "gpt-char-mini", "--prompt", prompt, "--max-new-tokens", "100000", "--seed", "5"],
                                  interrupt_when=lambda text: len(text.partition(prompt)[2]) > 40)
    assert code == 130, shown[-2000:]
    # Before the sample, at most the first load's verification bar (cleared from the screen).
    before, found, rest = shown.partition(prompt)
    assert found and (not before.strip() or "verifying gpt-char-mini.safetensors" in before), before
    shown = prompt + rest
    text, _, tail = shown.rpartition("zoo: interrupted")
    assert tail.strip() == ""
    printed = text.rstrip("\n")[len(prompt):]
    assert len(printed) >= 40
    # What was printed is the sample itself, as drawn without interruption.
    model = zoo_core.load("gpt-char-mini")
    assert model.generate(prompt, len(printed), seed=5) == prompt + printed


@pytest.mark.parametrize("extra", [["--json"], ["--num-samples", "2"]])
def test_stream_is_refused_with_json_or_several_samples(zoo, extra):
    result = zoo("sample", "gpt-char-mini", "--prompt", "x", "--stream", *extra)
    assert result.code == 1 and "--stream shows one sample" in result.err


def test_eval_in_a_terminal_shows_its_stages_and_nothing_in_a_pipe(zoo):
    code, shown = run_in_terminal(["eval", TINY, "--windows", "8"])
    assert code == 0, shown
    assert f"{TINY}: loss on 8 windows per split" in shown and f"{TINY}: bits per byte over" in shown
    assert "validation bits per byte" in shown  # the report, after the bar
    piped = zoo("eval", TINY, "--windows", "8")
    assert piped.code == 0 and piped.err == ""
