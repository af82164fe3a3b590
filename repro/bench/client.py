"""The load: streaming completions over the OpenAI-compatible endpoint, timed per token.

What ``vllm bench serve`` measures, done by the kit itself so that the same
client drives vLLM and the test server and needs no tokenizer: prompts are
token ids of a fixed length, outputs a fixed number of tokens (``ignore_eos``),
greedy, at most ``concurrency`` requests in flight.

A server cannot hold the client: each request has a total timeout, every line
and every answer a size limit, and a stream that is stalled, endless or not
server-sent events of JSON is a failed request with the reason, never a hang
or a traceback. The first failed request of a level sends no more of its requests.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import aiohttp
import numpy as np

# A vLLM chunk is a few hundred bytes; these bounds only stop a server that never ends a line or an answer.
MAX_LINE_BYTES = 1 << 20
MAX_ANSWER_BYTES = 64 << 20


class MalformedStreamError(ValueError):
    """The answer is not the server-sent events of JSON that an OpenAI-compatible server streams."""


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
    records: tuple[RequestRecord, ...]  # the requests sent: none after the first that failed
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


async def _lines(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """The answer's lines, each and all of them within their size limits."""
    pending, total = b"", 0
    async for data in content.iter_any():
        total += len(data)
        if total > MAX_ANSWER_BYTES:
            raise MalformedStreamError(f"the answer went past {MAX_ANSWER_BYTES >> 20} MiB")
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            yield line
        if len(pending) > MAX_LINE_BYTES:
            raise MalformedStreamError(f"a line went past {MAX_LINE_BYTES >> 20} MiB without ending")
    if pending:
        yield pending


def _chunk(data: bytes) -> dict:
    try:
        chunk = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise MalformedStreamError(f"an event is not JSON: {data[:80]!r}") from None
    if not isinstance(chunk, dict) or not isinstance(chunk.get("choices", []), list):
        raise MalformedStreamError(f"an event is not a completion chunk: {data[:80]!r}")
    return chunk


def _tokens(chunk: dict) -> int:
    """How many tokens the chunk carries, counted here: its token ids, or one for a choice with text only.

    Token ids too: a byte-level token that ends inside a UTF-8 character arrives with empty text.
    """
    count = 0
    for choice in chunk["choices"]:
        if not isinstance(choice, dict):
            continue
        ids = choice.get("token_ids")
        if isinstance(ids, list) and ids:
            count += len(ids)
        elif choice.get("text"):
            count += 1
    return count


def _usage(chunk: dict) -> int | None:
    """The completion tokens the server says it sent, where it says so; a figure that is no count is malformed."""
    usage = chunk.get("usage")
    if not isinstance(usage, dict) or usage.get("completion_tokens") is None:
        return None
    said = usage["completion_tokens"]
    if type(said) is not int or said < 0:
        raise MalformedStreamError(f"its usage says {said!r} completion tokens, which is no count")
    return said


async def _one(
    session: aiohttp.ClientSession, url: str, model: str, prompt: list[int], output_len: int, timeout: float
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
        "return_token_ids": True,
    }
    sent = time.perf_counter()
    arrivals: list[float] = []
    counted = 0
    usage_tokens = None
    try:
        # Not redirected: the load goes to the server asked, never to wherever it points.
        async with asyncio.timeout(timeout), session.post(url, json=payload, allow_redirects=False) as response:
            if response.status != 200:
                body = (await response.content.read(200)).decode(errors="replace")
                return RequestRecord(False, error=f"HTTP {response.status}: {body}")
            async for raw in _lines(response.content):
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                chunk = _chunk(data)
                if (said := _usage(chunk)) is not None:
                    usage_tokens = said
                if tokens := _tokens(chunk):
                    arrivals.append(time.perf_counter())
                    counted += tokens
                    if counted > output_len:
                        raise MalformedStreamError(f"more tokens than the {output_len} asked for")
            else:
                return RequestRecord(False, error="the stream ended without [DONE]: the server went away mid-answer")
    except TimeoutError:
        return RequestRecord(False, error=f"no complete answer within the request timeout ({timeout:g} s)")
    except MalformedStreamError as e:
        return RequestRecord(False, error=f"malformed stream: {e}")
    except aiohttp.ClientError as e:
        return RequestRecord(False, error=f"{type(e).__name__}: {e}")
    if not arrivals:
        return RequestRecord(False, error="the server answered with no token")
    if usage_tokens is not None and usage_tokens != counted:
        # Every figure recorded is counted here: a server whose account differs from its own stream is not believed.
        return RequestRecord(
            False,
            error=f"malformed stream: its usage says {usage_tokens} completion tokens, its stream carried {counted}",
        )
    done = time.perf_counter()
    return RequestRecord(
        ok=True,
        ttft_ms=(arrivals[0] - sent) * 1000,
        itl_ms=tuple(float(x) for x in np.diff(arrivals) * 1000),
        e2e_ms=(done - sent) * 1000,
        output_tokens=counted,
    )


async def _level(
    base_url: str,
    model: str,
    prompts: list[list[int]],
    concurrency: int,
    output_len: int,
    timeout: float,
    stop: Callable[[], bool],
) -> LevelRun:
    queue = enumerate(prompts)  # shared: each client takes the next prompt when its last answer is in
    records: dict[int, RequestRecord] = {}
    failed = False
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None), connector=connector) as session:

        async def one_client() -> None:
            nonlocal failed
            for index, prompt in queue:
                # After a failure the run stops at this level anyway: a hanging server costs one timeout, not N.
                if failed or stop():
                    return
                records[index] = await _one(session, f"{base_url}/v1/completions", model, prompt, output_len, timeout)
                failed = failed or not records[index].ok

        started = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(concurrency)))
    return LevelRun(concurrency, tuple(records[i] for i in sorted(records)), time.perf_counter() - started)


def run_level(
    base_url: str,
    model: str,
    prompts: list[list[int]],
    concurrency: int,
    output_len: int,
    timeout: float,
    stop: Callable[[], bool] = lambda: False,
) -> LevelRun:
    """The prompts through the server, at most ``concurrency`` at a time; none sent once ``stop()`` says so."""
    return asyncio.run(_level(base_url, model, prompts, concurrency, output_len, timeout, stop))
