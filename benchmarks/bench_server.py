"""Load test of `zoo serve` on loopback: 200 completions, 8 at a time.

Starts a real `zoo serve` subprocess, warms it up, then sends REQUESTS requests
(every other one streamed) through CONCURRENCY connections and records latency,
throughput, errors and the server's resident memory along the way. The reference,
measured in the same run (before and after the load, to show drift), is the same
generations made in this process with `ZooModel.generate` one after another: the
ratio says what HTTP, JSON and the thread pool cost or win on this machine.

    OMP_NUM_THREADS=1 python -m benchmarks.bench_server [--requests 200] [--concurrency 8]

Writes its own section of docs/benchmarks.md (between markers; the rest of the
file is left alone).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

import httpx

from benchmarks.common import BENCHMARKS_PAGE, section_markers, write_section
from tests.web_support import Server

BEGIN, END = section_markers("bench_server")
VARIANT = "transformer-1b-learned-ctx8"
MAX_TOKENS = 32
PROMPTS = ["ROMEO:", "First Citizen:", "KING RICHARD III:", "To be"]


def resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def request_body(i: int) -> dict:
    return {"model": VARIANT, "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": MAX_TOKENS, "seed": i,
            "stream": i % 2 == 1}


async def one_request(client: httpx.AsyncClient, url: str, i: int) -> tuple[float, str | None, str]:
    body = request_body(i)
    started = time.perf_counter()
    try:
        if body["stream"]:
            text = []
            async with client.stream("POST", url, json=body) as response:
                if response.status_code != 200:
                    return time.perf_counter() - started, f"HTTP {response.status_code}", ""
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        text.append(json.loads(line[6:])["choices"][0]["text"])
            return time.perf_counter() - started, None, "".join(text)
        response = await client.post(url, json=body)
        if response.status_code != 200:
            return time.perf_counter() - started, f"HTTP {response.status_code}: {response.text[:120]}", ""
        return time.perf_counter() - started, None, response.json()["choices"][0]["text"]
    except httpx.HTTPError as exc:
        return time.perf_counter() - started, f"{type(exc).__name__}: {exc}", ""


async def load(server: Server, requests: int, concurrency: int, memory: list) -> tuple[list, float]:
    gate = asyncio.Semaphore(concurrency)
    url = server.url + "/v1/completions"
    results: list = [None] * requests

    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=concurrency)) as client:
        async def run(i):
            async with gate:
                results[i] = await one_request(client, url, i)
                if (i + 1) % (requests // 4) == 0:
                    memory.append((i + 1, resident_mb(server.process.pid)))

        started = time.perf_counter()
        await asyncio.gather(*(run(i) for i in range(requests)))
        return results, time.perf_counter() - started


def reference(requests: int) -> tuple[float, list[str]]:
    from zoo_core.loading.api import load as load_model

    model = load_model(VARIANT)
    started = time.perf_counter()
    texts = []
    for i in range(requests):
        body = request_body(i)
        full = model.generate(body["prompt"], MAX_TOKENS, seed=body["seed"])
        texts.append(full[len(body["prompt"]):])
    return time.perf_counter() - started, texts


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="requests in the load (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight at once (default: %(default)s)")
    parser.add_argument("--no-write", action="store_true", help="print, do not touch docs/benchmarks.md")
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    reference_first, expected = reference(args.requests // 2)
    server = Server("--max-concurrent", str(args.concurrency))
    try:
        asyncio.run(load(server, 2 * args.concurrency, args.concurrency, []))  # warm: model loaded, threads started
        memory = [(0, resident_mb(server.process.pid))]
        results, seconds = asyncio.run(load(server, args.requests, args.concurrency, memory))
    finally:
        server.stop()
    reference_second, _ = reference(args.requests - args.requests // 2)
    load_after = os.getloadavg()[0]

    latencies = [r[0] for r in results]
    errors = [r[1] for r in results if r[1]]
    same = sum(r[2] == e for r, e in zip(results, expected))
    reference_rate = args.requests / (reference_first + reference_second)
    server_rate = args.requests / seconds
    growth = memory[-1][1] - memory[0][1]
    lines = [
        BEGIN,
        "## Local server under load (`zoo serve`, loopback)",
        "",
        f"`python -m benchmarks.bench_server` — {args.requests} completions of {MAX_TOKENS} tokens from `{VARIANT}`, "
        f"{args.concurrency} in flight at once, every other one streamed (server-sent events), after a warm-up of "
        f"{2 * args.concurrency}. Reference: the same generations made one after another in-process with "
        f"`ZooModel.generate`, half before and half after the load. Machine load (1-minute average) "
        f"{load_before:.1f} before, {load_after:.1f} after, on a machine shared with other jobs.",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| errors | {len(errors)} of {args.requests} |",
        f"| texts equal to the in-process generation (first half) | {same} of {len(expected)} |",
        f"| throughput | {server_rate:.1f} requests/s ({server_rate * MAX_TOKENS:,.0f} tokens/s) |",
        f"| latency p50 / p95 / max | {percentile(latencies, 0.5) * 1000:.0f} / {percentile(latencies, 0.95) * 1000:.0f} / {max(latencies) * 1000:.0f} ms |",
        f"| mean latency | {statistics.mean(latencies) * 1000:.0f} ms |",
        f"| reference, in-process sequential | {reference_rate:.1f} generations/s "
        f"(halves {args.requests // 2 / reference_first:.1f} and {(args.requests - args.requests // 2) / reference_second:.1f}) |",
        f"| server resident memory after warm-up → after each quarter | "
        f"{' → '.join(f'{mb:.0f}' for _, mb in memory)} MB (growth {growth:+.1f} MB) |",
        "",
        f"**server / in-process throughput: {server_rate / reference_rate:.2f}×**. The server runs generations in "
        "worker threads; on a machine with few free cores they share the same CPUs, so the ratio shows the "
        "HTTP, JSON and scheduling cost rather than a speed-up.",
        END,
    ]
    section = "\n".join(lines)
    print(section)
    if errors:
        print("errors:", *errors[:5], sep="\n  ")
    if args.no_write:
        return
    write_section("bench_server", section)
    print(f"written to {BENCHMARKS_PAGE}")


if __name__ == "__main__":
    main()
