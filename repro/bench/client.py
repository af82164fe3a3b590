"""The load: streaming completions over the OpenAI-compatible endpoint, timed per token.

What ``vllm bench serve`` measures, done by the kit itself so that the same
client drives vLLM and the test server and needs no tokenizer: prompts are
token ids of a fixed length, outputs a fixed number of tokens (``ignore_eos``),
greedy, at most ``concurrency`` requests in flight.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import aiohttp
import numpy as np


@dataclass(frozen=True)
class RequestRecord:
    ok: bool
    ttft_ms: float = float("nan")
    itl_ms: tuple[float, ...] = ()
    e2e_ms: float = float("nan")
    output_tokens: int = 0
    error: str = ""

    @property
    def tpot_ms(self) -> float:
        """Time per output token after the first, as vLLM's benchmark defines it."""
        return (self.e2e_ms - self.ttft_ms) / (self.output_tokens - 1) if self.output_tokens > 1 else float("nan")


@dataclass(frozen=True)
class LevelRun:
    concurrency: int
    records: tuple[RequestRecord, ...]
    seconds: float

    @property
    def failed(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.ok]

    @property
    def output_tokens_per_s(self) -> float:
        return sum(r.output_tokens for r in self.records if r.ok) / self.seconds if self.seconds else 0.0


def make_prompts(count: int, length: int, vocab: int, key: tuple[int, ...]) -> list[list[int]]:
    """Random token ids, the same for every arm given the key; ids below 10 are skipped (special tokens)."""
    rng = np.random.default_rng(list(key))
    return rng.integers(10, vocab, size=(count, length)).tolist()


async def _one(
    session: aiohttp.ClientSession, url: str, model: str, prompt: list[int], output_len: int
) -> RequestRecord:
    payload = {
        "model": model,
        "prompt": prompt,
        "max_tokens": output_len,
        "min_tokens": output_len,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sent = time.perf_counter()
    arrivals: list[float] = []
    usage_tokens = None
    try:
        async with session.post(url, json=payload) as response:
            if response.status != 200:
                return RequestRecord(False, error=f"HTTP {response.status}: {(await response.text())[:200]}")
            async for raw in response.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                chunk = json.loads(data)
                if chunk.get("usage"):
                    usage_tokens = chunk["usage"].get("completion_tokens")
                if any(c.get("text") for c in chunk.get("choices", [])):
                    arrivals.append(time.perf_counter())
            else:
                return RequestRecord(False, error="the stream ended without [DONE]: the server went away mid-answer")
    except TimeoutError:
        return RequestRecord(False, error="no answer within the request timeout")
    except aiohttp.ClientError as e:
        return RequestRecord(False, error=f"{type(e).__name__}: {e}")
    if not arrivals:
        return RequestRecord(False, error="the server answered with no token")
    done = time.perf_counter()
    return RequestRecord(
        ok=True,
        ttft_ms=(arrivals[0] - sent) * 1000,
        itl_ms=tuple(float(x) for x in np.diff(arrivals) * 1000),
        e2e_ms=(done - sent) * 1000,
        output_tokens=usage_tokens or len(arrivals),
    )


async def _level(
    base_url: str, model: str, prompts: list[list[int]], concurrency: int, output_len: int, timeout: float
) -> LevelRun:
    gate = asyncio.Semaphore(concurrency)
    # sock_read: the longest silence allowed between two chunks, so a long answer is never cut but a hang is.
    limits = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(timeout=limits, connector=connector) as session:

        async def bounded(prompt: list[int]) -> RequestRecord:
            async with gate:
                return await _one(session, f"{base_url}/v1/completions", model, prompt, output_len)

        started = time.perf_counter()
        records = await asyncio.gather(*(bounded(p) for p in prompts))
    return LevelRun(concurrency, tuple(records), time.perf_counter() - started)


def run_level(
    base_url: str, model: str, prompts: list[list[int]], concurrency: int, output_len: int, timeout: float
) -> LevelRun:
    return asyncio.run(_level(base_url, model, prompts, concurrency, output_len, timeout))
