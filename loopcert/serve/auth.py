"""`loopcert serve --api-key`: every endpoint but /health wants `Authorization: Bearer KEY`.

The header is the one the `openai` client sends (its `api_key`); the scheme is matched whatever its
case (`bearer KEY` too: HTTP auth schemes are case-insensitive), the key exactly. A request without
it, or with another key, is a 401 with an OpenAI error body, before its body is read. The comparison hashes
both sides first, so that it takes the same time whatever the key sent (its length included).
/health stays open: load balancers and `loopcert.serve.process` probe it without a key.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress

from starlette.datastructures import Headers
from starlette.responses import JSONResponse

from loopcert.serve.api_errors import body

OPEN_PATHS = frozenset({"/health"})
LOOPBACK_NAMES = frozenset({"localhost"})


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


class APIKeyMiddleware:
    """ASGI middleware: requests to anything but OPEN_PATHS need the key."""

    def __init__(self, app, key: str):
        self.app = app
        self._want = _digest(key)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        got = Headers(scope=scope).get("authorization", "")
        scheme, _, token = got.strip().partition(" ")
        # RFC 9110 section 11.1: the scheme is case-insensitive ("bearer KEY" is Bearer KEY); the
        # key is not, and is compared in constant time
        ok = hmac.compare_digest(_digest(token.lstrip(" ")), self._want)
        if ok and scheme.lower() == "bearer":
            return await self.app(scope, receive, send)
        message = (
            "missing API key: send the header 'Authorization: Bearer KEY' (the openai client's api_key)"
            if not got
            else "incorrect API key in the Authorization header"
        )
        err = body(message, "authorization", "invalid_request_error", "invalid_api_key")
        response = JSONResponse(err, status_code=401, headers={"www-authenticate": "Bearer"})
        await response(scope, receive, send)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost: only this machine can connect."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, key: str | None) -> str | None:
    """The one line `loopcert serve` prints to stderr when it listens beyond this machine with no
    key; None when it does not."""
    if key or is_loopback(host):
        return None
    return (
        f"loopcert serve: WARNING: listening on {host} without an API key: anyone who can reach "
        "this address can use the model (pass --api-key KEY or set LOOPCERT_API_KEY)"
    )
