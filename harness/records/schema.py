"""The one definition of what a stage writes and every reader reads.

Stage info, run record (with its model calls, tool calls and memory logs), ledger event,
attempt line and judgement are pydantic models: the driver, the judge, the replay and the
analysis write and read only through them, so a renamed or missing field fails where it
happens, naming the file and the field, instead of becoming 0 in a table. Nothing here has
a default for a number that a run measures.

Versions: `SCHEMA_VERSION` is written into every stage info, run record and judgement.
Files written before the schema existed carry no `schema_version`; they are version 0 and
go through `migrate` (one step) on the way in, so earlier stages stay analysable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

SCHEMA_VERSION = 1


class RecordError(ValueError):
    """A file that does not validate: names the file, the line (for JSON lines) and the fields."""

    exit_code = 2  # harness.failures.BAD_INPUT

    def __init__(self, path: str | Path, problem: str, line: int | None = None):
        self.path, self.problem, self.line = str(path), problem, line
        where = f"{path}" + (f" line {line}" if line is not None else "")
        super().__init__(f"{where}: {problem}")


class _Model(BaseModel):
    """Unknown fields are refused: a writer's typo or a renamed field fails loudly."""

    model_config = ConfigDict(extra="forbid", frozen=False)


class _Open(BaseModel):
    """Parts whose content belongs to another component (a condition's notes, a config)."""

    model_config = ConfigDict(extra="allow")


# ------------------------------------------------------------------------------ parts of a run


class Tokens(_Model):
    prompt: int
    hit: int
    miss: int
    output: int
    reasoning: int


class ModelCall(_Model):
    """One model call as the run's meter saw it (the ledger has the same call from the proxy)."""

    prompt: int
    hit: int
    miss: int
    output: int
    reasoning: int
    cache_reported: bool
    latency_s: float
    finish: str | None
    role: str
    cost_list: float
    cost_paid: float
    ts: str
    usage_reported: bool = True  # false: the reply had no usage block
    # a count was missing, null, not a number, negative or beyond the context: estimated from the request and
    # reply (harness.endpoints.usage), and `flags` says which; tables show such calls as estimated
    usage_estimated: bool = False
    # what was odd about the call, one line each: usage counts, finish_reason length, a forced answer that came
    # back as a tool call, tool calls normalised (arguments sent as an object, an id assigned), a retried bad reply
    flags: list[str] = Field(default_factory=list)
    sent: dict[str, Any] | None = None  # parameters as sent after fitting to model.accepts; tools by name
    dropped: list[str] = Field(default_factory=list)  # parameters model.accepts left out


class MemoryView(_Model):
    org: str
    agent: str | None
    scope: Literal["own", "shared", "all"]
    since: Any = None
    until: Any = None


class MemoryLog(_Model):
    """One memory-tool retrieval: what was asked under which view, and which units came back.

    `units` are (unit id, owner) pairs in result order; the exposure audit counts them and the
    replay re-runs the call against the same index and view. A retriever may log more about
    itself (the kernel: what it dropped, its barrier wait); those fields are kept as they are.
    """

    model_config = ConfigDict(extra="allow")

    kind: Literal["search", "read"]
    agent: str | None
    view: MemoryView
    units: list[tuple[str, str]]
    # search
    query: str | None = None
    k: int | None = None
    since: Any = None
    until: Any = None
    scoring: str | None = None
    # read
    session: str | None = None
    round: int | None = None
    window: int | None = None


def _typed_log(value: Any) -> Any:
    """Memory logs (kind search/read with a view) are typed wherever they sit in a tool's log."""
    if isinstance(value, dict):
        if value.get("kind") in ("search", "read") and "view" in value:
            return MemoryLog.model_validate(value)
        return {k: _typed_log(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed_log(v) for v in value]
    return value


class ToolCall(_Model):
    name: str
    arguments: str | None
    chars: int
    sessions: list[str]
    empty: bool
    error: bool
    retrieval_s: float
    wall_s: float
    cut: bool
    log: Any
    failure: Literal["tool_error", "exception"] | None = None  # absent when the tool answered
    # arguments set to other values than the schema's defaults; absent when the call never parsed
    overrode_defaults: dict[str, Any] | None = None

    @field_validator("log", mode="before")
    @classmethod
    def _memory_logs(cls, v: Any) -> Any:
        return _typed_log(v)


class TranscriptToolCall(_Model):
    """A tool call as the model wrote it (arguments verbatim, valid JSON or not)."""

    id: str
    name: str
    arguments: str


class TranscriptMessage(_Model):
    """One message as sent to or received from the model, in order.

    `tool_calls` only on an assistant message that asked for tools; `tool_call_id` and `tool`
    (the call's index in the record's `tools`, with its measurements and memory log) only on a
    tool message, whose `content` is what the model read (after the 30,000-character cut);
    `call` (the index in the record's `calls`) only on an assistant message; `asked` only on
    the answer of an ask_agent call: the asked agent's own loop.
    """

    role: Literal["system", "user", "assistant", "tool"]  # system: one after the stored prompt (an injected block)
    content: str
    tool_calls: list[TranscriptToolCall] | None = None
    tool_call_id: str | None = None
    tool: int | None = None
    call: int | None = None
    asked: list["Transcript"] | None = None


class Transcript(_Model):
    """One agent loop as its model saw it. The system prompt (with any prefetched memories) is
    stored once per stage folder, in prompts/<system_sha256>.txt; the kernel's injected block is
    the start of the first user message."""

    role: str  # "agent", or "asked:<agent>" for a loop run by ask_agent
    system_sha256: str
    tools: list[str]  # the tools offered, by name
    messages: list[TranscriptMessage]


class Evidence(_Model):
    any: bool | None
    first_search: bool | None
    evidence_sessions: list[str]


class Decomposition(_Model):
    """Proposition 3: input tokens = calls x prefix + what results and outputs add."""

    calls: int
    prefix: int
    results: int
    output: int
    input: int


class CodeRevision(_Model):
    commit: str | None
    dirty: bool | None  # a tracked file modified or an untracked file present in the packages (provenance.PACKAGES)
    modified: list[str] = []  # the packages' files that differ from the commit (written since issue 40)
    untracked: list[str] = []  # the packages' files git does not track (not ignored)


class Prices(_Open):
    currency: str
    hit: float | None  # None: not known (conf/model/hosted.yaml); counted as 0, the preflight says so
    miss: float | None
    output: float | None
    usd_per_currency: float


class _Provenance(_Model):
    """Where a record came from: the same in every record of a stage."""

    stage: str
    label: str
    seed: int
    config_hash: str
    data_sha256: str
    data_path: str
    versions: dict[str, str | None]
    code: CodeRevision
    model: dict[str, Any]
    prices: Prices
    offpeak: dict[str, Any] | None
    index: dict[str, Any]
    encoder: dict[str, Any]


class RunRecord(_Provenance):
    """One finished run: written once, atomically, by the driver (records/<run_id>.json)."""

    schema_version: Literal[1]
    run_id: str
    condition: str
    module: str
    qid: str
    qtype: str
    variant: Literal["", "public", "private"]
    repeat: int
    org: str
    attempt: int = Field(ge=1)
    status: Literal["ok", "failed"]
    error: str | None
    # why a failed run failed: retries (exhausted), context_length (the prompt exceeds the model's
    # window), rejected (an endpoint rejection the body does not explain), loop (the conversation broke)
    failure_reason: str | None = None
    question: str
    question_date: str
    gold: str
    abstention: bool
    answer: str
    model_calls: int
    agent_calls: int
    tool_calls: int
    tool_rounds: int | None
    forced_answer: bool | None
    tokens: Tokens
    cost_list: float
    cost_paid: float
    wall_s: float
    setup_s: float
    # the stage was still embedding memory (harness.run.prepare) when this run started: on a CPU-only
    # machine its times share the CPU with the encoder; None = written before the harness said
    memory_preparing: bool | None = None
    retrieval_s: float
    empty_results: int
    error_results: int
    evidence: Evidence
    decomposition: Decomposition
    calls: list[ModelCall]
    tools: list[ToolCall]
    prefetch: list[Any]
    condition_notes: dict[str, Any]
    condition_config: dict[str, Any]
    adapter: dict[str, Any] | None
    endpoint: dict[str, Any]
    memory_space: dict[str, Any] | None
    finished: str
    prereg_sha256: str | None
    # what the model read and wrote; None only in records written before transcripts existed
    transcript: Transcript | None = None

    @field_validator("prefetch", mode="before")
    @classmethod
    def _memory_logs(cls, v: Any) -> Any:
        return _typed_log(v)


class PersonalRecord(_Provenance):
    """One trial x method of the personalization study (second seed paper); built in
    harness/personal/record.py, whose docstring says what each field means."""

    schema_version: Literal[1]
    run_id: str
    trial_id: str
    user_id: str
    condition: str
    module: str | None
    condition_config: dict[str, Any]
    attempt: int = Field(ge=1)
    status: Literal["ok", "failed"]
    error: str | None
    # why a failed run failed: retries, context_length, rejected (as an agent run's) or method (it broke)
    failure_reason: str | None = None
    query: str
    answer: str
    answer_words: int
    answer_s: float  # the paper's latency: the assistant's answer call alone, once it holds an endpoint slot
    queue_s: float | None = None  # waiting for an endpoint slot before that call; None: written before it was kept
    retrieval_s: float  # the method's read, without the barrier's wait
    # the read's wait for the user's writes (0 without a barrier); None: written before it was recorded
    barrier_wait_s: float | None = None
    wall_s: float  # write acceptance to answer: holds the writers' extraction for the memory methods
    endpoint: dict[str, Any] | None = None  # what the endpoint reported (model id, server); None: written before
    block: str
    block_chars: int
    injected: list[dict[str, Any]]
    n_injected: int
    candidates: list[dict[str, Any]]
    n_candidates: int
    short_read: int | None = None  # candidates the index failed to return of min(cap, visible); None: not checked
    resolved_user: str | None
    identity_rule: str | None
    foreign_items: int
    exposure_private: int
    conversation_retrieved: int
    conversation_injected: int
    audited_items: int | None = None  # the exposure audit's unrestricted read (None: no store read, or older)
    prevented_items: int | None = None  # of them, what the visibility rule kept from the reader
    prevented_conversation: int | None = None
    # trials in flight and the measured figures that capped them (harness/personal/schedule.py Capacity.describe)
    schedule: dict[str, Any] | None = None
    written_items: int | None = None  # what the trial's writes stored (the audit read after they landed)
    unaudited_writes: int | None = None  # writes not landed when the audit read (unaudited, never kept out)
    barrier: dict[str, Any] | None
    method_log: dict[str, Any]
    missed_writes: int | None
    writes_before_read: int | None
    failed_writes: int | None
    unfinished_writes: int | None
    write_errors: list[Any]
    writes: list[Any]
    calls: list[ModelCall]  # the same call type as an agent run's (writers', assistant's, extractor's)
    calls_by_role: dict[str, int]
    tokens: dict[str, int]
    assistant_tokens: dict[str, Any]
    cost_list: float
    cost_paid: float
    finished: str
    kind: Literal["personal"]
    # the assistant's call as sent and answered; None only in records written before transcripts existed
    transcript: Transcript | None = None


class StageInfo(_Open):
    """stage.json: what a stage is, fixed when it starts (its config hash guards resumption)."""

    schema_version: Literal[1]
    kind: str
    config_hash: str
    stage: str
    label: str
    seed: int
    data: dict[str, Any]
    plan: dict[str, Any]
    versions: dict[str, str | None]
    code: CodeRevision
    model: dict[str, Any] | None
    prereg: dict[str, Any] | None
    created: str
    # a job of a Hydra sweep (-m): its overrides, from which its label was derived; None = not a sweep
    sweep: dict[str, Any] | None = None
    # the fidelity manifest (harness.run.fidelity): each setting beside the paper's; None = written before it
    fidelity: dict[str, Any] | None = None
    # the schema of its records/ (its study's `record`, harness.studies); a stage.json written before
    # this field: the personalization study's folders held personal_record, every other record
    record: str | None = Field(default=None, validate_default=True)

    @field_validator("record", mode="after")
    @classmethod
    def _record_schema(cls, v, info):
        return v or ("personal_record" if info.data.get("kind") == "personal" else "record")


class Attempt(_Model):
    """attempts.jsonl: one line each time a run starts."""

    run: str
    attempt: int = Field(ge=1)
    ts: str


class MemoryPrep(_Model):
    """What a driver session's memory preparation did (harness.run.prepare); seconds from its start."""

    questions: int  # questions whose runs use the memory space
    ready: int
    chunks: int
    embedded: int  # distinct texts that went through the model (the rest were cached or repeated)
    chunk_s: float
    embed_s: float
    first_ready_s: float | None
    all_ready_s: float | None


class DriverSession(_Model):
    """sessions.jsonl: one line per driver session that ended (a killed one writes none): where the
    time to the first results went. Seconds count from the start of the session's runs."""

    started: str
    ended: str
    host: str
    pid: int
    pending: int
    started_runs: int
    stopped: str | None
    wall_s: float
    first_run_started_s: float | None
    first_record_s: float | None
    memory: MemoryPrep


class LedgerEvent(_Model):
    """ledger.jsonl: one line per model request, per response, per interrupted attempt."""

    event: Literal["request", "response", "interrupted"]
    tag: str
    attempt: int
    ts: str
    role: str | None = None
    call: str | None = None
    model: str | None = None
    path: str | None = None
    status: int | None = None
    latency_s: float | None = None
    prompt: int | None = None
    hit: int | None = None
    miss: int | None = None
    output: int | None = None
    reasoning: int | None = None
    cache_reported: bool | None = None
    usage_reported: bool | None = None
    usage_estimated: bool | None = None  # a count was not a count: estimated (harness.endpoints.usage)
    flags: list[str] | None = None
    sent: dict[str, Any] | None = None  # request: the parameters sent besides the messages, tools by name
    worst: dict[str, int] | None = None  # request: its worst case in tokens (prompt, output), what the cap counts
    unanswered: bool | None = None  # response: sent but no whole reply received (timeout, reset): worst case
    response_model: str | None = None
    finish: str | None = None  # response: the reply's finish_reason ("length": cut at its token limit)
    adapter: dict[str, Any] | None = None
    error: str | None = None
    reason: str | None = None  # interrupted: why (killed, environment failure, ...)


class JudgeIdentity(_Model):
    name: str
    model: str | None
    provider: str | None
    base_url: str | None
    identity: str
    params: dict[str, Any]


class Judgement(_Model):
    """judgements/<judge>.jsonl: one line per judgement; the latest per (run_id, kind) wins."""

    schema_version: Literal[1]
    run_id: str
    kind: str  # correct, leak (LongMemEval's answer check) or a judgement kind a module registers (judge/kinds/)
    condition: str
    variant: str
    qid: str
    qtype: str
    run_status: Literal["ok", "failed"]
    judge: JudgeIdentity
    prompt_source: str
    prompt_source_sha256: str | None
    template: str | None
    answer_slot: str | None
    prompt_sha256: str | None
    prompt: str | None
    reply: str | None
    label: bool | None
    status: Literal["ok", "unparsable", "failed", "failed_run"]
    cached: bool
    attempt: int
    usage: dict[str, int] | None
    cost_list: float
    cost_paid: float
    error: str | None
    ts: str
    # open named scores beside the label (a kind may score more than yes/no); absent for a plain label
    scores: dict[str, float] | None = None


class RubricJudgement(_Model):
    """judgements/<judge>.rubric.jsonl: the personalization study's rubric (1-5 per dimension), one line per run."""

    run_id: str
    kind: Literal["rubric"]
    condition: str | None
    trial_id: str | None
    model: str | None
    judge: dict[str, Any]
    hybrid: bool
    prompt: str | None
    prompt_sha256: str | None
    status: Literal["ok", "unparsable", "failed", "failed_run"]
    llm: dict[str, int] | None
    keyword: dict[str, float] | None
    scores: dict[str, float] | None  # the named scores the tables read (DIMENSIONS of judge/rubric.py)
    cached: bool
    error: str | None
    ts: str
    reply: str | None = None
    usage: dict[str, int] | None = None
    cost_list: float = 0.0


class BackendRecallRow(_Open):
    """recall.csv of the backend study (bench/backends): one configuration under one view, over queries and builds."""

    config: str
    backend: str
    case: str
    selectivity: float
    queries: int
    builds: int
    recall_at_10: float
    short_lists: float
    p50_ms: float
    p95_ms: float


class BackendSurvivorsRow(_Open):
    """survivors.csv of the backend study: what a filter kept of the K' candidates, beside Proposition 2."""

    config: str
    backend: str
    case: str
    selectivity: float
    k_prime: int
    local_pred: float | None
    global_pred: float


TranscriptMessage.model_rebuild()


# ------------------------------------------------------------------------------ migration


def migrate(kind: str, data: dict) -> dict:
    """Bring a file's content to SCHEMA_VERSION. Version 0 (no schema_version) is what the
    harness wrote before the schema: the same fields, minus the version, the stage kind and the
    judge's base URL, which are added here; nothing measured is filled in."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version", 0)
    if version == SCHEMA_VERSION:
        return data
    if version != 0:
        raise ValueError(f"schema_version {version!r} is not known to this harness (it reads 0 and {SCHEMA_VERSION})")
    out = dict(data, schema_version=SCHEMA_VERSION)
    if kind == "stage":
        out.setdefault("kind", "agents")
    if kind == "judgement":
        if isinstance(out.get("judge"), dict):
            out["judge"] = {"base_url": None, **out["judge"]}
        if out.get("status") == "failed_run":  # written without a call, so without usage or cost
            out = {"usage": None, "cost_list": 0.0, "cost_paid": 0.0, **out}
    return out


# ------------------------------------------------------------------------------ reading


def _explain(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors()[:6]:
        loc = ".".join(str(x) for x in e["loc"]) or "<record>"
        parts.append(f"field {loc!r}: {e['msg']}")
    more = len(exc.errors()) - 6
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


_MODELS: dict[str, type[BaseModel]] = {"record": RunRecord, "personal_record": PersonalRecord, "stage": StageInfo,
                                       "judgement": Judgement, "rubric_judgement": RubricJudgement,
                                       "backend_recall": BackendRecallRow, "backend_survivors": BackendSurvivorsRow,
                                       "ledger": LedgerEvent, "attempt": Attempt,
                                       "session": DriverSession}


def parse(kind: str, data: Any, path: str | Path, line: int | None = None) -> BaseModel:
    """Validate one decoded object as `kind`, migrating older versions; RecordError if it does not fit."""
    model = _MODELS[kind]
    try:
        if kind in ("record", "personal_record", "stage", "judgement"):
            data = migrate(kind, data)
        return model.model_validate(data)
    except ValidationError as exc:
        raise RecordError(path, _explain(exc), line) from None
    except ValueError as exc:
        raise RecordError(path, str(exc), line) from None


def read_json(kind: str, path: str | Path) -> BaseModel:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordError(p, f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except OSError as exc:
        raise RecordError(p, f"unreadable ({exc})") from None
    return parse(kind, data, p)


def dump(model: BaseModel) -> str:
    """The JSON text a model is written as (sorted keys, so files compare byte for byte)."""
    return json.dumps(model.model_dump(mode="json"), indent=1, ensure_ascii=False, sort_keys=True)


# ------------------------------------------------------------------------------ what may be published


# WHY here: one place says, for every field of every file a stage writes, what `make publish` may do with it
# (harness.records.privacy.published applies it; analysis/publish.py writes nothing else). A field or a file
# without a policy is withheld. The policies:
PUBLISHED = "published"  # as written: ids, enums, numbers, hashes, times (a string still passes the last scan)
TEXT = "text"  # the harness's own text (the fidelity manifest's lines): published, the shapes of secrets replaced
PRIVATE_TEXT = "private text"  # text a model or judge read or wrote, a question: withheld when the run saw a
#                                private unit, else the second line by structure too (privacy.free_text)
REBUILT = "rebuilt"  # rebuilt from structure: keys kept; a leaf is kept only when it is a number, a flag or a
#                      plain name that is no host or address; a URL becomes <endpoint url> or scheme://<host>, a
#                      local path a placeholder
#                      without names, anything else (a DSN, a note, an interpolation) <withheld>
WITHHELD = "withheld"
IDENTITY = "identity"  # provider:model@URL:hash: the URL replaced, the rest rebuilt
MEMORY_LOG = "memory log"  # a tool's log: rebuilt, its `query` private text
CODE = "structure"  # free text the study needs only as structure (an error, a flag, a reason): rebuilt to its error
#                class names, HTTP status and the words of CODE_WORDS, in order; nothing else of it goes out
TREE_FILE = "tree file"  # a path of the harness's tree (a modified file): kept only when HEAD holds it; a file the
#                          publisher added (staged or not) is theirs, its name withheld
VERSIONS = "versions"  # package -> version: a version's public part as it is; its local label (`+cpu`, `+cu121`)
#                       only when it names a build of the packages' own, never an organisation's (`+acmecorp`)
REGISTERED = "registered"  # a code name (a condition's module): kept only when it is registered here, else withheld
TOOL_NAME = "tool name"  # the name of a tool the model called: a tool of the tree's as it is; any other name is the
#                          model's text (private text: withheld in a private run, the free-text rule otherwise)
CONFIG = "config:"  # "config:<node>": a configuration node, published by the declarations of its typed keys
#                    (harness.run.settings.publish_names): a string only under a key declared to carry a name and
#                    passing its check, numbers and flags as they are, any other string <withheld>


def config(node: str) -> str:
    """The policy of a field that holds a configuration node of kind `node` (a condition, an endpoint, an index)."""
    return CONFIG + node


# the words a flag, a reason or an error is rebuilt from (CODE): what the harness itself writes in them
CODE_WORDS = frozenset("""
usage missing null negative estimated cached tokens prompt completion total prompt_tokens completion_tokens
total_tokens cached_tokens reasoning_tokens above below beyond context context_length rejected record_invalid
finish_reason length cut tool call calls arguments without function name json string serialised timeout timed out
rate limit rate_limit retry retry_failed failed failure run attempted again stage stopped budget interrupted
cancelled connection refused reset unavailable overloaded server error invalid request response empty reply
truncated max_tokens stop unknown sigterm sigint killed exhausted exceeded spent breaker open quota unauthorized
forbidden not found bad gateway whole number object model judge answer schema validation parse decode encoding
memory index search embedding encoder redis postgres sqlite pgvector backend shard lock driver worker crashed
exit signal deadline wall clock cost price dry interrupt keyboard resumed resume orphaned duplicate
""".split())

# the keys of a memory call's log (MEMORY_LOG) whose values are rebuilt (names kept); any other key's value is
# structure (CODE): a condition's extra log key publishes numbers, flags and known words only
# the keys of a memory log whose values the model wrote (its arguments): private text, as the tool call's arguments
MODEL_WRITTEN_LOG_KEYS = frozenset("query session round since until name window k arguments question command".split())
MEMORY_LOG_KEYS = frozenset("""
kind agent view org scope units query k scoring barrier dropped threshold cap budget_tokens window session round
since until name uid owner visibility ids sessions guidance injected rank score time shown
""".split())

POLICY: dict[str, dict[str, Any]] = {
    "provenance": {"stage": PUBLISHED, "label": PUBLISHED, "seed": PUBLISHED, "config_hash": PUBLISHED,
                   "data_sha256": PUBLISHED, "data_path": config("file"), "versions": VERSIONS, "code": "code",
                   "model": config("endpoint"), "prices": config("prices"), "offpeak": config("offpeak"),
                   "index": config("index"), "encoder": config("encoder")},
    "record": {"schema_version": PUBLISHED, "run_id": PUBLISHED, "condition": PUBLISHED, "module": REGISTERED,
               "qid": PUBLISHED, "qtype": PUBLISHED, "variant": PUBLISHED, "repeat": PUBLISHED, "org": PUBLISHED,
               "attempt": PUBLISHED, "status": PUBLISHED, "error": CODE, "failure_reason": CODE,
               "question": PRIVATE_TEXT, "question_date": PUBLISHED, "gold": PRIVATE_TEXT, "abstention": PUBLISHED,
               "answer": PRIVATE_TEXT, "model_calls": PUBLISHED, "agent_calls": PUBLISHED, "tool_calls": PUBLISHED,
               "tool_rounds": PUBLISHED, "forced_answer": PUBLISHED, "tokens": PUBLISHED, "cost_list": PUBLISHED,
               "cost_paid": PUBLISHED, "wall_s": PUBLISHED, "setup_s": PUBLISHED, "memory_preparing": PUBLISHED,
               "retrieval_s": PUBLISHED, "empty_results": PUBLISHED, "error_results": PUBLISHED,
               "evidence": REBUILT, "decomposition": PUBLISHED, "calls": ["model_call"], "tools": ["tool_call"],
               "prefetch": MEMORY_LOG, "condition_notes": "condition_notes", "condition_config": config("condition"),
               "adapter": config("adapter"),
               "endpoint": REBUILT, "memory_space": REBUILT, "finished": PUBLISHED, "prereg_sha256": PUBLISHED,
               "transcript": PRIVATE_TEXT},
    "code": {"commit": PUBLISHED, "dirty": PUBLISHED, "modified": TREE_FILE, "untracked": WITHHELD},
    # what a condition says of the access it built (conditions/*.py `notes=`): the keys the tree's conditions write;
    # a key no condition here declares (a plugin's `operator: jdoe`) is withheld, key and value
    "condition_notes": {"runtime": REBUILT, "session_search_shape": REBUILT, "session_search_tool_sha256": PUBLISHED,
                        "schema_chars": PUBLISHED, "compact": PUBLISHED, "store": "store_notes", "stores": REBUILT,
                        "sandbox": REBUILT, "fanout_mode": PUBLISHED, "guidance": PUBLISHED, "asked_agents": PUBLISHED,
                        "asked_max_rounds": PUBLISHED, "history_in_prompt": PUBLISHED, "injected": PUBLISHED,
                        "dropped": PUBLISHED, "barrier": REBUILT, "probe_kind": PUBLISHED, "probe_truth": PUBLISHED},
    "store_notes": {"agent": PUBLISHED, "sessions": PUBLISHED, "rounds": PUBLISHED, "bytes": PUBLISHED,
                    "build_s": PUBLISHED, "cache_hit": PUBLISHED},
    "model_call": {"prompt": PUBLISHED, "hit": PUBLISHED, "miss": PUBLISHED, "output": PUBLISHED,
                   "reasoning": PUBLISHED, "cache_reported": PUBLISHED, "latency_s": PUBLISHED, "finish": PUBLISHED,
                   "role": PUBLISHED, "cost_list": PUBLISHED, "cost_paid": PUBLISHED, "ts": PUBLISHED,
                   "usage_reported": PUBLISHED, "usage_estimated": PUBLISHED, "flags": CODE, "sent": config("params"),
                   "dropped": PUBLISHED},
    "tool_call": {"name": TOOL_NAME, "arguments": PRIVATE_TEXT, "chars": PUBLISHED, "sessions": PUBLISHED,
                  "empty": PUBLISHED, "error": CODE, "retrieval_s": PUBLISHED, "wall_s": PUBLISHED,
                  "cut": PUBLISHED, "log": MEMORY_LOG, "failure": PUBLISHED, "overrode_defaults": CODE},
    "transcript": {"role": PUBLISHED, "system_sha256": PUBLISHED, "tools": PUBLISHED, "messages": TEXT},
    "stage": {"schema_version": PUBLISHED, "kind": PUBLISHED, "config_hash": PUBLISHED, "stage": PUBLISHED,
              "label": PUBLISHED, "seed": PUBLISHED, "data": config("data"), "plan": REBUILT, "versions": VERSIONS,
              "code": "code", "model": config("endpoint"), "prereg": REBUILT, "created": PUBLISHED, "sweep": REBUILT,
              "fidelity": "fidelity", "record": PUBLISHED},
    "fidelity": {"preset": REBUILT, "accepted": REBUILT, "allow_deviation": REBUILT, "rows": ["fidelity_row"]},
    "fidelity_row": {"key": REBUILT, "setting": TEXT, "paper": TEXT, "stage": REBUILT, "status": PUBLISHED,
                     "detail": TEXT, "pool": REBUILT, "refuse": PUBLISHED},
    "attempt": {"run": PUBLISHED, "attempt": PUBLISHED, "ts": PUBLISHED},
    "session": {"started": PUBLISHED, "ended": PUBLISHED, "host": WITHHELD, "pid": PUBLISHED, "pending": PUBLISHED,
                "started_runs": PUBLISHED, "stopped": CODE, "wall_s": PUBLISHED, "first_run_started_s": PUBLISHED,
                "first_record_s": PUBLISHED, "memory": PUBLISHED},
    "ledger": {"event": PUBLISHED, "tag": PUBLISHED, "attempt": PUBLISHED, "ts": PUBLISHED, "role": PUBLISHED,
               "call": PUBLISHED, "model": config("model_id"), "path": REBUILT, "status": PUBLISHED,
               "latency_s": PUBLISHED,
               "prompt": PUBLISHED, "hit": PUBLISHED, "miss": PUBLISHED, "output": PUBLISHED,
               "reasoning": PUBLISHED, "cache_reported": PUBLISHED, "usage_reported": PUBLISHED,
               "usage_estimated": PUBLISHED, "flags": CODE, "sent": config("params"),
               "response_model": config("model_id"),
               "finish": PUBLISHED, "adapter": config("adapter"), "error": CODE, "reason": CODE, "worst": PUBLISHED,
               "unanswered": PUBLISHED},
    "judgement": {"schema_version": PUBLISHED, "run_id": PUBLISHED, "kind": PUBLISHED, "condition": PUBLISHED,
                  "variant": PUBLISHED, "qid": PUBLISHED, "qtype": PUBLISHED, "run_status": PUBLISHED,
                  "judge": "judge", "prompt_source": REBUILT, "prompt_source_sha256": PUBLISHED,
                  "template": TEXT, "answer_slot": PUBLISHED, "prompt_sha256": PUBLISHED, "prompt": PRIVATE_TEXT,
                  "reply": PRIVATE_TEXT, "label": PUBLISHED, "status": PUBLISHED, "cached": PUBLISHED,
                  "attempt": PUBLISHED, "usage": PUBLISHED, "cost_list": PUBLISHED, "cost_paid": PUBLISHED,
                  "error": CODE, "ts": PUBLISHED, "scores": PUBLISHED},
    "judge": {"name": config("preset_name"), "model": config("model_id"), "provider": config("provider"),
              "base_url": config("endpoint_url"), "identity": IDENTITY, "params": config("params")},
    # files whose content belongs to a component (a driver lock): structure only
    "config": {"*": REBUILT},
    # a stage's config.yaml: the composed configuration, by the declarations of its typed keys
    "stage_config": {"*": config("top")},
    # judgements/<judge>.info.json (judge.answer_check): the judge's endpoint preset and prompt set, as configuration
    "judge_info": {"judge": config("endpoint"), "identity": IDENTITY, "prompts": config("judge_prompts"),
                   "org_private_explanation": TEXT, "last_summary": REBUILT, "updated": PUBLISHED},
}
POLICY["record"] = {**POLICY["provenance"], **POLICY["record"]}

# In a run whose context held a private agent's unit, every field the run fills goes out only as what the harness
# computed (privacy.Publisher.computed: ids, numbers, times, names of the harness, its stage and its data), so no
# word a model, a judge or a server wrote reaches a published byte through a field nobody thought could hold one.
# The fields no run fills, by kind: a record's provenance (the stage's, written before any run starts, as
# stage.json holds it); a configuration node, an identity and a registered name are published by their
# declarations in every run.
RUN_FREE: dict[str, frozenset[str]] = {"record": frozenset(POLICY["provenance"])}

# every file of a stage folder a publish may write, by its path (fnmatch, first match), and the policy of its
# objects ("prompt": a system prompt, published with the transcripts that use it); any other file is withheld
FILE_POLICY: list[tuple[str, str]] = [
    ("stage.json", "stage"), ("config.yaml", "stage_config"), ("records/*.json", "record"), ("prompts/*.txt", "prompt"),
    ("ledger.jsonl", "ledger"), ("shards/*/ledger.jsonl", "ledger"), ("attempts.jsonl", "attempt"),
    ("shards/*/attempts.jsonl", "attempt"), ("judgements/*.attempts.jsonl", "attempt"),
    ("judgements/*.info.json", "judge_info"), ("judgements/*.jsonl", "judgement"), ("sessions.jsonl", "session"),
    ("driver.lock", "config"), ("shards/*/lock", "config")]


def file_policy(rel: str) -> str | None:
    """The policy of a stage folder's file (a key of POLICY, or "prompt"); None: the file is withheld."""
    from fnmatch import fnmatchcase

    return next((kind for pattern, kind in FILE_POLICY if fnmatchcase(rel, pattern) and
                 rel.count("/") == pattern.count("/")), None)
