"""A newer matrix from a URL (``--matrix https://...``): read within a size and a time, or refused in one line.

The URL is a person's own choice (the published Pages site, a runner's report), so redirects are followed as
urllib does, but nothing it sends is trusted: no more than ``LIMIT`` bytes are read, whatever its headers say,
and no read waits longer than ``TIMEOUT``. What arrives is then read as any other ``--matrix`` file.
"""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

from matrix.errors import MatrixError

MIB = 1 << 20
# The published compat.json of 13 releases is 9 MiB and each release adds under 1 MiB.
LIMIT = 32 * MIB
TIMEOUT = 20.0
_SCHEMES = ("http://", "https://")


def is_url(text: str) -> bool:
    return text.lower().startswith(_SCHEMES)


class FetchError(ValueError):
    """What went wrong, in a few words: the caller's line names the URL."""


def fetch(url: str, limit: int = LIMIT, timeout: float = TIMEOUT) -> bytes:
    """The body at ``url``, at most ``limit`` bytes, each read within ``timeout`` seconds; MatrixError otherwise."""
    again = "give a compat.json's URL (the published site's compat.json), or download it and pass its path"
    try:
        return _read(url, limit, timeout)
    except FetchError as exc:
        raise MatrixError(f"--matrix {url}: {exc}: {again}") from None


def _read(url: str, limit: int, timeout: float) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "wslpin-doctor", "Accept-Encoding": "identity"})
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
    except urllib.error.HTTPError as exc:
        raise FetchError(f"the server answered {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, (socket.timeout, TimeoutError)):
            raise FetchError(f"no answer within {timeout:g} s") from None
        raise FetchError(f"cannot be reached ({reason})") from None
    except (socket.timeout, TimeoutError):
        raise FetchError(f"no answer within {timeout:g} s") from None
    except (OSError, ValueError) as exc:  # a connection reset, a malformed URL or response
        raise FetchError(f"cannot be read ({exc})") from None
    if size > limit:
        raise FetchError(f"it sent more than the {limit // MIB} MiB a matrix may be")
    return b"".join(chunks)
