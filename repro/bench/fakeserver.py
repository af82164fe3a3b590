"""A small OpenAI-compatible server that streams tokens with controlled delays.

It stands in for ``vllm serve`` where no GPU exists (the kit's tests, CI, a
laptop) so that the whole benchmark — processes, ports, health checks, the
streaming client, the statistics, the profile reading, the outputs — runs for
real. Like vLLM, it reads ``VLLM_WSL2_ENABLE_PIN_MEMORY`` from its environment:
with ``1`` each decode step is ``--pin-speedup`` shorter (the GPU idles less
between steps), so a benchmark of it has a known true effect. It can also fail
the ways a real server does: not start, die mid-run, or never answer.

``python -m repro.bench.fakeserver --port 8000 --model tiny``
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gzip
import itertools
import json
import mmap
import os
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from matrix.variables import PIN_MEMORY

PINNED_BYTES = 4 << 20  # what the pinned arm locks, so that the memory sampler has something to find
# A child in the server's process group that, told to stop, takes its time: as vLLM's engine core may.
LINGERING_CHILD = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(float(sys.argv[1])), sys.exit(0)))\n"
    "while True: time.sleep(60)\n"
)


def _lock_host_memory() -> mmap.mmap:
    """Page-lock a buffer, as a pinned staging buffer would be (shows as VmLck)."""
    buf = mmap.mmap(-1, PINNED_BYTES)
    address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    if ctypes.CDLL(None, use_errno=True).mlock(ctypes.c_void_p(address), ctypes.c_size_t(PINNED_BYTES)) != 0:
        print(f"fake server: mlock failed (errno {ctypes.get_errno()}); pinned memory not shown", file=sys.stderr)
    return buf


class FakeEngine:
    """One decode step at a time for every active request, as continuous batching does."""

    def __init__(self, args: argparse.Namespace, pinned: bool) -> None:
        self.args = args
        self.pinned = pinned
        self.random = random.Random(args.seed)
        self.streams: set[asyncio.Queue] = set()
        self.work = asyncio.Event()
        self.started = 0
        self.trace: list[dict] | None = None
        self.clock_us = 0.0

    def step_ms(self) -> tuple[float, float]:
        """(busy, idle) milliseconds of the next step; a bigger batch steps a little slower."""
        step = self.args.itl_ms * self.random.lognormvariate(0, self.args.jitter) * (1 + 0.01 * len(self.streams))
        busy = 0.85 * step
        idle = step - busy - (self.args.pin_speedup * step if self.pinned else 0.0)
        return busy, max(idle, 0.0)

    def record_step(self, busy_ms: float, idle_ms: float) -> None:
        """Kineto-shaped events for one step: what vLLM's torch profiler would have written on a GPU."""
        if self.trace is None:
            return
        t = self.clock_us
        if not self.pinned:
            # Unpinned: a pageable copy, which the driver stages through a synchronising bounce buffer.
            self.trace.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": t, "dur": 5})
        copy = f"Memcpy HtoD ({'Pinned' if self.pinned else 'Pageable'} -> Device)"
        self.trace.append({"ph": "X", "cat": "gpu_memcpy", "name": copy, "ts": t, "dur": 2})
        self.trace.append({"ph": "X", "cat": "kernel", "name": "fake_decode_step", "ts": t + 2, "dur": busy_ms * 1000})
        self.clock_us = t + 2 + (busy_ms + idle_ms) * 1000

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while True:
            if not self.streams:
                self.work.clear()
                await self.work.wait()
                deadline = loop.time()
            busy, idle = self.step_ms()
            deadline += (busy + idle) / 1000
            # The event loop wakes at whole milliseconds: sleep most of the step
            # there, and the last bit precisely, or every ITL comes out rounded.
            if deadline - loop.time() > 0.002:
                await asyncio.sleep(deadline - loop.time() - 0.002)
            time.sleep(max(0.0, deadline - loop.time()))
            if not self.streams:
                continue  # every request ended during the step: there was nothing to compute
            self.record_step(busy, idle)
            for stream in self.streams:
                stream.put_nowait(None)


async def health(request: web.Request) -> web.Response:
    if request.app["args"].stall == "health":
        await asyncio.Event().wait()
    return web.Response()


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": request.app["args"].model, "object": "model"}]})


async def completions(request: web.Request) -> web.StreamResponse:
    args, engine = request.app["args"], request.app["engine"]
    body = await request.json()
    if body.get("model") != args.model:
        return web.json_response({"error": {"message": f"model {body.get('model')!r} does not exist"}}, status=404)
    if args.stall == "completions":
        await asyncio.Event().wait()
    if args.stream is not None:
        return await MISBEHAVIOURS[args.stream](request, args.model)
    engine.started += 1
    dies = args.die_after is not None and engine.started > args.die_after
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    stream: asyncio.Queue = asyncio.Queue()
    engine.streams.add(stream)
    engine.work.set()
    try:
        tokens = int(body.get("max_tokens", 16))
        for i in range(tokens):
            await stream.get()
            if dies and i == tokens // 2:
                os._exit(3)  # the way a crashed engine goes: no goodbye to open streams
            chunk = {"object": "text_completion", "model": args.model, "choices": [{"index": 0, "text": f" t{i}"}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        engine.streams.discard(stream)  # its tokens are all out: the next step is not for it
        if (body.get("stream_options") or {}).get("include_usage"):
            prompt = body.get("prompt")
            usage = {"prompt_tokens": len(prompt) if isinstance(prompt, list) else 1, "completion_tokens": tokens}
            await response.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
    finally:
        engine.streams.discard(stream)
    return response


def _event(model: str, text: str) -> bytes:
    chunk = {"object": "text_completion", "model": model, "choices": [{"index": 0, "text": text}]}
    return f"data: {json.dumps(chunk)}\n\n".encode()


async def _streaming(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    return response


async def endless(request: web.Request, model: str) -> web.StreamResponse:
    """Tokens, well formed, for ever: never [DONE]."""
    response = await _streaming(request)
    tokens = itertools.count()
    while True:
        await response.write(_event(model, f" t{next(tokens)}"))
        await asyncio.sleep(0.001)


async def slowloris(request: web.Request, model: str) -> web.StreamResponse:
    """One token, then one byte of the next event every 0.2 s: never silent for long, never done."""
    response = await _streaming(request)
    await response.write(_event(model, " t0"))
    trickle = itertools.cycle(_event(model, " t1")[:-2])
    while True:
        await response.write(bytes([next(trickle)]))
        await asyncio.sleep(0.2)


async def malformed(request: web.Request, model: str) -> web.StreamResponse:
    """Events that are not JSON, then [DONE]."""
    response = await _streaming(request)
    await response.write(_event(model, " t0"))
    await response.write(b'data: {"choices": [{"text": " t1"\n\n')
    await response.write(b"data: [DONE]\n\n")
    return response


async def _tokens_then_usage(request: web.Request, model: str, completion_tokens: object) -> web.StreamResponse:
    """The tokens asked for, then a usage chunk whose count is ``completion_tokens``, then [DONE]."""
    body = await request.json()
    response = await _streaming(request)
    for i in range(int(body.get("max_tokens", 16))):
        await response.write(_event(model, f" t{i}"))
    usage = {"prompt_tokens": 1, "completion_tokens": completion_tokens}
    await response.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    return response


async def inflated(request: web.Request, model: str) -> web.StreamResponse:
    """A usage that claims far more tokens than the stream carried (a throughput of 1e300 tokens a second)."""
    return await _tokens_then_usage(request, model, 10**300)


async def uncounted(request: web.Request, model: str) -> web.StreamResponse:
    """A usage whose count is no number."""
    return await _tokens_then_usage(request, model, "lots")


async def redirect(request: web.Request, model: str) -> web.Response:
    """Completions are elsewhere: a redirect to another host."""
    raise web.HTTPTemporaryRedirect("http://192.0.2.1/v1/completions")


MISBEHAVIOURS = {
    "endless": endless,
    "slowloris": slowloris,
    "malformed": malformed,
    "inflated": inflated,
    "uncounted": uncounted,
    "redirect": redirect,
}


async def start_profile(request: web.Request) -> web.Response:
    request.app["engine"].trace = []
    return web.Response()


async def stop_profile(request: web.Request) -> web.Response:
    engine, directory = request.app["engine"], request.app["args"].profile_dir
    if directory is None:
        return web.json_response({"error": {"message": "profiling is off: start with --profile-dir"}}, status=400)
    Path(directory).mkdir(parents=True, exist_ok=True)
    path = Path(directory) / f"fake-{os.getpid()}-{time.time_ns()}.pt.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": engine.trace or []}, f)
    engine.trace = None
    return web.Response()


def make_app(args: argparse.Namespace) -> web.Application:
    app = web.Application()
    app["args"] = args
    app["engine"] = FakeEngine(args, pinned=os.environ.get(PIN_MEMORY.name) == "1")

    async def engine_loop(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(app["engine"].run())
        yield
        task.cancel()

    app.cleanup_ctx.append(engine_loop)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/start_profile", start_profile)
    app.router.add_post("/stop_profile", stop_profile)
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repro.bench.fakeserver", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", required=True, help="the name it serves")
    parser.add_argument("--itl-ms", type=float, default=10.0, help="mean decode step without pinned memory")
    parser.add_argument("--pin-speedup", type=float, default=0.12, help="fraction of a step saved with pin=1")
    parser.add_argument("--jitter", type=float, default=0.15, help="log-normal sigma of each step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile-dir", help="where /stop_profile writes its trace")
    parser.add_argument("--fail-start", action="store_true", help="exit with an error instead of serving")
    parser.add_argument("--die-after", type=int, help="crash in the middle of the request after this many")
    parser.add_argument("--stall", choices=["health", "completions"], help="never answer this endpoint")
    parser.add_argument("--stream", choices=list(MISBEHAVIOURS), help="answer completions with a stream like this")
    parser.add_argument("--linger", type=float, help="keep a child that exits this many seconds after being told to")
    args = parser.parse_args(argv)
    if args.fail_start:
        print("fake server: refusing to start (--fail-start)", file=sys.stderr)
        return 1
    locked = _lock_host_memory() if os.environ.get(PIN_MEMORY.name) == "1" else None
    if args.linger is not None:
        child = subprocess.Popen([sys.executable, "-c", LINGERING_CHILD, str(args.linger)])
        print(f"fake server: lingering child {child.pid}", file=sys.stderr, flush=True)
    # A stalled handler never finishes: do not wait long for it when told to stop.
    web.run_app(make_app(args), host=args.host, port=args.port, print=None, access_log=None, shutdown_timeout=1)
    del locked
    return 0


if __name__ == "__main__":
    sys.exit(main())
