"""A newer matrix from a URL (``--matrix https://...``): read within a size and a time, or refused in one line.

The URL is a person's own choice (the published Pages site, a runner's report), so redirects are followed as
urllib does, but nothing it sends is trusted: no more than ``LIMIT`` bytes are read, whatever its headers say,
no read waits longer than ``TIMEOUT``, and the whole transfer (connecting, the headers, the body) ends within
``DEADLINE``: a server that sends a byte every second would otherwise hold the doctor for as long as the file lasts.
An answer that is not HTTP is one line, as any other failure. A gzip answer (the server's ``Content-Encoding``,
or a ``.gz`` file as a static host serves it) is unpacked, and ``LIMIT`` holds for what it unpacks to: a small
answer that would unpack to gigabytes (a gzip bomb) is refused as soon as it passes the limit. What arrives is
read as any other ``--matrix`` file.
"""

from __future__ import annotations

from collections.abc import Callable

from matrix.errors import MatrixError

# The network's modules (urllib.request, http.client, ssl: a third of the doctor's own start) are imported by
# the functions that fetch: the doctor imports this module for --matrix's help and is_url, and most runs fetch
# nothing.

MIB = 1 << 20
# The published compat.json of 13 releases is 9 MiB and each release adds under 1 MiB.
LIMIT = 32 * MIB
TIMEOUT = 20.0
# The 9 MiB matrix over a slow link (1 Mbit/s) takes about 75 s.
DEADLINE = 120.0
_SCHEMES = ("http://", "https://")
_GZIP_MAGIC = b"\x1f\x8b"


def is_url(text: str) -> bool:
    return text.lower().startswith(_SCHEMES)


class FetchError(ValueError):
    """What went wrong, in a few words: the caller's line names the URL."""


def fetch(url: str, limit: int = LIMIT, timeout: float = TIMEOUT, deadline: float = DEADLINE) -> bytes:
    """The body at ``url``, at most ``limit`` bytes, each read within ``timeout`` seconds and all of it within
    ``deadline``; MatrixError otherwise."""
    again = "give a compat.json's URL (the published site's compat.json), or download it and pass its path"
    try:
        return _within(deadline, lambda: _read(url, limit, timeout))
    except FetchError as exc:
        raise MatrixError(f"--matrix {url}: {exc}: {again}") from None


def _within(deadline: float, read: Callable[[], bytes]) -> bytes:
    """What ``read`` returns or raises, if it ends within ``deadline`` seconds; else FetchError. The reader left
    behind is a daemon thread: the doctor ends at once with the error, and the connection with it."""
    import queue
    import threading

    done: queue.Queue[tuple[bytes, None] | tuple[None, BaseException]] = queue.Queue(maxsize=1)

    def run() -> None:
        try:
            done.put((read(), None))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, raised there
            done.put((None, exc))

    threading.Thread(target=run, name="wslpin-doctor-fetch", daemon=True).start()
    try:
        body, error = done.get(timeout=deadline)
    except queue.Empty:
        raise FetchError(f"the whole answer did not arrive within {deadline:g} s") from None
    if error is not None:
        raise error
    assert body is not None
    return body


def _read(url: str, limit: int, timeout: float) -> bytes:
    import http.client
    import socket
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"User-Agent": "wslpin-doctor", "Accept-Encoding": "gzip"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http(s) only: is_url
            if not response.geturl().lower().startswith(_SCHEMES):
                raise FetchError("it redirected to something other than http(s)")
            chunks, size = [], 0
            while size <= limit:
                chunk = response.read(min(MIB, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            encoding = response.headers.get("Content-Encoding", "").strip().lower()
            announced = response.headers.get("Content-Length", "")
            # http.client hands back a body cut short as if it were whole: a matrix cut short is none.
            if announced.isdigit() and size < int(announced) <= limit:
                raise FetchError(f"it ended after {size} of the {announced} bytes it announced")
    except urllib.error.HTTPError as exc:
        raise FetchError(f"the server answered {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, (socket.timeout, TimeoutError)):
            raise FetchError(f"no answer within {timeout:g} s") from None
        raise FetchError(f"cannot be reached ({reason})") from None
    except (socket.timeout, TimeoutError):
        raise FetchError(f"no answer within {timeout:g} s") from None
    except http.client.HTTPException as exc:  # not HTTP: a status line, a header or a length it cannot read
        raise FetchError(f"did not answer in HTTP ({type(exc).__name__}: {str(exc)[:80]!r})") from None
    except (OSError, ValueError) as exc:  # a connection reset, a malformed URL or response
        raise FetchError(f"cannot be read ({exc})") from None
    if size > limit:
        raise FetchError(f"it sent more than the {limit // MIB} MiB a matrix may be")
    return _unpacked(b"".join(chunks), encoding, limit)


def _unpacked(body: bytes, encoding: str, limit: int) -> bytes:
    """The matrix ``body`` carries: gunzipped where the server or the file packed it, at most ``limit`` bytes."""
    if encoding not in ("", "identity", "gzip", "x-gzip"):
        raise FetchError(f"it sent the matrix packed as {encoding!r}, which the doctor cannot unpack (ask for gzip)")
    if encoding in ("", "identity") and not body.startswith(_GZIP_MAGIC):
        return body
    import zlib

    unpacking = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = unpacking.decompress(body, limit + 1)
    except zlib.error as exc:
        raise FetchError(f"its gzip answer cannot be unpacked ({exc})") from None
    if len(data) > limit:
        raise FetchError(f"its gzip answer unpacks to more than the {limit // MIB} MiB a matrix may be")
    if not unpacking.eof:
        raise FetchError("its gzip answer is cut short")
    return data
