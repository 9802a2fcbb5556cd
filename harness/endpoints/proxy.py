"""The metering proxy: every model call of a stage passes through it and lands in the ledger.

A real HTTP server on loopback between the agents (and the judge) and the
upstream endpoint. It forwards each request body unchanged, adds the upstream
key (clients only ever hold a placeholder, so the key never reaches a record or
a log), and appends two durable ledger lines per call: `request` before
forwarding and `response` after, so a call cut off by a crash is still visible.
Calls are tagged by the client with the `X-Run-Tag`, `X-Attempt` and
`X-Role` headers (agent, asked agent, judge).

The proxy, not the client, keeps a call's deadline (`X-Deadline-S`, the client's timeout for the
attempt, as wall time on the upstream): it answers 504 when the upstream is late and the client
waits for that answer, so every reply the ledger records as answered reached the run that asked
(a client that gave up first would leave a billed reply in the ledger that no record has). Once
`stopping` is set (the stage stops), no request is forwarded any more.

Money is decided here and only here: with a spending cap (`budget`: harness.run.budget.Budget), each
call's `request` line carries its worst case (`worst`: the prompt estimate and `max_tokens`, or the
context left when the request sets none, or `DEFAULT_OUTPUT` when the context is unknown), and a call
whose worst case would take the stage's spend past the cap is not forwarded: the proxy answers 503
`budget_reached` (BUDGET). A reply the upstream may have billed but the proxy never received whole
(a timeout, a reset) is marked `unanswered`, and the cap keeps it at its worst case.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote

import httpx

from harness.endpoints.usage import DEFAULT_OUTPUT, chars_count, event_stream, max_tokens_of, request_text, usage_split
from harness.records.ledger import Ledger

TAG, ATTEMPT, ROLE, DEADLINE = "X-Run-Tag", "X-Attempt", "X-Role", "X-Deadline-S"
UNREACHABLE = "upstream_unreachable"  # error type of a 502 when the upstream refused the connection
STOPPING = "stage_stopping"  # error type of the 503 the proxy answers once the stage stops (nothing forwarded)
BUDGET = "budget_reached"  # error type of the 503 the proxy answers when the call could pass the spending cap
STREAMED = "an event stream to a plain request (stream: false)"
_HOP = {"host", "content-length", "authorization", "connection", "accept-encoding",
        TAG.lower(), ATTEMPT.lower(), ROLE.lower(), DEADLINE.lower()}
# clients that cannot set headers (a library's own OpenAI client, e.g. Mem0) put the tag in the path
_TAGGED = re.compile(r"^/tag/([^/]+)/(\d+)/([^/]+)(/.*)$")


def tagged_url(base_url: str, tag: str, attempt: int, role: str) -> str:
    """The proxy's base URL with tag, attempt and role in the path: http://h:p/tag/T/A/R/v1."""
    root = base_url.rstrip("/").removesuffix("/v1")
    return f"{root}/tag/{quote(tag, safe='')}/{int(attempt)}/{quote(role, safe='')}/v1"


def reply_error(data) -> str | None:
    """Why a 200 body is not a usable chat completion (an error object, no choices, a first choice without
    a message object), or None."""
    if not isinstance(data, dict):
        return f"a 200 body that is not a JSON object: {str(data)[:120]!r}"
    choices = data.get("choices")
    if choices:
        first = choices[0] if isinstance(choices, list) else None
        if isinstance(first, dict) and isinstance(first.get("message"), dict):
            return None
        return f"a 200 reply whose choices carry no message: {str(choices)[:120]!r}"
    err = data.get("error")
    if err is not None:
        what = err.get("message") or err.get("type") or err.get("code") if isinstance(err, dict) else err
        return f"a 200 body carrying an error: {str(what)[:200]}"
    return "a 200 reply with no choices"


class MeteringProxy:
    """`with MeteringProxy(upstream, ledger, api_key) as p: p.base_url` (an OpenAI base URL)."""

    def __init__(self, upstream: str, ledger: Ledger, api_key: str | None = None, timeout_s: float = 600.0,
                 model_name: str = "", context: int | None = None, count=chars_count, budget=None):
        self.budget = budget  # the stage's spending cap (harness.run.budget.Budget), or None
        self.upstream = upstream.rstrip("/")
        self.context, self.count = context, count  # how replies' usage is checked and estimated (usage_split)
        self.ledger = ledger
        self.model_name = model_name
        self._key = api_key
        self.timeout_s = timeout_s
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=10.0))
        self.stopping = threading.Event()  # set when the stage stops: the driver's abort (harness.run.driver)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "MeteringProxy":
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms stall

            def log_message(self, *args):
                pass

            def do_POST(self):
                proxy._forward(self, "POST")

            def do_GET(self):
                proxy._forward(self, "GET")

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="metering-proxy", daemon=True)  # stop() returns at once
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self._client.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _usage(self, req: dict, payload: bytes) -> dict:
        """A 200 reply's ledger fields: its usage checked (estimated where a count is not one), the model
        that answered, and `error` when the body is not a usable completion. Never raises: whatever
        the upstream sent, the client gets its answer and the ledger its line."""
        try:
            data = json.loads(payload)
        except (json.JSONDecodeError, UnicodeDecodeError):
            stream = event_stream(payload.decode("utf-8", "replace"))
            if stream is None:
                return {"error": "unparsable upstream body"}
            # an event stream to a plain request: no completion, but billed (no usage chunk: estimated)
            return {"error": STREAMED, **usage_split(stream[0], req.get("messages"), req.get("tools"), stream[1],
                                                      self.context, self.count, max_tokens_of(req))}
        try:
            out: dict = {}
            problem = reply_error(data)
            if problem:
                out["error"] = problem
            usage = data.get("usage") if isinstance(data, dict) else None
            if problem is None or (isinstance(usage, dict) and usage):  # a bad reply with usage was billed
                choices = data.get("choices")
                first = choices[0] if isinstance(choices, list) and choices else None
                reply = first.get("message") if isinstance(first, dict) else None
                if isinstance(first, dict) and isinstance(first.get("finish_reason"), str):
                    out["finish"] = first["finish_reason"]
                out.update(usage_split(usage, req.get("messages"), req.get("tools"), reply or {},
                                       self.context, self.count, max_tokens_of(req)))
            out["response_model"] = data.get("model") if isinstance(data, dict) else None
            if isinstance(data, dict) and data.get("adapter"):
                out["adapter"] = data["adapter"]
            return out
        except Exception as exc:  # noqa: BLE001 - a body no one foresaw is a flagged line, not a dead thread
            return {"error": f"unreadable upstream body: {type(exc).__name__}: {exc}"[:300]}

    def worst(self, req: dict) -> dict:
        """A call's worst case in tokens: its prompt (estimated as usage_split estimates) and the most it may
        answer (max_tokens or max_completion_tokens; else the context left; else DEFAULT_OUTPUT)."""
        try:
            prompt = self.count(request_text(req.get("messages"), req.get("tools"))) if req.get("messages") else 0
        except Exception:  # noqa: BLE001 - a body no one foresaw: its size in characters
            prompt = len(json.dumps(req, default=str))
        asked = max_tokens_of(req)
        if asked:
            output = asked
        elif self.context:
            output = max(self.context - prompt, 1)
        else:
            output = DEFAULT_OUTPUT
        return {"prompt": int(prompt), "output": int(output)}

    def _forward(self, h: BaseHTTPRequestHandler, method: str) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        path = h.path
        tag = h.headers.get(TAG, "")
        attempt = int(h.headers.get(ATTEMPT) or 0)
        role = h.headers.get(ROLE, "agent")
        m = _TAGGED.match(path)
        if m:
            tag, attempt, role, path = unquote(m[1]), int(m[2]), unquote(m[3]), m[4]
        path = path[3:] if path.startswith("/v1") else path
        url = self.upstream + path
        call_id = uuid.uuid4().hex
        model = self.model_name
        try:
            req = json.loads(body) if body else {}
        except (json.JSONDecodeError, UnicodeDecodeError):
            req = {}
        req = req if isinstance(req, dict) else {}
        model = req.get("model", model)
        base = {"call": call_id, "tag": tag, "attempt": attempt, "role": role, "model": model, "path": path}
        if method == "POST" and self.stopping.is_set():
            return _reply(h, 503, json.dumps({"error": {"message": "the stage is stopping: the call was not sent",
                                                        "type": STOPPING}}).encode(), "application/json", None)
        if method == "POST":
            line = {**base, "event": "request", "ts": _now(), "sent": _sent(body), "worst": self.worst(req)}
            refused = self.budget.admit(self.ledger, line) if self.budget is not None else self.ledger.append(line)
            if refused:
                return _reply(h, 503, json.dumps({"error": {"message": refused, "type": BUDGET}}).encode(),
                              "application/json", None)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        t0 = time.perf_counter()
        status, payload, ctype, err, etype = 502, b"", "application/json", None, "proxy_error"
        retry_after, unanswered = None, False
        try:
            status, payload, ctype, retry_after = self._send(method, url, body, headers, _deadline(h))
        except httpx.TimeoutException as exc:
            status, err, unanswered = 504, f"upstream timeout: {type(exc).__name__}", True
        except (httpx.ConnectError, httpx.UnsupportedProtocol) as exc:  # nothing listens there
            status, err, etype = 502, f"cannot connect to {self.upstream}: {exc}", UNREACHABLE
        except httpx.HTTPError as exc:  # a reset, a body cut off: the request was sent and may be billed
            status, err, unanswered = 502, f"upstream error: {type(exc).__name__}: {exc}", True
        latency = time.perf_counter() - t0
        if err:
            payload = json.dumps({"error": {"message": err, "type": etype}}).encode()
        if method == "POST":
            entry = {**base, "event": "response", "ts": _now(), "status": status, "latency_s": round(latency, 4)}
            if status == 200:
                entry.update(self._usage(req, payload))
            else:
                entry["error"] = err or payload[:300].decode("utf-8", "replace")
            if unanswered:
                entry["unanswered"] = True  # billed maybe, never received: the cap keeps its worst case
            self.ledger.append(entry)
        _reply(h, status, payload, ctype, retry_after)

    def _send(self, method: str, url: str, body: bytes, headers: dict, deadline: float | None):
        """(status, body, content type, Retry-After) of the upstream's answer; with a deadline, the whole
        answer within that many seconds of wall time (a body trickling past it is a timeout too)."""
        if deadline is None:
            resp = self._client.request(method, url, content=body, headers=headers)
            return resp.status_code, resp.content, resp.headers.get("content-type", "application/json"), \
                resp.headers.get("retry-after")
        limit = min(self.timeout_s, deadline)
        end = time.monotonic() + limit
        with self._client.stream(method, url, content=body, headers=headers,
                                 timeout=httpx.Timeout(limit, connect=min(10.0, limit))) as resp:
            chunks, got = [], 0
            try:
                whole = int(resp.headers.get("content-length") or -1)
            except ValueError:
                whole = -1
            for chunk in resp.iter_bytes():
                chunks.append(chunk)
                got += len(chunk)
                # late with more to come is a timeout; a reply held whole (billed) is the call's answer
                if time.monotonic() > end and got != whole:
                    raise httpx.ReadTimeout(f"no whole reply within {limit:g} s")
            return resp.status_code, b"".join(chunks), resp.headers.get("content-type", "application/json"), \
                resp.headers.get("retry-after")


def _deadline(h: BaseHTTPRequestHandler) -> float | None:
    try:
        value = float(h.headers.get(DEADLINE) or "")
    except ValueError:
        return None
    return value if value > 0 else None


def _reply(h: BaseHTTPRequestHandler, status: int, payload: bytes, ctype: str, retry_after: str | None) -> None:
    h.send_response(status)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(payload)))
    if retry_after:  # a 429/503's wait reaches the client (harness.endpoints.client.retry_after)
        h.send_header("Retry-After", retry_after)
    h.end_headers()
    h.wfile.write(payload)


def _sent(body: bytes) -> dict | None:
    """What a request sent besides its messages: parameter names and values, tools by name."""
    try:
        req = json.loads(body) if body else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(req, dict):
        return None
    out = {k: v for k, v in req.items() if k not in ("messages", "model", "tools")}
    if req.get("tools"):
        out["tools"] = [(t.get("function") or {}).get("name") for t in req["tools"] if isinstance(t, dict)]
    return out


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # socketserver's default backlog of 5 refuses bursts of concurrent agents + writers


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")
