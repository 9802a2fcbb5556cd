"""`python -m harness.endpoints.bench_proxy`: what the metering proxy and the loop add to each model call.

Times the same tiny request sent (a) straight to an endpoint with the openai
client and (b) through the metering proxy with the loop's Agent (retry wrapper,
usage accounting, ledger fsync). Two upstreams: a loopback stub that answers at
once (so the difference is all overhead) and, unless --no-model, the real local
model with its prompt cache warm. Prints p50/p95 per path and the added latency.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import openai

from harness.endpoints.client import Agent, Meter
from harness.memory.bench import pct
from harness.endpoints.proxy import MeteringProxy
from harness.records.ledger import Ledger

PROMPT = [{"role": "user", "content": "Reply with the single word: ok"}]
MODEL = {"model": "bench", "params": {"temperature": 0, "max_tokens": 2}, "timeout_s": 120}
PRICES = {"hit": 0.0, "miss": 0.0, "output": 0.0}


class _Stub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "bench",
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                        "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def measure(base_url: str, model: str, n: int) -> dict:
    direct = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=120)
    with tempfile.TemporaryDirectory() as d:
        ledger = Ledger(Path(d) / "ledger.jsonl")
        with MeteringProxy(base_url, ledger) as proxy:
            agent = Agent(proxy.base_url, {**MODEL, "model": model}, "bench", 1, Meter(PRICES))
            for _ in range(3):  # warm both paths (connections, the model's prompt cache)
                direct.chat.completions.create(model=model, messages=PROMPT, temperature=0, max_tokens=2)
                agent.complete(PROMPT)
            a, b = [], []
            for _ in range(n):  # interleaved, so drift in the upstream hits both paths alike
                t = time.perf_counter()
                direct.chat.completions.create(model=model, messages=PROMPT, temperature=0, max_tokens=2)
                a.append(time.perf_counter() - t)
                t = time.perf_counter()
                agent.complete(PROMPT)
                b.append(time.perf_counter() - t)
        ledger.close()
    added = [y - x for x, y in zip(a, b)]
    return {"direct_p50_ms": 1e3 * pct(a, 50), "direct_p95_ms": 1e3 * pct(a, 95),
            "proxied_p50_ms": 1e3 * pct(b, 50), "proxied_p95_ms": 1e3 * pct(b, 95),
            "added_p50_ms": 1e3 * statistics.median(added), "added_p95_ms": 1e3 * pct(added, 95), "n": n}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.endpoints.bench_proxy")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--no-model", action="store_true", help="skip the real local model")
    args = ap.parse_args(argv)
    rows = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    rows.append(("loopback stub", measure(f"http://127.0.0.1:{srv.server_address[1]}/v1", "bench", args.n)))
    srv.shutdown()
    if not args.no_model:
        from harness.endpoints.local_model import LocalModel

        with LocalModel(ctx_size=2048) as lm:
            rows.append(("local model (adapter)", measure(lm.base_url, lm.model, max(10, args.n // 5))))
    print(f"{'upstream':<24}{'n':>4}{'direct p50':>12}{'p95':>9}{'proxied p50':>13}{'p95':>9}{'added p50':>11}{'p95':>9}  (ms)")
    for name, r in rows:
        print(f"{name:<24}{r['n']:>4}{r['direct_p50_ms']:>12.2f}{r['direct_p95_ms']:>9.2f}{r['proxied_p50_ms']:>13.2f}"
              f"{r['proxied_p95_ms']:>9.2f}{r['added_p50_ms']:>11.2f}{r['added_p95_ms']:>9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
