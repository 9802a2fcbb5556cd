"""A scripted OpenAI-compatible server for testing the loop's control flow (not a model).

Real HTTP on loopback. Its policy: with tools offered and no tool result yet in
the conversation, it calls the first tool (a search gets the user's question as
query); otherwise it answers. Faults are injected from a seeded schedule: 429,
500, or a hang longer than the client's timeout; from an explicit schedule (the
first requests) or `always` (every later request): also 401, 403, 404, a 200
reply with no choices ("empty") and a 200 body that is not JSON ("nonjson"). Usage numbers are derived from
the request size so token accounting can be checked exactly.

`refuse` (callable(request_json) -> (status, body[, headers]) or None) replays a real server's
refusal for the requests it picks, preflight calls included (tests/endpoint_replies.py);
`usage` (callable(prompt_tokens) -> usage dict or None) replaces the usage block, None leaves it out.
"""

from __future__ import annotations

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness.run.preflight import PROMPT as PREFLIGHT_PROMPT


def prompt_tokens(messages: list[dict], tools: list | None) -> int:
    return (len(json.dumps(messages)) + len(json.dumps(tools or []))) // 4


class FakeModel:
    def __init__(self, delay_s: float = 0.0, p429: float = 0.0, p500: float = 0.0, phang: float = 0.0,
                 hang_s: float = 30.0, seed: int = 0, script=None, answer: str = "I don't know.",
                 schedule: list[str] | None = None, always: str | None = None, refuse=None, usage=False):
        self.delay_s, self.p429, self.p500, self.phang, self.hang_s = delay_s, p429, p500, phang, hang_s
        self.rng = random.Random(seed)
        self.script = script  # optional callable(request_json) -> message dict, overrides the policy
        self.answer = answer
        self.schedule = list(schedule or [])  # faults for the first requests, in order ("ok" for none)
        self.always = always  # the fault of every request after the schedule (None: the seeded draw)
        self.refuse = refuse
        self.usage = usage  # False: the default block below
        self.requests: list[dict] = []
        self.faults: list[str] = []
        self._lock = threading.Lock()
        self._srv: ThreadingHTTPServer | None = None

    @property
    def run_requests(self) -> list[dict]:
        """The requests other than the preflight's (harness.run.preflight: one per request shape)."""
        return [r for r in self.requests if r["body"].get("messages") != [{"role": "user", "content": PREFLIGHT_PROMPT}]]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._srv.server_address[1]}/v1"

    def _next_fault(self) -> str | None:
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

    def start(self) -> "FakeModel":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def _send(self, status: int, obj: dict, headers: dict | None = None):
                body = json.dumps(obj).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a hang longer than its timeout)

            def _send_raw(self, status: int, body: bytes, ctype: str):
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self):
                self._send(200, {"data": [{"id": "fake"}]})

            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with fake._lock:
                    fake.requests.append({"body": req, "headers": dict(self.headers)})
                    fault = fake._next_fault()
                if fault:
                    fake.faults.append(fault)
                refused = fake.refuse(req) if fake.refuse else None
                if refused is not None:
                    fake.faults.append(f"refused {refused[0]}")
                    return self._send(refused[0], refused[1], refused[2] if len(refused) > 2 else None)
                if fault == "429":
                    return self._send(429, {"error": {"message": "rate limited", "type": "rate_limit"}})
                if fault == "500":
                    return self._send(500, {"error": {"message": "boom", "type": "server_error"}})
                if fault in ("401", "403", "404"):
                    kind = {"401": "invalid_api_key", "403": "permission_denied", "404": "model_not_found"}[fault]
                    return self._send(int(fault), {"error": {"message": f"fake {kind}", "type": kind}})
                if fault == "empty":
                    return self._send(200, {"id": "x", "object": "chat.completion", "created": 0,
                                            "model": req.get("model", "fake"), "choices": []})
                if fault == "nonjson":
                    return self._send_raw(200, b"<html>gateway says hi</html>", "text/html")
                if fault == "hang":
                    time.sleep(fake.hang_s)
                    return self._send(500, {"error": {"message": "late", "type": "server_error"}})
                time.sleep(fake.delay_s)
                # the stage's preflight call gets a plain answer; scripts see only the runs' calls
                preflight = req["messages"] == [{"role": "user", "content": PREFLIGHT_PROMPT}]
                msg = {"role": "assistant", "content": "OK"} if preflight else fake.policy(req)
                pt = prompt_tokens(req["messages"], req.get("tools"))
                hit = pt // 2
                reply = {
                    "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                    "model": req.get("model", "fake"),
                    "choices": [{"index": 0, "message": msg,
                                 "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop"}],
                    "usage": {"prompt_tokens": pt, "completion_tokens": 7, "total_tokens": pt + 7,
                              "prompt_cache_hit_tokens": hit, "prompt_cache_miss_tokens": pt - hit},
                }
                if fake.usage is not False:
                    block = fake.usage(pt)
                    if block is None:
                        reply.pop("usage")
                    else:
                        reply["usage"] = block
                self._send(200, reply)

        self._srv = type("Server", (ThreadingHTTPServer,), {"request_queue_size": 256})(("127.0.0.1", 0), Handler)
        self._srv.daemon_threads = True
        threading.Thread(target=self._srv.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._srv:
            self._srv.shutdown()
            self._srv.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
