"""The one scripted OpenAI-compatible upstream, for the rehearsal and the tests (not a model).

ScriptedUpstream is the HTTP side every fake shares: real HTTP on loopback, GET /v1/models,
POST answered by the subclass's `respond`, the chat-completion envelope, error bodies and
DeepSeek-style usage fields. Two upstreams are built on it:

* FakeModel: the tests' scripted server (tests/fake_model.py re-exports it). Its policy:
  with tools offered and no tool result yet in the conversation, it calls the first tool (a
  search gets the user's question as query); otherwise it answers; `script` replaces the
  policy. Faults come from a seeded draw (429, 500, or a hang longer than the client's
  timeout) or from an explicit schedule (the first requests) or `always` (every later
  request): also 401, 403, 404, a 200 reply with no choices ("empty"), a 200 body that
  is not JSON ("nonjson"), 503 ("503"), a 200 carrying an error object ("error200"), credit
  gone ("quota": OpenAI's 429 insufficient_quota; "402": DeepSeek's), transport faults
  ("reset": headers, then the connection reset; "drip": a body a byte at a time for hang_s;
  "html500"; "empty200"; "sse": an event stream to a plain request; "late": the reply in two pieces hang_s apart, after hang_s). `dies_with` is the
  fault of every request once the runs began (a server that passed the preflight, then
  died), or once `dies_after` run requests were answered (dying mid-stage). `stall` holds a
  reply's body until an event (a reply still being sent when the client's timeout passed). `ollama_ctx` serves Ollama's /api/ps and /api/show with that context. Usage numbers derive from the request size (half of the prompt a
  cache hit), so token accounting can be checked exactly; every request is kept.
* FakeUpstream: the rehearsal's latency-simulating upstream (bench/rehearsal.py), below.

FakeUpstream is not a model: a seeded stand-in for a hosted API, so a paper-size stage can run
offline and the harness's own share of the wall time can be told apart from
waiting. Real HTTP on loopback. Per call:

* latency drawn from a lognormal (median `median_s`, sigma `sigma`: a heavy right
  tail, p99 about 5x the median), times `scale`; the draw is seeded by the request
  body and how often that body was seen, so it does not depend on arrival order;
* `p429` / `p5xx` of the calls fail (after a short wait) and the client retries;
* DeepSeek-style usage: `prompt_cache_hit_tokens` is the previous call of the same
  conversation (or, on a first call, a system prompt seen before) rounded down to
  64 tokens, `prompt_cache_miss_tokens` the rest;
* an agent offered tools calls one (`memory_search`, `session_search`, `terminal`, or
  whatever it is offered) 1-3 times, each later query taking words from the last tool
  result, then answers with words from the results; the judge (a prompt ending in
  "yes or no only") gets yes or no from the prompt's hash.

`stats()` says how long the upstream made its callers wait, per kind of call.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness.run.preflight import PROMPT as PREFLIGHT_PROMPT
from harness.runtime.sandbox import STORE_MOUNT

WORD = re.compile(r"[A-Za-z]{5,}")
STOP = {"about", "their", "there", "which", "would", "could", "should", "these", "those", "where", "while",
        "session", "round", "result", "results", "content", "messages", "assistant"}


def prompt_tokens(messages: list[dict], tools: list | None) -> int:
    return (len(json.dumps(messages)) + len(json.dumps(tools or []))) // 4


def _words(text: str, rng: random.Random, n: int) -> list[str]:
    ws = [w.lower() for w in WORD.findall(text or "") if w.lower() not in STOP]
    return rng.sample(ws, min(n, len(ws))) if ws else []


def is_preflight(req: dict) -> bool:
    """The stage's preflight call (harness.run.preflight): its user message after at most one system
    message (the runs', in JSON mode asking for JSON), answered "OK"."""
    msgs = req.get("messages") or []
    return bool(msgs) and msgs[-1] == {"role": "user", "content": PREFLIGHT_PROMPT} and len(msgs) <= 2 and \
        all(m.get("role") == "system" for m in msgs[:-1])


def completion(msg: dict, model: str, usage: dict, id_: str = "chatcmpl-fake") -> dict:
    """An OpenAI chat-completion body carrying one message."""
    return {"id": id_, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop"}],
            "usage": usage}


def usage_of(prompt: int, completion_tokens: int, hit: int) -> dict:
    """DeepSeek-style usage: prompt_cache_hit_tokens + prompt_cache_miss_tokens = prompt_tokens."""
    return {"prompt_tokens": prompt, "completion_tokens": completion_tokens, "total_tokens": prompt + completion_tokens,
            "prompt_cache_hit_tokens": hit, "prompt_cache_miss_tokens": prompt - hit}


def error(message: str, type_: str) -> dict:
    return {"error": {"message": message, "type": type_}}


class ScriptedUpstream:
    """A loopback OpenAI-compatible server; subclasses say what a POST gets (`respond`).

    `respond(handler, raw)` answers through handler.send(status, obj) or handler.send_raw(status,
    bytes, content type); `get(path)` gives a GET's (status, obj), by default the model list
    of `models`."""

    models: tuple[str, ...] = ("fake",)
    thread_name = "fake-upstream"

    def __init__(self):
        self._lock = threading.Lock()
        self._srv: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._srv.server_address[1]}/v1"

    def get(self, path: str) -> tuple[int, dict]:
        return 200, {"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]}

    def respond(self, handler, raw: bytes) -> None:
        raise NotImplementedError

    def start(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def send(self, status: int, obj: dict, headers: dict | None = None) -> None:
                self.send_raw(status, json.dumps(obj).encode(), "application/json", headers)

            def send_raw(self, status: int, body: bytes, ctype: str, headers: dict | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a hang longer than its timeout, a killed driver)

            def reset_after_headers(self) -> None:
                import socket
                import struct

                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.flush()
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True

            def drip(self, seconds: float) -> None:
                body = json.dumps(completion({"role": "assistant", "content": "x" * 4096}, "fake",
                                             usage_of(1, 1, 0))).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    end = time.monotonic() + seconds
                    for b in body:
                        if time.monotonic() > end:
                            break
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                        time.sleep(0.05)
                    self.close_connection = True
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def stall(self, body: bytes, until: threading.Event) -> None:
                """A 200 whose body comes a byte at a time until `until` is set, then the rest at once: a reply
                the client's timeout has passed while the server is still sending (and billing) it."""
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    i = 0
                    while not until.wait(0.05) and i < len(body) - 1:
                        self.wfile.write(body[i:i + 1])
                        self.wfile.flush()
                        i += 1
                    self.wfile.write(body[i:])
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def late(self, body: bytes, seconds: float) -> None:
                """A 200 that takes 2 x `seconds` in all, no read waiting longer than `seconds`: its headers and half
                the body after `seconds`, the rest `seconds` later (a whole reply just past a deadline)."""
                try:
                    time.sleep(seconds)
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[:len(body) // 2])
                    self.wfile.flush()
                    time.sleep(seconds)
                    self.wfile.write(body[len(body) // 2:])
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self):
                self.send(*fake.get(self.path))

            def do_POST(self):
                fake.respond(self, self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def handle_error(srv, request, client_address):  # a killed driver resets its connections: not news
            if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
                ThreadingHTTPServer.handle_error(srv, request, client_address)

        self._srv = type("Server", (ThreadingHTTPServer,), {"request_queue_size": 256, "handle_error": handle_error})(
            ("127.0.0.1", 0), Handler)
        self._srv.daemon_threads = True
        threading.Thread(target=self._srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
                         name=self.thread_name).start()
        return self

    def stop(self) -> None:
        if self._srv:
            self._srv.shutdown()
            self._srv.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# ------------------------------------------------------------------------------ the tests' scripted model

class FakeModel(ScriptedUpstream):
    """The tests' scripted server (see the module docstring)."""

    def __init__(self, delay_s: float = 0.0, p429: float = 0.0, p500: float = 0.0, phang: float = 0.0,
                 hang_s: float = 30.0, seed: int = 0, script=None, answer: str = "I don't know.",
                 schedule: list[str] | None = None, always: str | None = None, refuse=None, usage=False,
                 dies_with: str | None = None, ollama_ctx: int | None = None, dies_after: int = 0, stall=None,
                 max_model_len: int | None = None, ollama_lazy: bool = False):
        super().__init__()
        self.delay_s, self.p429, self.p500, self.phang, self.hang_s = delay_s, p429, p500, phang, hang_s
        self.rng = random.Random(seed)
        self.script = script  # optional callable(request_json) -> message dict, overrides the policy
        self.answer = answer
        self.schedule = list(schedule or [])  # faults for the first requests, in order ("ok" for none)
        self.always = always  # the fault of every request after the schedule (None: the seeded draw)
        # a real server's refusal for the requests it picks, preflight calls included (tests/endpoint_replies.py):
        # callable(request_json) -> (status, body[, headers]) or None
        self.refuse = refuse
        self.usage = usage  # callable(prompt_tokens) -> usage block, or None to leave it out; False: the default
        # the fault of every request once the stage's runs began (the first request that is not the
        # preflight's): a server that passes the preflight and then dies; None again: the server is fixed
        self.dies_with = dies_with
        self.dies_after = dies_after  # run requests answered normally before `dies_with` starts (dying mid-stage)
        self._died = False
        self.ollama_ctx = ollama_ctx  # serve Ollama's /api/ps and /api/show with this context (num_ctx)
        self.max_model_len = max_model_len  # list this context in GET /v1/models, as vLLM does
        # like a real Ollama: /api/ps lists the model (and its context) only once a request loaded it, and
        # /api/show names no num_ctx
        self.ollama_lazy = ollama_lazy
        # callable(request_json) -> threading.Event or None: the normal reply, its body held (a byte at a time)
        # until the event is set (a reply still coming when the client's timeout passed)
        self.stall = stall
        self.requests: list[dict] = []
        self.faults: list[str] = []

    def get(self, path: str) -> tuple[int, dict]:
        if path.rstrip("/").endswith("/models") and self.max_model_len:  # vLLM lists its context here
            return 200, {"object": "list", "data": [{"id": m, "object": "model", "max_model_len": self.max_model_len}
                                                    for m in self.models]}
        if path.rstrip("/").endswith("/api/ps") and self.ollama_ctx and (self.requests or not self.ollama_lazy):
            return 200, {"models": [{"name": m, "model": m, "context_length": self.ollama_ctx} for m in self.models]}
        return super().get(path)

    @property
    def run_requests(self) -> list[dict]:
        """The requests other than the preflight's (harness.run.preflight: one per request shape)."""
        return [r for r in self.requests if not is_preflight(r["body"])]

    def _next_fault(self, req: dict) -> str | None:
        if self.dies_with and (self._died or not is_preflight(req)):
            if not self._died and sum(not is_preflight(r["body"]) for r in self.requests) <= self.dies_after:
                return None
            self._died = True
            return self.dies_with
        if self.schedule:
            f = self.schedule.pop(0)
            return None if f == "ok" else f
        if self.always:
            return self.always
        roll = self.rng.random()
        for name, p in (("429", self.p429), ("500", self.p500), ("hang", self.phang)):
            if roll < p:
                return name
            roll -= p
        return None

    def policy(self, req: dict) -> dict:
        if self.script:
            return self.script(req)
        tools = req.get("tools") or []
        messages = req["messages"]
        if tools and req.get("tool_choice") != "none" and not any(m["role"] == "tool" for m in messages):
            fn = tools[0]["function"]
            props = fn.get("parameters", {}).get("properties", {})
            question = next(m["content"] for m in messages if m["role"] == "user")
            args = {"query": question} if "query" in props else {k: "x" for k in fn.get("parameters", {}).get("required", [])}
            return {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{len(self.requests)}", "type": "function",
                "function": {"name": fn["name"], "arguments": json.dumps(args)}}]}
        return {"role": "assistant", "content": self.answer}

    def respond(self, handler, raw: bytes) -> None:
        req = json.loads(raw)
        if handler.path.rstrip("/").endswith("/api/show") and self.ollama_ctx and self.ollama_lazy:
            return handler.send(200, {"parameters": "", "model_info": {"llama.context_length": 131072}})
        if handler.path.rstrip("/").endswith("/api/show") and self.ollama_ctx:  # Ollama's model info
            return handler.send(200, {"parameters": f"num_ctx {self.ollama_ctx}",
                                      "model_info": {"llama.context_length": 131072}})
        with self._lock:
            self.requests.append({"body": req, "headers": dict(handler.headers)})
            fault = self._next_fault(req)
        if fault:
            self.faults.append(fault)
        refused = self.refuse(req) if self.refuse else None
        if refused is not None:
            self.faults.append(f"refused {refused[0]}")
            return handler.send(refused[0], refused[1], refused[2] if len(refused) > 2 else None)
        if fault == "429":
            return handler.send(429, error("rate limited", "rate_limit"))
        if fault == "500":
            return handler.send(500, error("boom", "server_error"))
        if fault in ("401", "403", "404"):
            kind = {"401": "invalid_api_key", "403": "permission_denied", "404": "model_not_found"}[fault]
            return handler.send(int(fault), error(f"fake {kind}", kind))
        if fault == "empty":
            return handler.send(200, {"id": "x", "object": "chat.completion", "created": 0,
                                      "model": req.get("model", "fake"), "choices": []})
        if fault == "nonjson":
            return handler.send_raw(200, b"<html>gateway says hi</html>", "text/html")
        if fault == "reset":  # headers promise a body, then the connection is reset
            return handler.reset_after_headers()
        if fault == "drip":  # a 200 whose body trickles in a byte at a time, never finishing within hang_s
            return handler.drip(self.hang_s)
        if fault == "html500":  # a proxy's error page
            return handler.send_raw(500, b"<html><body><h1>500 Internal Server Error</h1></body></html>", "text/html")
        if fault == "empty200":  # a 200 with nothing in it
            return handler.send_raw(200, b"", "application/json")
        if fault == "sse":  # an event stream to a request that did not ask for one
            pt = prompt_tokens(req["messages"], req.get("tools"))
            chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": req.get("model", "fake"),
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": self.answer}}],
                     "usage": usage_of(pt, 7, 0) if self.usage is False else self.usage(pt)}
            if chunk["usage"] is None:  # `usage` may leave the usage chunk out (a stream without include_usage)
                chunk.pop("usage")
            return handler.send_raw(200, f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode(), "text/event-stream")
        if fault == "hang":
            time.sleep(self.hang_s)
            return handler.send(500, error("late", "server_error"))
        if fault == "503":  # a gateway in front of a dead backend
            return handler.send(503, error("no healthy upstream", "service_unavailable"))
        if fault == "error200":  # a gateway that wraps its failure in a 200
            return handler.send(200, {"error": {"message": "backend unavailable", "type": "server_error", "code": 503}})
        if fault == "quota":  # OpenAI: credit gone mid-stage
            return handler.send(429, {"error": {"message": "You exceeded your current quota, please check your plan "
                                                "and billing details.", "type": "insufficient_quota", "param": None,
                                                "code": "insufficient_quota"}})
        if fault == "402":  # DeepSeek: balance gone
            return handler.send(402, {"error": {"message": "Insufficient Balance", "type": "unknown_error",
                                                "param": None, "code": "invalid_request_error"}})
        time.sleep(self.delay_s)
        # the stage's preflight call gets a plain answer; scripts see only the runs' calls
        msg = {"role": "assistant", "content": "OK"} if is_preflight(req) else dict(self.policy(req))
        finish = msg.pop("finish_reason", None)  # a script may say how the reply ended ("length")
        pt = prompt_tokens(req["messages"], req.get("tools"))
        reply = completion(msg, req.get("model", "fake"), usage_of(pt, 7, pt // 2))
        if finish:
            reply["choices"][0]["finish_reason"] = finish
        if self.usage is not False:
            block = self.usage(pt)
            if block is None:
                reply.pop("usage")
            else:
                reply["usage"] = block
        if fault == "late":  # the normal reply, whole, in two pieces hang_s apart after hang_s
            return handler.late(json.dumps(reply).encode(), self.hang_s)
        held = self.stall(req) if self.stall else None
        if held is not None:
            return handler.stall(json.dumps(reply).encode(), held)
        handler.send(200, reply)


# ------------------------------------------------------------------------------ the rehearsal's upstream

@dataclass
class Stats:
    calls: dict = field(default_factory=lambda: {"agent": 0, "judge": 0, "preflight": 0})
    waited_s: dict = field(default_factory=lambda: {"agent": 0.0, "judge": 0.0, "preflight": 0.0})
    faults: dict = field(default_factory=lambda: {"429": 0, "5xx": 0})
    tool_calls: int = 0


class FakeUpstream(ScriptedUpstream):
    models = ("deepseek-chat",)

    def __init__(self, seed: int = 0, scale: float = 1.0, median_s: float = 1.5, sigma: float = 0.7,
                 p429: float = 0.01, p5xx: float = 0.01, max_tool_calls: int = 3, query_salt: str = ""):
        super().__init__()
        self.seed, self.scale, self.median_s, self.sigma = seed, scale, median_s, sigma
        self.p429, self.p5xx, self.max_tool_calls = p429, p5xx, max_tool_calls
        # a word added to every search query: a real model's queries are new, so they miss the
        # harness's query-vector cache; without a fresh salt a second rehearsal would only hit it
        self.query_salt = query_salt
        self._stats = Stats()
        self._answering = 0  # requests between their arrival and their accounting
        self._accounted = threading.Condition(self._lock)
        self._seen: dict[str, int] = {}  # request body hash -> times seen (a retry draws anew)
        self._prefix: dict[str, int] = {}  # conversation -> prompt tokens of its last call
        self._systems: set[str] = set()

    def stats(self) -> dict:
        """The calls, waits and faults so far, every request that has arrived accounted for: a reply reaches its
        client before its request is counted, so a client reading the figures after its reply waits for that count
        (up to 10 s) rather than reading a race."""
        with self._accounted:
            self._accounted.wait_for(lambda: self._answering == 0, timeout=10)
            s = self._stats
            return {"calls": dict(s.calls), "waited_s": dict(s.waited_s), "faults": dict(s.faults),
                    "tool_calls": s.tool_calls}

    # -- what a call gets -----------------------------------------------------------------
    def draw(self, body: bytes) -> tuple[random.Random, float, str | None]:
        """The call's own random stream, its latency (seconds) and its fault (None, '429', '5xx')."""
        h = hashlib.sha256(body).hexdigest()
        with self._lock:
            n = self._seen.get(h, 0)
            self._seen[h] = n + 1
        rng = random.Random(f"{self.seed}:{h}:{n}")
        latency = self.scale * self.median_s * math.exp(self.sigma * rng.gauss(0.0, 1.0))
        roll = rng.random()
        fault = "429" if roll < self.p429 else "5xx" if roll < self.p429 + self.p5xx else None
        if fault:
            latency = min(latency, self.scale * 0.2)  # refusals come back fast
        return rng, latency, fault

    @staticmethod
    def kind(req: dict) -> str:
        msgs = req.get("messages") or []
        if is_preflight(req):
            return "preflight"
        last = str((msgs[-1] if msgs else {}).get("content") or "")
        if not req.get("tools") and last.rstrip().endswith("yes or no only."):
            return "judge"
        return "agent"

    def usage(self, req: dict, completion: int) -> dict:
        msgs = req.get("messages") or []
        pt = prompt_tokens(msgs, req.get("tools"))
        system = json.dumps(msgs[:1])
        conv = hashlib.sha256(json.dumps(msgs[:2]).encode()).hexdigest()
        with self._lock:
            prev = self._prefix.get(conv)
            if prev is None:
                prev = len(system) // 4 if system in self._systems else 0
            self._systems.add(system)
            self._prefix[conv] = pt
        return usage_of(pt, completion, min(pt, prev // 64 * 64))

    def agent_message(self, req: dict, rng: random.Random) -> dict:
        msgs = req.get("messages") or []
        tools = [t["function"] for t in req.get("tools") or []]
        question = next((str(m.get("content") or "") for m in msgs if m["role"] == "user"), "")
        results = [str(m.get("content") or "") for m in msgs if m["role"] == "tool"]
        # how many searches this conversation makes: fixed by its opening, 1..max_tool_calls
        wanted = random.Random(f"{self.seed}:{hashlib.sha256(question.encode()).hexdigest()}:{len(msgs[0]['content'])}"
                               ).randint(1, self.max_tool_calls)
        if tools and req.get("tool_choice") != "none" and len(results) < wanted:
            words = _words(question, rng, 4) + (_words(results[-1], rng, 3) if results else [])
            query = " ".join(words + [self.query_salt]).strip() or "memory"
            fn = next((f for f in tools if f["name"] in ("memory_search", "session_search", "terminal")), tools[0])
            props = (fn.get("parameters") or {}).get("properties") or {}
            if "command" in props:
                like = (words or ["the"])[-1].replace("'", "")
                args = {"command": f"sqlite3 {STORE_MOUNT} \"SELECT content FROM messages WHERE content LIKE "
                                   f"'%{like}%' LIMIT 3\""}
            elif "query" in props:
                args = {"query": query}
            else:
                args = {k: "x" for k in (fn.get("parameters") or {}).get("required", [])}
            with self._lock:
                self._stats.tool_calls += 1
            return {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{rng.getrandbits(32):08x}", "type": "function",
                "function": {"name": fn["name"], "arguments": json.dumps(args)}}]}
        found = _words(" ".join(results[-2:]), rng, 8)
        answer = ("From our earlier conversations: " + " ".join(found) + ".") if found else "I don't know."
        return {"role": "assistant", "content": answer}

    # -- the server -----------------------------------------------------------------------
    def respond(self, handler, raw: bytes) -> None:
        # the upstream's time is the whole request (reading, parsing, latency, reply), as a real
        # endpoint's would be: the fake's own JSON work must not count as the harness's
        t0 = time.perf_counter()
        with self._lock:
            self._answering += 1
        kind, fault = None, None
        try:
            kind, fault = self._answer(handler, raw)
        finally:
            with self._accounted:
                if kind is not None:
                    self._stats.calls[kind] += 1
                    self._stats.waited_s[kind] += time.perf_counter() - t0
                    if fault:
                        self._stats.faults[fault] += 1
                self._answering -= 1
                self._accounted.notify_all()

    def _answer(self, handler, raw: bytes) -> tuple[str, str | None]:
        req = json.loads(raw)
        kind = self.kind(req)
        rng, latency, fault = self.draw(raw)
        if kind == "preflight":
            fault = None
        time.sleep(latency)
        if fault == "429":
            handler.send(429, error("rate limited", "rate_limit"))
            return kind, fault
        if fault == "5xx":
            handler.send(503, error("server busy", "server_error"))
            return kind, fault
        if kind == "preflight":
            msg = {"role": "assistant", "content": "OK"}
        elif kind == "judge":
            msg = {"role": "assistant", "content": rng.choice(["yes", "no"])}
        else:
            msg = self.agent_message(req, rng)
        out = len(json.dumps(msg)) // 4 + 1
        handler.send(200, completion(msg, req.get("model", "deepseek-chat"), self.usage(req, out),
                                     f"chatcmpl-{rng.getrandbits(48):012x}"))
        return kind, None
