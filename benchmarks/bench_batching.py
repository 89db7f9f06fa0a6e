"""Continuous batching in `zoo serve`: tokens/s at 16 streaming clients against one client.

Starts two real `zoo serve` subprocesses on loopback: the batched server
(batches of up to CLIENTS rows) and the unbatched one (`--max-concurrent 1`:
one row at a time, the others waiting their turn, the old one-at-a-time
behaviour). Rounds alternate between them (the order flips every round, so
drift in the machine's load hits both alike); each round measures one client
alone, then CLIENTS clients at once, all streaming. Reported per server: tokens/s
(median and spread over rounds), time to first token and per-token latency (p50
and p95 over every request), and whether every text equals the other server's
for the same prompt and seed.

    OMP_NUM_THREADS=1 python -m benchmarks.bench_batching [--rounds 5] [--clients 16] [--variant NAME]

Writes its own section of docs/benchmarks.md (between markers; the rest of the
file is left alone) for the default variant; another `--variant` (any in the
catalogue, e.g. an imported SmolLM2 with ZOO_REGISTRY naming its registry) is
printed only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

import httpx

from benchmarks.common import (
    BENCHMARKS_PAGE,
    load_text,
    machine_load,
    section_markers,
    spread,
    spread_text,
    write_section,
)
from tests.web_support import Server

BEGIN, END = section_markers("bench_batching")
VARIANT = "gpt-char-mini"
# Prompt and completion stay within the model's 64-token window: past it every
# token is a whole window recomputed, as `zoo sample` does, which batching cannot share.
MAX_TOKENS = 56
PROMPTS = ["ROMEO:", "KING", "JULIET:", "To be,", "MENENIUS", "Hark!"]


def request_body(variant: str, i: int) -> dict:
    return {"model": variant, "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": MAX_TOKENS, "seed": i,
            "stream": True, "stream_options": {"include_usage": True}}


async def one_stream(client: httpx.AsyncClient, url: str, variant: str, i: int) -> dict:
    """Time to first token, per-token latency after it, the text and its token count."""
    started = time.perf_counter()
    first = None
    pieces = []
    tokens = 0
    async with client.stream("POST", url, json=request_body(variant, i)) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
                for choice in chunk["choices"]:
                    if choice["text"] and first is None:
                        first = time.perf_counter() - started
                    pieces.append(choice["text"])
    total = time.perf_counter() - started
    return {"first": first, "per_token": (total - first) / max(1, tokens - 1), "text": "".join(pieces),
            "tokens": tokens, "seconds": total}


async def wave(server: Server, variant: str, clients: int, offset: int) -> tuple[list[dict], float]:
    url = server.url + "/v1/completions"
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=clients)) as client:
        started = time.perf_counter()
        results = await asyncio.gather(*(one_stream(client, url, variant, offset + i) for i in range(clients)))
        return list(results), time.perf_counter() - started


def cpu_seconds(pid: int) -> float:
    """CPU time the process used so far, all threads: what the load on a shared machine does not inflate."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default: %(default)s)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent streaming clients (default: %(default)s)")
    parser.add_argument("--variant", default=VARIANT, help="the served variant (default: %(default)s)")
    parser.add_argument("--no-write", action="store_true", help="print, do not touch docs/benchmarks.md")
    args = parser.parse_args()
    variant = args.variant

    load_before = machine_load()
    servers = {
        "batched": Server("--max-concurrent", str(args.clients)),
        "unbatched": Server("--max-concurrent", "1", "--max-queue", str(args.clients)),
    }
    rates: dict = {name: {"single": [], "many": []} for name in servers}
    cpu: dict = {name: {"single": [], "many": []} for name in servers}  # server CPU ms per token
    requests: dict = {name: [] for name in servers}
    texts: dict = {name: {} for name in servers}
    try:
        for server in servers.values():
            asyncio.run(wave(server, variant, args.clients, 0))  # warm: the model loaded, the batch thread started
        for round_ in range(args.rounds):
            order = list(servers) if round_ % 2 == 0 else list(reversed(servers))
            for name in order:
                pid = servers[name].process.pid
                used = cpu_seconds(pid)
                (alone,), seconds = asyncio.run(wave(servers[name], variant, 1, 0))
                rates[name]["single"].append(alone["tokens"] / seconds)
                cpu[name]["single"].append((cpu_seconds(pid) - used) * 1000 / alone["tokens"])
                used = cpu_seconds(pid)
                results, seconds = asyncio.run(wave(servers[name], variant, args.clients, 0))
                tokens = sum(r["tokens"] for r in results)
                rates[name]["many"].append(tokens / seconds)
                cpu[name]["many"].append((cpu_seconds(pid) - used) * 1000 / tokens)
                requests[name] += results
                for i, result in enumerate(results):
                    texts[name].setdefault(i, set()).add(result["text"])
    finally:
        for server in servers.values():
            server.stop()
    load_after = machine_load()

    same = sum(texts["batched"][i] == texts["unbatched"][i] and len(texts["batched"][i]) == 1 for i in texts["batched"])
    lines = [
        BEGIN,
        "## Continuous batching (`zoo serve`, loopback)",
        "",
        f"`python -m benchmarks.bench_batching` — `{variant}`, {MAX_TOKENS} tokens per streamed completion, "
        f"{args.rounds} interleaved rounds, each: one client alone, then {args.clients} clients at once. "
        f"Batched: `--max-concurrent {args.clients}`; unbatched: `--max-concurrent 1` (one row at a time, the "
        f"old behaviour). Tokens/s: median (min–max) over rounds; latencies: p50 / p95 over all "
        f"{len(requests['batched'])} requests of each server. Machine load (1-minute average) "
        f"{load_text(load_before)} before, {load_text(load_after)} after, on a machine shared with other jobs: "
        "the figures are noisy.",
        "",
        f"| server | tokens/s, 1 client | tokens/s, {args.clients} clients | server CPU ms/token, 1 client | "
        f"server CPU ms/token, {args.clients} clients | time to first token p50 / p95 | per-token latency p50 / p95 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in servers:
        firsts = [r["first"] * 1000 for r in requests[name]]
        per_token = [r["per_token"] * 1000 for r in requests[name]]
        lines.append(
            f"| {name} | {spread_text(spread(rates[name]['single']))} | {spread_text(spread(rates[name]['many']))} | "
            f"{spread_text(spread(cpu[name]['single']), '.2f')} | {spread_text(spread(cpu[name]['many']), '.2f')} | "
            f"{percentile(firsts, 0.5):.0f} / {percentile(firsts, 0.95):.0f} ms | "
            f"{percentile(per_token, 0.5):.1f} / {percentile(per_token, 0.95):.1f} ms |"
        )
    batched = spread(rates["batched"]["many"])["median"] / spread(rates["batched"]["single"])["median"]
    unbatched = spread(rates["unbatched"]["many"])["median"] / spread(rates["unbatched"]["single"])["median"]
    cpu_gain = spread(cpu["batched"]["single"])["median"] / spread(cpu["batched"]["many"])["median"]
    lines += [
        "",
        f"**{args.clients} clients / 1 client: {batched:.1f}× batched, {unbatched:.1f}× unbatched** (target ≥ 4× "
        f"batched); in server CPU per token, which the machine's load does not inflate, {cpu_gain:.1f}× batched. "
        f"Texts identical between the two servers for every prompt and seed, in every round: "
        f"{same} of {len(texts['batched'])}. The 1-client figures are the noisiest (one stream per round, on a "
        "shared machine the process waits for a core at every token); server CPU per token is the figure to "
        "compare across runs.",
        END,
    ]
    section = "\n".join(lines)
    print(section)
    if args.no_write or variant != VARIANT:
        return
    write_section("bench_batching", section)
    print(f"written to {BENCHMARKS_PAGE}")


if __name__ == "__main__":
    main()
