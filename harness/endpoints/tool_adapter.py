"""OpenAI tool calling for models that can't do it natively, via constrained JSON.

Qwen2.5-Coder-1.5B under llama.cpp writes tool calls as loose JSON text instead
of the chat template's tags (SPEC 8: 0/6), but follows a grammar-constrained
JSON "action" object well. This loopback HTTP server sits in front of any
OpenAI-compatible llama.cpp server and, for requests that carry `tools`:

* adds a compact tool list + the action format to the system prompt,
* renders earlier assistant `tool_calls` and `tool` results as plain text turns
  (in the same JSON the model is asked to emit, so history and output agree),
* constrains the reply to ``{"action":"answer","answer":str}`` or
  ``{"action":"call","tool":<name>,"arguments":{..per-tool schema..}}``,
* turns the reply back into standard `message.tool_calls` / `message.content`.

Requests without tools pass through as plain chat. tool_choice "none" after tool
rounds (the loop's forced answer) stays in the JSON format but allows only an
answer: after JSON turns a plain turn makes the model imitate its history. If the
model repeats a call identical to one already answered in the conversation, the
adapter asks again for an answer only (`repeat_guard`, recorded in the reply, with
the usage of both upstream calls). Every response carries a top-level
``"adapter"`` record and a suffixed ``system_fingerprint`` so run records show
the adapter was in the loop. Standard library only, so it adds no dependency.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ADAPTER_NAME = "json-schema-tool-adapter"
ADAPTER_VERSION = "1.1.0"
FINGERPRINT_SUFFIX = f"+{ADAPTER_NAME}/{ADAPTER_VERSION}"

# Ways to send the constraint upstream (all three work on xllamacpp 2026.10).
# "json_schema" (default) fails closed: a schema llama.cpp can't convert is a 400,
# which triggers the generic-schema retry. "llguidance" (`grammar` with a `%json`
# rule) gives compact JSON but fails OPEN: a bad schema is only logged and the
# reply is unconstrained. "response_format" is the OpenAI spelling of json_schema.
CONSTRAINT_MODES = ("json_schema", "llguidance", "response_format")
DEFAULT_CONSTRAINT = "json_schema"

# Request keys the adapter owns; everything else is forwarded unchanged.
_OWNED_KEYS = {"tools", "tool_choice", "parallel_tool_calls", "functions", "function_call", "stream",
               "stream_options", "response_format", "json_schema", "grammar"}


class AdapterError(ValueError):
    """A request the adapter cannot serve (answered as HTTP 400)."""


# --------------------------------------------------------------------------- helpers


def _text(content) -> str:
    """Flatten OpenAI content (str, None or a list of parts) to text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                if part.get("type") in ("text", "input_text", "output_text") or "text" in part:
                    out.append(str(part.get("text", "")))
                else:
                    out.append(f"[{part.get('type', 'part')} omitted]")
            else:
                out.append(str(part))
        return "\n".join(out)
    return str(content)


def _dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _tool_functions(tools: list) -> list[dict]:
    """Normalise `tools` to a list of {name, description, parameters}."""
    out, seen = [], set()
    for t in tools or []:
        if not isinstance(t, dict):
            raise AdapterError("each tool must be an object")
        if t.get("type", "function") != "function":
            raise AdapterError(f"unsupported tool type {t.get('type')!r}")
        fn = t.get("function", t)
        name = fn.get("name")
        if not name or not isinstance(name, str):
            raise AdapterError("a tool has no function name")
        if name in seen:
            raise AdapterError(f"duplicate tool name {name!r}")
        seen.add(name)
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        out.append({"name": name, "description": fn.get("description") or "", "parameters": params})
    return out


def _type_label(schema: dict) -> str:
    if not isinstance(schema, dict):
        return "any"
    if "enum" in schema:
        return "|".join(_dumps(v) for v in schema["enum"])
    t = schema.get("type")
    if isinstance(t, list):
        return "|".join(map(str, t))
    if t == "array":
        return f"array of {_type_label(schema.get('items', {}))}"
    return t or "any"


def _default(prop) -> str:
    """' = 8 (the default; leave it out)' for an optional argument with a declared default."""
    if isinstance(prop, dict) and "default" in prop:
        return f" = {_dumps(prop['default'])} (the default; leave it out)"
    return ""


def describe_tools(functions: list[dict]) -> str:
    """One short block per tool; small models read signatures better than raw schemas."""
    lines = []
    for fn in functions:
        props = fn["parameters"].get("properties", {}) or {}
        required = set(fn["parameters"].get("required", []) or [])
        sig = ", ".join(f"{k}{'' if k in required else '?'}: {_type_label(v)}" + _default(v) for k, v in props.items())
        lines.append(f"- {fn['name']}({sig})" + (f": {fn['description'].strip()}" if fn["description"] else ""))
        for k, v in props.items():
            desc = (v or {}).get("description") if isinstance(v, dict) else None
            if desc:
                lines.append(f"    {k}: {desc.strip()}")
    return "\n".join(lines)


FINAL_GUIDE = ('No more tool calls are possible. Give your final answer to the user now as exactly one JSON '
               'object: {"action":"answer","answer":"<text>"}')


def _has_tool_history(messages: list) -> bool:
    return any(isinstance(m, dict) and (m.get("tool_calls") or m.get("role") in ("tool", "function"))
               for m in messages)


def _previous_calls(messages: list) -> set[tuple[str, str]]:
    """(tool, canonical arguments) of every call already made in the conversation."""
    seen = set()
    for m in messages:
        for c in (m.get("tool_calls") or []) if isinstance(m, dict) else []:
            fn = c.get("function") or {}
            seen.add((fn.get("name", ""), _dumps(_parse_args(fn.get("arguments")))))
    return seen


def _add_usage(a: dict | None, b: dict | None) -> dict:
    """Usage of two upstream calls served as one reply, so the metering stays true."""
    a, b = a or {}, b or {}
    out = {k: (a.get(k) or 0) + (b.get(k) or 0) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    cached = [((x.get("prompt_tokens_details") or {}).get("cached_tokens")) for x in (a, b)]
    if any(c is not None for c in cached):
        out["prompt_tokens_details"] = {"cached_tokens": sum(c or 0 for c in cached)}
    return out


def tools_system_prompt(functions: list[dict], tool_choice) -> str:
    names = [f["name"] for f in functions]
    ex = functions[0]
    ex_args = {k: "..." for k in list((ex["parameters"].get("properties") or {}))[:1]}
    parts = [
        "You can use tools. Reply with exactly one JSON object and nothing else.",
        f'To call a tool: {{"action":"call","tool":"<name>","arguments":{{...}}}} e.g. '
        f'{_dumps({"action": "call", "tool": ex["name"], "arguments": ex_args})}',
        'To give your final answer to the user: {"action":"answer","answer":"<text>"}',
        "If the answer depends on facts not given in this conversation, call a tool first; never guess them. "
        "Call one tool at a time; its result comes back in the next message. "
        "Answer once you have what you need.",
        "Tools:",
        describe_tools(functions),
    ]
    if tool_choice == "required":
        parts.append("You must call a tool now.")
    elif isinstance(tool_choice, dict):
        parts.append(f"You must call the tool {names[0]} now.")
    return "\n".join(parts)


def _closed(schema: dict) -> dict:
    """Copy a tool's parameter schema for the constraint: object-typed and closed.

    Closing it (additionalProperties false unless the tool says otherwise) stops a
    small model from padding the call with invented keys.
    """
    s = copy.deepcopy(schema) if isinstance(schema, dict) else {}
    s.pop("$schema", None)
    s.pop("strict", None)
    s.setdefault("type", "object")
    if s.get("type") == "object":
        s.setdefault("properties", {})
        s.setdefault("additionalProperties", False)
    return s


def action_schema(functions: list[dict], allow_answer: bool = True, per_tool: bool = True) -> dict:
    """The JSON schema every constrained turn must satisfy.

    per_tool: one anyOf branch per tool with its own argument schema (llama.cpp's
    converters handle anyOf/const); otherwise one branch with a name enum and a free
    object, for upstreams that reject a tool's schema.
    """
    branches = []
    if allow_answer:
        branches.append({"type": "object",
                         "properties": {"action": {"const": "answer"}, "answer": {"type": "string"}},
                         "required": ["action", "answer"], "additionalProperties": False})
    if per_tool:
        for fn in functions:
            branches.append({"type": "object",
                             "properties": {"action": {"const": "call"}, "tool": {"const": fn["name"]},
                                            "arguments": _closed(fn["parameters"])},
                             "required": ["action", "tool", "arguments"], "additionalProperties": False})
    else:
        branches.append({"type": "object",
                         "properties": {"action": {"const": "call"},
                                        "tool": {"enum": [fn["name"] for fn in functions]},
                                        "arguments": {"type": "object"}},
                         "required": ["action", "tool", "arguments"], "additionalProperties": False})
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def constraint_fields(schema: dict, mode: str) -> dict:
    """Request fields that impose `schema` in the chosen upstream dialect."""
    if mode == "llguidance":
        s = dict(schema)
        s["x-guidance"] = {"whitespace_flexible": False}
        return {"grammar": "%llguidance {}\nstart: %json " + _dumps(s)}
    if mode == "json_schema":
        return {"json_schema": schema}
    if mode == "response_format":
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "action", "schema": schema, "strict": True}}}
    raise ValueError(f"unknown constraint mode {mode!r}; use one of {CONSTRAINT_MODES}")


def _parse_args(raw):
    if isinstance(raw, dict):
        return raw
    try:
        val = json.loads(raw) if raw else {}
        return val if isinstance(val, dict) else {"value": val}
    except (TypeError, ValueError):
        return {"raw": raw}


def render_messages(messages: list, tools_mode: bool) -> list[dict]:
    """Rewrite OpenAI history into system/user/assistant text turns.

    tools_mode: assistant turns become the JSON actions the model is constrained
    to (a call or an answer), so the history shows it its own format; otherwise
    tool calls become a readable sentence. Tool results become user turns naming
    the tool; consecutive results are merged into one turn.
    """
    names_by_id: dict[str, str] = {}
    out: list[dict] = []
    for m in messages:
        if not isinstance(m, dict) or "role" not in m:
            raise AdapterError("each message must be an object with a role")
        role = m["role"]
        if role in ("system", "developer"):
            out.append({"role": "system", "content": _text(m.get("content"))})
        elif role == "user":
            out.append({"role": "user", "content": _text(m.get("content"))})
        elif role == "assistant":
            calls = m.get("tool_calls") or []
            if not calls and m.get("function_call"):
                calls = [{"id": "", "function": m["function_call"]}]
            text = _text(m.get("content"))
            lines = []
            for c in calls:
                fn = c.get("function") or {}
                names_by_id[c.get("id") or ""] = fn.get("name", "")
                args = _parse_args(fn.get("arguments"))
                if tools_mode:
                    lines.append(_dumps({"action": "call", "tool": fn.get("name", ""), "arguments": args}))
                else:
                    lines.append(f"[called tool {fn.get('name', '')} with arguments {_dumps(args)}]")
            if tools_mode:
                if text and not calls:
                    lines.append(_dumps({"action": "answer", "answer": text}))
                # text next to calls is the model's own preamble: drop it in tools
                # mode, since the constrained format has no place for it
            elif text:
                lines.insert(0, text)
            out.append({"role": "assistant", "content": "\n".join(lines)})
        elif role in ("tool", "function"):
            name = m.get("name") or names_by_id.get(m.get("tool_call_id") or "", "") or "tool"
            block = f"[result of tool {name}]\n{_text(m.get('content'))}"
            if out and out[-1].get("_tool_result"):
                out[-1]["content"] += "\n\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool_result": True})
        else:
            raise AdapterError(f"unsupported message role {role!r}")
    for m in out:
        m.pop("_tool_result", None)
    return out


# --------------------------------------------------------------------------- translation


class Plan:
    """What translate_request decided, needed to read the reply back."""

    def __init__(self, mode: str, functions: list[dict], schema_kind: str | None, tool_choice,
                 constraint: str | None):
        self.mode, self.functions, self.schema_kind = mode, functions, schema_kind
        self.tool_choice, self.constraint = tool_choice, constraint

    @property
    def names(self) -> list[str]:
        return [f["name"] for f in self.functions]


def translate_request(body: dict, constraint: str = DEFAULT_CONSTRAINT, per_tool: bool = True) -> tuple[dict, Plan]:
    """OpenAI request with tools -> plain llama.cpp request with a JSON constraint."""
    if not isinstance(body, dict):
        raise AdapterError("request body must be a JSON object")
    if body.get("stream"):
        raise AdapterError("stream=true is not supported by the tool adapter")
    if "messages" not in body or not isinstance(body["messages"], list):
        raise AdapterError("messages must be a list")
    if body.get("n", 1) not in (1, None):
        raise AdapterError("only n=1 is supported")
    tools = body.get("tools")
    if tools is None and body.get("functions"):
        tools = [{"type": "function", "function": f} for f in body["functions"]]
    tool_choice = body.get("tool_choice", body.get("function_call", "auto"))
    if tool_choice is None:
        tool_choice = "auto"
    functions = _tool_functions(tools) if tools else []
    upstream = {k: v for k, v in body.items() if k not in _OWNED_KEYS}
    if "max_completion_tokens" in upstream:
        upstream.setdefault("max_tokens", upstream["max_completion_tokens"])
        del upstream["max_completion_tokens"]
    upstream["stream"] = False

    if functions and tool_choice == "none" and _has_tool_history(body["messages"]):
        # the forced final answer after tool rounds: keep the JSON format the model has been
        # using (a plain turn after JSON turns makes it imitate the history) but allow only
        # an answer
        msgs = render_messages(body["messages"], tools_mode=True)
        if msgs and msgs[0]["role"] == "system":
            msgs[0] = {"role": "system", "content": msgs[0]["content"].rstrip() + "\n\n" + FINAL_GUIDE}
        else:
            msgs.insert(0, {"role": "system", "content": FINAL_GUIDE})
        upstream["messages"] = msgs
        upstream.update(constraint_fields(action_schema([], allow_answer=True), constraint))
        return upstream, Plan("tools", functions, "answer-only", tool_choice, constraint)

    if not functions or tool_choice == "none":
        upstream["messages"] = render_messages(body["messages"], tools_mode=False)
        for k in ("response_format", "json_schema", "grammar"):  # caller's own constraint, no tools
            if k in body:
                upstream[k] = body[k]
        return upstream, Plan("plain", functions, None, tool_choice, None)

    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name") or tool_choice.get("name")
        chosen = [f for f in functions if f["name"] == name]
        if not chosen:
            raise AdapterError(f"tool_choice names unknown tool {name!r}")
        functions_c, allow_answer = chosen, False
    elif tool_choice == "required":
        functions_c, allow_answer = functions, False
    elif tool_choice == "auto":
        functions_c, allow_answer = functions, True
    else:
        raise AdapterError(f"unsupported tool_choice {tool_choice!r}")

    msgs = render_messages(body["messages"], tools_mode=True)
    guide = tools_system_prompt(functions_c, tool_choice)
    if msgs and msgs[0]["role"] == "system":
        msgs[0] = {"role": "system", "content": (msgs[0]["content"].rstrip() + "\n\n" + guide).lstrip()}
    else:
        msgs.insert(0, {"role": "system", "content": guide})
    upstream["messages"] = msgs
    schema = action_schema(functions_c, allow_answer=allow_answer, per_tool=per_tool)
    upstream.update(constraint_fields(schema, constraint))
    return upstream, Plan("tools", functions_c, "per-tool" if per_tool else "generic", tool_choice, constraint)


def _check_args(args: dict, params: dict) -> list[str]:
    """Light checks for the generic-schema fallback, where the grammar can't enforce them."""
    problems = []
    for k in params.get("required", []) or []:
        if k not in args:
            problems.append(f"missing required argument {k!r}")
    props = params.get("properties") or {}
    if params.get("additionalProperties") is False:
        problems += [f"unexpected argument {k!r}" for k in args if k not in props]
    return problems


_ANSWER_PREFIX = re.compile(r'^\s*\{\s*"action"\s*:\s*"answer"\s*,\s*"answer"\s*:\s*"')


def _partial_answer(raw: str) -> str | None:
    """Text of an answer string cut off by max_tokens, or None if raw isn't one."""
    m = _ANSWER_PREFIX.match(raw)
    if not m:
        return None
    rest = raw[m.end():]
    for cut in range(0, min(len(rest), 6) + 1):  # drop a half-written escape like \u00
        try:
            return json.loads('"' + rest[:len(rest) - cut] + '"')
        except ValueError:
            continue
    return None


def _new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def translate_response(upstream: dict, plan: Plan) -> dict:
    """llama.cpp reply -> OpenAI reply (+ the adapter record). Never raises on model text."""
    resp = copy.deepcopy(upstream)
    choices = resp.get("choices") or [{"index": 0, "message": {"role": "assistant", "content": ""}}]
    choice = choices[0]
    msg = choice.get("message") or {}
    raw = msg.get("content")
    raw = _text(raw)
    up_finish = choice.get("finish_reason")
    record = {"name": ADAPTER_NAME, "version": ADAPTER_VERSION, "mode": plan.mode,
              "schema": plan.schema_kind, "constraint": plan.constraint, "parsed": None,
              "upstream_finish_reason": up_finish}
    if plan.mode == "tools":
        record["raw_content"] = raw
        action, error = None, None
        try:
            action = json.loads(raw)
            if not isinstance(action, dict):
                error = "reply is JSON but not an object"
        except ValueError as exc:
            error = f"reply is not valid JSON ({exc.msg} at char {exc.pos})"
        new_msg = {"role": "assistant", "content": raw, "tool_calls": None}
        finish = up_finish or "stop"
        if error is None:
            kind = action.get("action")
            if kind == "call":
                name, args = action.get("tool"), action.get("arguments", {})
                fn = next((f for f in plan.functions if f["name"] == name), None)
                if fn is None:
                    error = f"reply calls unknown tool {name!r}"
                elif not isinstance(args, dict):
                    error = "reply's arguments are not an object"
                else:
                    problems = _check_args(args, fn["parameters"])
                    if problems:
                        record["argument_problems"] = problems
                    new_msg = {"role": "assistant", "content": None,
                               "tool_calls": [{"id": _new_call_id(), "type": "function",
                                               "function": {"name": name, "arguments": _dumps(args)}}]}
                    finish = "tool_calls"
            elif kind == "answer" and isinstance(action.get("answer"), str):
                new_msg = {"role": "assistant", "content": action["answer"], "tool_calls": None}
                finish = "stop" if up_finish in (None, "stop") else up_finish
            else:
                error = f"reply has no valid action (got {str(kind)[:40]!r})"
        record["parsed"] = error is None
        if error:
            record["parse_error"] = error
            partial = _partial_answer(raw) if up_finish == "length" else None
            if partial is not None:  # cut off mid-answer: hand back the text, not the JSON shell
                new_msg = {"role": "assistant", "content": partial}
                record["salvaged"] = "partial_answer"
        if new_msg.get("tool_calls") is None:
            new_msg.pop("tool_calls", None)
        choice["message"] = new_msg
        choice["finish_reason"] = finish
    else:
        if "tool_calls" in msg and not msg["tool_calls"]:
            msg.pop("tool_calls")
    choice.setdefault("index", 0)
    resp["choices"] = [choice]
    resp.setdefault("object", "chat.completion")
    resp.setdefault("created", int(time.time()))
    resp.setdefault("id", "chatcmpl-" + uuid.uuid4().hex)
    resp["system_fingerprint"] = (resp.get("system_fingerprint") or "upstream") + FINGERPRINT_SUFFIX
    resp["adapter"] = record
    return resp


# --------------------------------------------------------------------------- HTTP


def _schema_error(obj) -> bool:
    """Does an upstream 400 blame the schema/grammar (worth a generic retry)?"""
    msg = json.dumps(obj).lower() if obj is not None else ""
    return any(w in msg for w in ("schema", "grammar", "parser"))


def _error_body(message: str, kind: str = "invalid_request_error", code: int = 400) -> dict:
    return {"error": {"message": message, "type": kind, "code": code},
            "adapter": {"name": ADAPTER_NAME, "version": ADAPTER_VERSION}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: avoid a 40 ms delayed-ACK stall
    server_version = f"{ADAPTER_NAME}/{ADAPTER_VERSION}"

    def log_message(self, fmt, *args):  # quiet: the harness records its own logs
        if self.server.adapter.verbose:
            super().log_message(fmt, *args)

    def _send(self, code: int, obj: dict) -> None:
        data = json.dumps(obj, ensure_ascii=False).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/")

    def do_GET(self):
        a = self.server.adapter
        p = self._path()
        if p in ("/v1/models", "/models"):
            code, obj = a.upstream_call("GET", "/models")
            self._send(code, obj)
        elif p in ("/health", "/v1/health"):
            code, obj = a.upstream_call("GET", "/health", root=True)
            self._send(code, obj)
        else:
            self._send(404, _error_body(f"no route GET {p}", "not_found_error", 404))

    def do_POST(self):
        a = self.server.adapter
        p = self._path()
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if p not in ("/v1/chat/completions", "/chat/completions"):
            self._send(404, _error_body(f"no route POST {p}", "not_found_error", 404))
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send(400, _error_body("request body is not valid JSON"))
            return
        try:
            code, obj = a.chat(body)
        except AdapterError as exc:
            code, obj = 400, _error_body(str(exc))
        except Exception as exc:  # never drop the connection without an answer
            code, obj = 500, _error_body(f"adapter failure: {type(exc).__name__}: {exc}", "server_error", 500)
        self._send(code, obj)


class ToolAdapter:
    """The adapter as a loopback HTTP server in a daemon thread of this process.

    upstream_base_url: an OpenAI-compatible base URL ending in /v1 (llama.cpp).
    constraint: how the schema reaches llama.cpp (see CONSTRAINT_MODES).
    """

    def __init__(self, upstream_base_url: str, host: str = "127.0.0.1", port: int = 0,
                 constraint: str = DEFAULT_CONSTRAINT, per_tool_schema: bool = True,
                 timeout: float = 900.0, verbose: bool = False, repeat_guard: bool = True):
        if constraint not in CONSTRAINT_MODES:
            raise ValueError(f"constraint must be one of {CONSTRAINT_MODES}")
        self.upstream = upstream_base_url.rstrip("/")
        self.host, self.port = host, port
        self.constraint, self.per_tool_schema = constraint, per_tool_schema
        self.timeout, self.verbose = timeout, verbose
        self.repeat_guard = repeat_guard
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- upstream
    def upstream_call(self, method: str, path: str, body: dict | None = None, root: bool = False) -> tuple[int, dict]:
        base = self.upstream[:-3] if root and self.upstream.endswith("/v1") else self.upstream
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as exc:
            payload = exc.read()
            try:
                return exc.code, json.loads(payload)
            except ValueError:
                return exc.code, _error_body(payload.decode(errors="replace")[:2000], "upstream_error", exc.code)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return 502, _error_body(f"upstream {base + path} failed: {exc}", "upstream_error", 502)

    def chat(self, body: dict) -> tuple[int, dict]:
        """Serve one chat request; returns (HTTP status, JSON body)."""
        up, plan = translate_request(body, self.constraint, self.per_tool_schema)
        code, obj = self.upstream_call("POST", "/chat/completions", up)
        if code == 400 and plan.mode == "tools" and plan.schema_kind == "per-tool" and _schema_error(obj):
            # a tool's own schema may use something the converter rejects: retry generic
            up, plan = translate_request(body, self.constraint, per_tool=False)
            code, obj = self.upstream_call("POST", "/chat/completions", up)
        if code != 200:
            if isinstance(obj, dict):
                obj.setdefault("adapter", {"name": ADAPTER_NAME, "version": ADAPTER_VERSION})
            return code, obj
        resp = translate_response(obj, plan)
        calls = resp["choices"][0]["message"].get("tool_calls") or []
        if self.repeat_guard and calls and body.get("tool_choice") != "required":
            fn = calls[0]["function"]
            if (fn["name"], _dumps(_parse_args(fn["arguments"]))) in _previous_calls(body["messages"]):
                # a small model repeats an identical call instead of reading its result; its
                # result is already in the conversation, so ask for the answer instead
                final_up, final_plan = translate_request({**body, "tool_choice": "none"}, self.constraint,
                                                         self.per_tool_schema)
                code2, obj2 = self.upstream_call("POST", "/chat/completions", final_up)
                if code2 == 200:
                    again = translate_response(obj2, final_plan)
                    again["usage"] = _add_usage(obj.get("usage"), obj2.get("usage"))
                    again["adapter"]["repeat_guard"] = {"repeated_call": fn["name"], "arguments": fn["arguments"]}
                    return 200, again
        return 200, resp

    # -- lifecycle
    def start(self) -> "ToolAdapter":
        if self._httpd is not None:
            return self
        httpd = ThreadingHTTPServer((self.host, self.port), _Handler)
        httpd.daemon_threads = True
        httpd.adapter = self
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"tool-adapter:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
            self._thread.join(timeout=5)

    def __enter__(self) -> "ToolAdapter":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"
