"""Benchmark: the load generator's client CPU per 1000 streamed tokens, against aiohttp.

A load generator that burns CPU measures itself: at C=64 and tens of thousands of tokens per
second a slow client delays its own reads, and the server looks slower than it is. This
prints the client CPU seconds per 1000 streamed tokens of

* ``ours``: :class:`pytest_sglang.loadgen.LoadGenerator` (httpx API on the httpx-aiohttp
  transport, raw-byte SSE splitting, orjson), parsing and recording every chunk as in a run;
* ``reference``: a minimal bench_serving-style client: one aiohttp ``ClientSession``,
  ``async for line in response.content``, strip ``data: ``, ``json.loads``, record the chunk
  times and the text, read the usage (the work ``sglang.bench_serving`` does per chunk);
* ``httpx-default`` (context): the same load generator on httpx's default transport
  (httpcore + h11 + anyio), what a plain ``httpx.AsyncClient`` would cost;

side by side: one process, one event loop, one emulator, interleaved repeats (the order
alternates every repeat, so drift hits every client alike), medians and ratios.

Why in-process: only one client runs at a time, so the ``time.process_time()`` delta of a
segment is that client's CPU (the event loop, the parsing, aiohttp's and httpx's work; the
emulator is another process). Running each client in its own subprocess would add
interpreter start-up to no benefit.

Why a paced server: the emulator produces each token ``--decode-ms`` after the previous one
per stream (10 ms: 100 tok/s per stream, 6400 tok/s at C=64), so every client receives about
one small SSE event per read, as from a real decode loop. A server that floods makes every
client look several times cheaper (many events per read). The emulator's own CPU use and the
achieved against the theoretical token rate are printed to show it kept its pace.

    python benchmarks/client_efficiency.py [--concurrency 64] [--decode-ms 10]
        [--output-len 128] [--repeats 5] [--endpoint completions]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_sglang.loadgen.jsoncodec import BACKEND
from pytest_sglang.loadgen.prompts import PATHS, encoded_bodies
from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.schedule import ClosedLoop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.testing import running_emulator


@dataclass
class Segment:
    """One client's run of C concurrent requests: its CPU, tokens and the server's state."""

    client: str
    cpu: float
    wall: float
    tokens: int
    server_cpu: float
    failed: int

    @property
    def cpu_per_1k(self) -> float:
        return self.cpu / (self.tokens / 1000)


@dataclass
class RefRecord:
    """What the reference client keeps per request, as bench_serving does."""

    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    text: str = ""
    output_len: int = 0
    ok: bool = False


async def reference_request(
    session: aiohttp.ClientSession, url: str, body: bytes, endpoint: str
) -> RefRecord:
    """One streamed request, parsed line by line with json.loads (bench_serving's loop)."""
    record = RefRecord()
    start = most_recent = time.perf_counter()
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
        if r.status != 200:
            return record
        async for raw in r.content:
            line = raw.strip()
            if not line:
                continue
            chunk = line.decode("utf-8").removeprefix("data: ")
            now = time.perf_counter()
            if chunk == "[DONE]":
                record.ok = True
                continue
            data = json.loads(chunk)
            if endpoint == "generate":
                text = data["text"]
                record.output_len = data["meta_info"]["completion_tokens"]
                new = text[len(record.text) :]
                record.text = text
            elif data["choices"]:
                choice = data["choices"][0]
                new = (
                    choice["text"] if endpoint == "completions" else choice["delta"].get("content")
                )
                record.text += new or ""
                if data.get("usage"):
                    record.output_len = data["usage"]["completion_tokens"]
            else:
                record.output_len = data["usage"]["completion_tokens"]
                continue
            if new:
                if not record.ttft:
                    record.ttft = now - start
                else:
                    record.itl.append(now - most_recent)
                most_recent = now
    return record


async def run_reference(
    url: str, workload: Workload, concurrency: int, bodies: list[bytes]
) -> tuple[int, int]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        slots = asyncio.Semaphore(concurrency)

        async def limited(body: bytes) -> RefRecord:
            async with slots:
                return await reference_request(
                    session, url + PATHS[workload.endpoint], body, workload.endpoint
                )

        records = await asyncio.gather(*(limited(b) for b in bodies))
    return sum(r.output_len for r in records if r.ok), sum(not r.ok for r in records)


class DefaultTransportGenerator(LoadGenerator):
    """The same load generator on httpx's default transport, for context."""

    def client(self, connections: int, *, reuse: bool = True) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        return httpx.AsyncClient(
            base_url=self.url,
            limits=limits,
            headers=self._headers,
            timeout=httpx.Timeout(None, connect=self.connect_timeout),
            trust_env=False,
        )


async def run_generator(
    generator: LoadGenerator, workload: Workload, concurrency: int
) -> tuple[int, int]:
    run = await generator.run(workload, ClosedLoop(concurrency))
    done = [r for r in run.records if r.ok]
    return sum(r.output_tokens or 0 for r in done), len(run.records) - len(done)


async def measure(
    name: str, job: Callable[[], Awaitable[tuple[int, int]]], server: psutil.Process
) -> Segment:
    server_before = sum(server.cpu_times()[:2])
    wall, cpu = time.perf_counter(), time.process_time()
    tokens, failed = await job()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    server_cpu = sum(server.cpu_times()[:2]) - server_before
    return Segment(name, cpu, wall, tokens, server_cpu, failed)


async def bench(url: str, pid: int, args: argparse.Namespace) -> list[Segment]:
    workload = Workload(
        input_len=32,
        output_len=args.output_len,
        requests=args.concurrency * args.waves,
        endpoint=args.endpoint,
        warmup=0,
    )
    bodies = encoded_bodies(workload, "reference", workload.requests)
    server = psutil.Process(pid)
    clients: dict[str, Callable[[], Awaitable[tuple[int, int]]]] = {
        "ours": lambda: run_generator(LoadGenerator(url), workload, args.concurrency),
        "reference": lambda: run_reference(url, workload, args.concurrency, bodies),
    }
    if not args.no_httpx_default:
        clients["httpx-default"] = lambda: run_generator(
            DefaultTransportGenerator(url), workload, args.concurrency
        )
    # Warm-up: open connections, fill caches, import lazily loaded modules; not reported.
    for job in clients.values():
        await job()
    segments = []
    names = list(clients)
    for repeat in range(args.repeats):
        order = names if repeat % 2 == 0 else names[::-1]
        segments += [await measure(name, clients[name], server) for name in order]
    return segments


def report(segments: list[Segment], args: argparse.Namespace) -> None:
    theoretical = args.concurrency * 1000 / args.decode_ms
    print(
        f"client CPU per 1000 streamed tokens: endpoint {args.endpoint}, C={args.concurrency}, "
        f"{args.output_len} tokens/request, {args.waves} waves, emulator paced at "
        f"{args.decode_ms:g} ms/token ({theoretical:.0f} tok/s theoretical), "
        f"{args.repeats} interleaved repeats, JSON: {BACKEND}"
    )
    by_client: dict[str, list[Segment]] = {}
    for segment in segments:
        by_client.setdefault(segment.client, []).append(segment)
    reference = statistics.median(s.cpu_per_1k for s in by_client["reference"])
    header = ("client", "CPU s/1k tok", "ratio", "tok/s", "server CPU", "failed")
    print("{:<14} {:>12} {:>6} {:>7} {:>10} {:>6}".format(*header))
    for name, runs in by_client.items():
        cost = statistics.median(s.cpu_per_1k for s in runs)
        rate = statistics.median(s.tokens / s.wall for s in runs)
        server = statistics.median(s.server_cpu / s.wall for s in runs)
        failed = sum(s.failed for s in runs)
        ratio = cost / reference
        print(f"{name:<14} {cost:>12.4f} {ratio:>6.2f} {rate:>7.0f} {server:>10.0%} {failed:>6}")
    pairs = [
        o.cpu_per_1k / r.cpu_per_1k
        for o, r in zip(by_client["ours"], by_client["reference"], strict=True)
    ]
    print(
        f"ours / reference per repeat: {', '.join(f'{p:.2f}' for p in pairs)}; "
        f"median {statistics.median(pairs):.2f} (target <= 1.0)"
    )
    best = max(s.tokens / s.wall for s in segments)
    print(
        f"emulator kept pace: up to {best:.0f} of {theoretical:.0f} tok/s theoretical "
        f"({best / theoretical:.0%}; the rest is connection set-up and each wave's tail), "
        f"its CPU at most {max(s.server_cpu / s.wall for s in segments):.0%} of one core"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--decode-ms", type=float, default=10.0)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--waves", type=int, default=2, help="requests per client run / C")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--endpoint", choices=["generate", "completions", "chat"], default="completions"
    )
    parser.add_argument("--no-httpx-default", action="store_true", help="skip the context client")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_emulator(
            Path(tmp),
            "--emulator-decode-ms",
            str(args.decode_ms),
            "--max-running-requests",
            "1024",
            "--log-level-http",
            "warning",
        ) as emulator,
    ):
        segments = asyncio.run(bench(emulator.url, emulator.process.pid, args))
    report(segments, args)


if __name__ == "__main__":
    main()
