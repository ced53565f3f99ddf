"""How much a client may send `loopcert serve`, and for how long (`--max-body-bytes`,
`--read-timeout`).

uvicorn 0.54 bounds neither a request body nor the time a client takes to send one (its
`timeout_keep_alive` only covers the idle time between requests), so:

- BodyLimits (ASGI middleware) reads each request's body before the app sees it: a declared
  Content-Length over the limit is a 413 before a byte of the body is read; a body that grows
  past it (chunked, or a client that lies) is cut off with a 413 as soon as it does; a body not
  complete within the read timeout of its headers is a 408. Each of these answers closes the
  connection (the unread rest of the body cannot be skipped). The body is then replayed to the
  app, which sees the client's disconnects as before.
- HeaderTimeoutH11 (uvicorn's h11 protocol) closes a connection that has not sent a complete
  request head within the read timeout of connecting or of its previous answer, so a client that
  trickles headers (or connects and sends nothing) cannot hold a connection open.
"""

from __future__ import annotations

import asyncio

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from uvicorn.protocols.http.h11_impl import H11Protocol

from loopcert.serve import MAX_BODY_BYTES, READ_TIMEOUT_S
from loopcert.serve.api_errors import body


class TooLarge(Exception):
    pass


class BodyLimits:
    """ASGI middleware: each request's body, bounded in size and read time, before the app."""

    def __init__(self, app, max_body_bytes: int = MAX_BODY_BYTES, read_timeout_s: float = READ_TIMEOUT_S):
        self.app, self.max_body_bytes, self.read_timeout_s = app, max_body_bytes, read_timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            return await self._too_large(scope, send, f"a body of {int(declared)} bytes (Content-Length)")
        try:
            data = await asyncio.wait_for(self._read(receive), self.read_timeout_s)
        except TooLarge:
            return await self._too_large(scope, send, f"a body of more than {self.max_body_bytes} bytes")
        except TimeoutError:
            message = f"the request body did not arrive within {self.read_timeout_s:g} s (--read-timeout)"
            return await answer(scope, send, 408, message, "timeout")
        if data is None:
            return  # the client went away mid-body: nobody to answer
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read(self, receive) -> bytes | None:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _too_large(self, scope, send, what: str) -> None:
        message = f"{what} exceeds this server's limit of {self.max_body_bytes} bytes (--max-body-bytes)"
        await answer(scope, send, 413, message, "body_too_large")


async def answer(scope, send, status: int, message: str, code: str) -> None:
    """An OpenAI error about the body, closing the connection (the rest of the body is unread)."""
    response = JSONResponse(body(message, "body", "invalid_request_error", code), status)
    response.headers["connection"] = "close"

    async def gone():
        return {"type": "http.disconnect"}

    await response(scope, gone, send)


class HeaderTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol; a connection whose next request head is not complete within
    `read_timeout_s` is closed (module docstring). Set the class attribute before serving."""

    read_timeout_s: float = READ_TIMEOUT_S

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def _arm(self) -> None:
        waiting_for = self.cycle  # a new request head replaces the cycle
        self.loop.call_later(self.read_timeout_s, self._expire, waiting_for)

    def _expire(self, waiting_for) -> None:
        idle = self.cycle is waiting_for and (self.cycle is None or self.cycle.response_complete)
        if idle and not self.transport.is_closing():
            self.transport.close()
