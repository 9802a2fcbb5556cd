"""A latency-simulating OpenAI-compatible upstream for the rehearsal (bench/rehearsal.py).

Not a model: a seeded stand-in for a hosted API, so a paper-size stage can run
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


@dataclass
class Stats:
    calls: dict = field(default_factory=lambda: {"agent": 0, "judge": 0, "preflight": 0})
    waited_s: dict = field(default_factory=lambda: {"agent": 0.0, "judge": 0.0, "preflight": 0.0})
    faults: dict = field(default_factory=lambda: {"429": 0, "5xx": 0})
    tool_calls: int = 0


class FakeUpstream:
    def __init__(self, seed: int = 0, scale: float = 1.0, median_s: float = 1.5, sigma: float = 0.7,
                 p429: float = 0.01, p5xx: float = 0.01, max_tool_calls: int = 3, query_salt: str = ""):
        self.seed, self.scale, self.median_s, self.sigma = seed, scale, median_s, sigma
        self.p429, self.p5xx, self.max_tool_calls = p429, p5xx, max_tool_calls
        # a word added to every search query: a real model's queries are new, so they miss the
        # harness's query-vector cache; without a fresh salt a second rehearsal would only hit it
        self.query_salt = query_salt
        self._stats = Stats()
        self._seen: dict[str, int] = {}  # request body hash -> times seen (a retry draws anew)
        self._prefix: dict[str, int] = {}  # conversation -> prompt tokens of its last call
        self._systems: set[str] = set()
        self._lock = threading.Lock()
        self._srv: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._srv.server_address[1]}/v1"

    def stats(self) -> dict:
        with self._lock:
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
        if msgs == [{"role": "user", "content": PREFLIGHT_PROMPT}]:
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
        hit = min(pt, prev // 64 * 64)
        return {"prompt_tokens": pt, "completion_tokens": completion, "total_tokens": pt + completion,
                "prompt_cache_hit_tokens": hit, "prompt_cache_miss_tokens": pt - hit}

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
    def start(self) -> "FakeUpstream":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def _send(self, status: int, obj: dict):
                body = json.dumps(obj).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the driver was killed mid-call

            def do_GET(self):
                self._send(200, {"object": "list", "data": [{"id": "deepseek-chat", "object": "model"}]})

            def do_POST(self):
                # the upstream's time is the whole request (reading, parsing, latency, reply), as a real
                # endpoint's would be: the fake's own JSON work must not count as the harness's
                t0 = time.perf_counter()
                kind, fault = self._answer()
                with fake._lock:
                    fake._stats.calls[kind] += 1
                    fake._stats.waited_s[kind] += time.perf_counter() - t0
                    if fault:
                        fake._stats.faults[fault] += 1

            def _answer(self) -> tuple[str, str | None]:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                req = json.loads(raw)
                kind = fake.kind(req)
                rng, latency, fault = fake.draw(raw)
                if kind == "preflight":
                    fault = None
                time.sleep(latency)
                if fault == "429":
                    self._send(429, {"error": {"message": "rate limited", "type": "rate_limit"}})
                    return kind, fault
                if fault == "5xx":
                    self._send(503, {"error": {"message": "server busy", "type": "server_error"}})
                    return kind, fault
                if kind == "preflight":
                    msg = {"role": "assistant", "content": "OK"}
                elif kind == "judge":
                    msg = {"role": "assistant", "content": rng.choice(["yes", "no"])}
                else:
                    msg = fake.agent_message(req, rng)
                out = len(json.dumps(msg)) // 4 + 1
                self._send(200, {
                    "id": f"chatcmpl-{rng.getrandbits(48):012x}", "object": "chat.completion",
                    "created": int(time.time()), "model": req.get("model", "deepseek-chat"),
                    "choices": [{"index": 0, "message": msg,
                                 "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop"}],
                    "usage": fake.usage(req, out),
                })
                return kind, None

        def handle_error(srv, request, client_address):  # a killed driver resets its connections: not news
            if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
                ThreadingHTTPServer.handle_error(srv, request, client_address)

        self._srv = type("Server", (ThreadingHTTPServer,), {"request_queue_size": 256, "handle_error": handle_error})(
            ("127.0.0.1", 0), Handler)
        self._srv.daemon_threads = True
        threading.Thread(target=self._srv.serve_forever, daemon=True, name="fake-upstream").start()
        return self

    def stop(self) -> None:
        if self._srv:
            self._srv.shutdown()
            self._srv.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
