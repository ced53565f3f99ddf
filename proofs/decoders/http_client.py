"""The transport under proofs/decoders/http_decoder.py: timeouts, bounded retries, a progress line.

Every request a certify run sends goes through one HTTPClient, so the rules hold everywhere:

- a request has `timeout_s` (certify's --http-timeout) to be answered; a request that times
  out is not retried (the server is stuck or slower than the limit, and a retry would queue
  the same work again) and fails naming the server, the request and the limit;
- a connection error (refused, reset, closed before answering) and HTTP 5xx are retried up
  to `retries` times, `backoff_s` doubling after each; HTTP 4xx is the request's fault and
  fails at once (the server's message quoted);
- once a request found the server unreachable through all its retries, later requests that
  cannot reach it fail at their first try, until a request is answered again: a server that
  died mid-run is named at once by every request still to come, not after a backoff each
  (thousands of them: a check's requests are skipped one by one, proofs/decoders/draw.py);
- while requests are outstanding, `say` (refdec.progress.Progress: stderr by default) gets
  one line every `progress_every_s`: "http: 12 requests in flight, 340/2000 samples done,
  oldest 31 s", so a slow server is never a silent wait;
- `api_key` goes as `Authorization: Bearer KEY` (vLLM's --api-key and SGLang's check exactly
  that header).

The connection pool, the request threads and the progress thread belong to the process that
made them: a forked certify worker (--jobs, proofs/run/jobs.py) inherits neither a usable
socket nor live threads, so each process makes its own on first use.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from refdec.errors import LoopcertError
from refdec.progress import Progress

TIMEOUT_S = 60.0  # per request
RETRIES = 3  # after the first try: connection errors and HTTP 5xx only
BACKOFF_S = 0.5  # before the first retry; doubles after each
PROGRESS_EVERY_S = 10.0
CONCURRENCY = 16  # requests in flight


def stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def httpx_module():
    try:
        import httpx
    except ImportError:
        raise LoopcertError("--decoder http://...: needs httpx: pip install 'loopcert[serve]'") from None
    return httpx


@dataclass(frozen=True)
class Transport:
    """How requests are sent (certify's --http-timeout and --api-key; the rest fixed defaults)."""

    timeout_s: float = TIMEOUT_S
    retries: int = RETRIES
    backoff_s: float = BACKOFF_S
    api_key: str | None = None
    concurrency: int = CONCURRENCY
    progress_every_s: float = PROGRESS_EVERY_S

    def __post_init__(self):
        t = self.timeout_s
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < float("inf"):
            raise LoopcertError(f"--http-timeout must be a number of seconds > 0, got {t!r}")
        if not isinstance(self.retries, int) or self.retries < 0:
            raise LoopcertError(f"HTTP retries must be an int >= 0, got {self.retries!r}")
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise LoopcertError(f"HTTP concurrency must be an int >= 1, got {self.concurrency!r}")
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key.strip()):
            raise LoopcertError("--api-key (or LOOPCERT_API_KEY) must not be empty")


class Answered(LoopcertError):
    """The server answered a request with a status other than 200 or 5xx (those are retried)."""

    def __init__(self, message: str, status: int, text: str):
        super().__init__(message)
        self.status, self.text = status, text


class HTTPClient:
    """GET and POST JSON against one server under the module's rules; thread-safe."""

    def __init__(self, base_url: str, transport: Transport = Transport(), say: Progress = stderr_line):
        self.base_url = base_url.rstrip("/")
        self.transport, self.say = transport, say
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._flight: dict[int, float] = {}  # request id -> its start (time.monotonic)
        self._samples = [0, 0]  # (done, asked) of the current batch
        self._pid = None
        self._client_override = None
        key = transport.api_key
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._gone = False  # a request found the server unreachable through all its retries

    # -- per-process resources -------------------------------------------------------------------
    def _connect(self) -> None:
        httpx = httpx_module()
        t = self.transport
        self._pid = os.getpid()
        self._client = httpx.Client(
            timeout=t.timeout_s,
            limits=httpx.Limits(max_connections=t.concurrency, max_keepalive_connections=t.concurrency),
        )
        self._threads = ThreadPoolExecutor(max_workers=t.concurrency, thread_name_prefix="loopcert-http")
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="loopcert-http-progress", daemon=True)
        self._ticker.start()

    def _fresh(self) -> None:
        if self._pid != os.getpid():
            self._connect()

    @property
    def client(self):
        self._fresh()
        return self._client_override or self._client

    @client.setter
    def client(self, client) -> None:  # tests: an httpx.Client over a MockTransport (fork-safe)
        self._fresh()
        self._client_override = client

    @property
    def pool(self) -> ThreadPoolExecutor:
        self._fresh()
        return self._threads

    # -- progress --------------------------------------------------------------------------------
    def begin(self, samples: int) -> None:
        """A batch of `samples` starts: the progress line counts its samples."""
        with self._lock:
            self._samples = [0, samples]

    def _tick(self) -> None:
        # time.monotonic, never perf_counter: this thread lives as long as the client, and the
        # speed protocol's tests replace perf_counter with a counting clock (every read counts)
        last = time.monotonic()
        while not self._stop.wait(min(1.0, self.transport.progress_every_s)):
            now = time.monotonic()
            with self._lock:
                starts = list(self._flight.values())
                done, asked = self._samples
            if not starts:
                last = now
            elif now - last >= self.transport.progress_every_s:
                last = now
                self.say(
                    f"http: {len(starts)} requests in flight, {done}/{asked} samples done, "
                    f"oldest {now - min(starts):.0f} s ({self.base_url})"
                )

    # -- requests --------------------------------------------------------------------------------
    def get(self, path: str, optional: bool = False) -> dict | None:
        """GET base_url + path -> its JSON; optional: None when the server has no such path (404,
        405, or not JSON), for probing which server this is."""
        r = self._send("GET", path, None, f"GET {path}", samples=0, absent_ok=optional)
        return r

    def get_text(self, path: str) -> str | None:
        """GET base_url + path -> its text (a Prometheus /metrics page); None when the server has no
        such path or answers anything but 200 (optional, as `get(optional=True)`)."""
        try:
            return self._send("GET", path, None, f"GET {path}", samples=0, absent_ok=True, text=True)
        except LoopcertError:
            return None

    def post(self, path: str, body: dict, what: str, samples: int = 0) -> dict | list:
        """POST the JSON body -> the JSON answer; `what` names the request in every error."""
        return self._send("POST", path, body, what, samples)

    def _send(self, method, path, body, what, samples, absent_ok=False, text=False):
        httpx = httpx_module()
        t = self.transport
        url = self.base_url + path
        rid = next(self._ids)
        with self._lock:
            self._flight[rid] = time.monotonic()
        try:
            last, unreachable, tries = None, False, 0
            for attempt in range(t.retries + 1):
                if attempt and unreachable and self._gone:
                    break  # unreachable before this request too: not retried (module docstring)
                if attempt:
                    time.sleep(t.backoff_s * 2 ** (attempt - 1))
                tries += 1
                try:
                    r = self.client.request(method, url, json=body, headers=self._headers)
                except httpx.TimeoutException:
                    raise LoopcertError(
                        f"{self.base_url}: {what}: no answer within {t.timeout_s:g} s "
                        "(--http-timeout); the server is stuck or slower than the limit"
                    ) from None
                except httpx.TransportError as e:
                    last, unreachable = (f"{type(e).__name__}: {e}" if str(e) else type(e).__name__), True
                    continue
                if r.status_code >= 500:
                    last, unreachable = f"HTTP {r.status_code}: {r.text[:300]}", False
                    continue
                if r.status_code != 200:
                    if absent_ok and r.status_code in (404, 405):
                        return None
                    raise Answered(
                        f"{self.base_url}: {what} answered HTTP {r.status_code}: {r.text[:300]}",
                        r.status_code,
                        r.text[:300],
                    )
                self._gone = False
                if text:
                    return r.text
                try:
                    out = r.json()
                except ValueError:
                    if absent_ok:
                        return None
                    raise LoopcertError(
                        f"{self.base_url}: {what} answered HTTP 200 with no JSON: {r.text[:200]}"
                    ) from None
                with self._lock:
                    self._samples[0] += samples
                return out
            retried = "connection errors and HTTP 5xx are retried"
            if unreachable and self._gone and tries == 1:
                retried = "not retried: the server was unreachable through an earlier request's retries"
            self._gone = self._gone or unreachable
            raise LoopcertError(
                f"{self.base_url}: {'cannot reach the server: ' * unreachable}{what} failed {tries} "
                f"time{'s' * (tries > 1)} ({retried}); last error: {last}"
            )
        finally:
            with self._lock:
                del self._flight[rid]

    def close(self) -> None:
        if self._pid == os.getpid():
            self._stop.set()
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._client.close()
        self._pid = None
