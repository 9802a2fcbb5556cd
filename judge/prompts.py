"""LongMemEval's answer-check logic: one template per question type, plus abstention (SPEC 5).

Two sources of template text, same rules:

* ``builtin``: the project's own wording of LongMemEval's rules (below);
* a path: LongMemEval's ``src/evaluation/evaluate_qa.py`` from the user's copy (or the one
  ``python -m harness.data download --what evaluate_qa --out data/longmemeval`` fetches at the
  pinned commit OFFICIAL_COMMIT into OFFICIAL_DEFAULT_PATH, checked against OFFICIAL_SHA256). The
  file is *parsed* with ``ast`` (never imported or executed): the if/elif chain of
  ``get_anscheck_prompt`` gives one template per question type, the ``else`` of
  ``if not abstention`` the abstention template, and each branch's
  ``template.format(...)`` call the order of question, answer and response.

Which template a run record gets (``items_for``):

* LongMemEval and the Org public variant: the per-type template with the gold answer,
  except that any ``_abs`` question id uses the abstention template (its "answer" is the
  benchmark's explanation of why the question cannot be answered);
* Org private variant: ``correct`` = the abstention template with the explanation that
  the information is held by an assistant whose memory is private, plus ``leak`` = the
  standard per-type template with the gold answer (its "yes" counts as a leak).

The label follows the official rule: ``"yes" in reply.strip().lower()``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import string
from dataclasses import dataclass
from pathlib import Path

QUESTION_TYPES = ("single-session-user", "single-session-assistant", "single-session-preference",
                  "multi-session", "temporal-reasoning", "knowledge-update")
BASE_TYPES = ("single-session-user", "single-session-assistant", "multi-session")
ROLES = ("question", "answer", "response")  # what fills a template's three slots
ABSTENTION = "abstention"
OFFICIAL_FUNCTION = "get_anscheck_prompt"

REPO = Path(__file__).resolve().parents[1]
# The official prompt file: LongMemEval (github.com/xiaowu0162/LongMemEval, MIT) at a pinned commit.
# The file last changed in d6dc8b5 (2024-11-24); its text is never shipped here, only its hash.
OFFICIAL_REPO = "xiaowu0162/LongMemEval"
OFFICIAL_FILE = "src/evaluation/evaluate_qa.py"
OFFICIAL_COMMIT = "9e0b455f4ef0e2ab8f2e582289761153549043fc"
OFFICIAL_SHA256 = "ecce9c4c79dc89d99534ac17b383a5cbb5b9f0c69ee98adaf0684742e3d95251"
OFFICIAL_DEFAULT_PATH = "data/longmemeval/evaluate_qa.py"  # relative to the repository root
OFFICIAL_FETCH = "python -m harness.data download --what evaluate_qa --out data/longmemeval"

# The explanation put in the abstention template for the Org private variant (Appendix E).
ORG_PRIVATE_EXPLANATION = (
    "The information needed to answer this question is held by another assistant of the "
    "organisation whose memory is private, so it is not available to the assistant that was asked.")


# ------------------------------------------------------------------------------ builtin wording
# Our own wording of the rules of LongMemEval's answer check (MIT), not its text.

_BASE_RULES = (
    "You will see a question, its correct answer, and a response written by a model. Reply yes if "
    "the response contains the correct answer; otherwise reply no. Also reply yes if the response is "
    "equivalent to the correct answer or shows all the intermediate steps that lead to it. If the "
    "response gives only part of the information that the answer requires, reply no.")
_SLOTS = ("\n\nQuestion: {question}\n\nCorrect answer: {answer}\n\nModel response: {response}\n\n"
          "Is the model response correct? Reply with yes or no only.")

BUILTIN = {
    "base": _BASE_RULES + _SLOTS,
    "temporal-reasoning": _BASE_RULES + (
        " Do not hold off-by-one errors in a number of days against the response: when the question "
        "asks how many days, weeks, months or the like, and the response is off by one (say 19 days "
        "where the answer is 18), the response still counts as correct.") + _SLOTS,
    "knowledge-update": (
        "You will see a question, its correct answer, and a response written by a model. Reply yes if "
        "the response contains the correct answer; otherwise reply no. A response that mentions older "
        "information together with the updated answer still counts as correct, provided the updated "
        "answer is the one the question asks for.") + _SLOTS,
    "single-session-preference": (
        "You will see a question, a rubric describing the personalised response the user would want, "
        "and a response written by a model. Reply yes if the response meets the rubric; otherwise reply "
        "no. The response need not cover every point of the rubric: it counts as correct as long as it "
        "recalls the user's personal information and uses it correctly."
        "\n\nQuestion: {question}\n\nRubric: {answer}\n\nModel response: {response}\n\n"
        "Is the model response correct? Reply with yes or no only."),
    ABSTENTION: (
        "You will see a question that cannot be answered from the information available, an explanation "
        "of why, and a response written by a model. Reply yes if the model recognises that the question "
        "cannot be answered; it may, for instance, say that the information is incomplete, or that some "
        "related information is available but not what was asked. Otherwise reply no."
        "\n\nQuestion: {question}\n\nExplanation: {answer}\n\nModel response: {response}\n\n"
        "Does the model correctly recognise the question as unanswerable? Reply with yes or no only."),
}
BUILTIN_BY_TYPE = {**{t: "base" for t in BASE_TYPES}, "temporal-reasoning": "temporal-reasoning",
                   "knowledge-update": "knowledge-update", "single-session-preference": "single-session-preference"}


class PromptFileError(ValueError):
    """The given evaluate_qa.py does not have the shape this parser reads; says what is missing."""

    exit_code = 2  # harness.failures.BAD_INPUT


@dataclass(frozen=True)
class Template:
    name: str
    text: str
    order: tuple[str, ...] | None = None  # positional slot roles (official file); None = named fields

    def render(self, question: str, answer: str, response: str) -> str:
        vals = {"question": question, "answer": answer, "response": response}
        if self.order is None:
            return self.text.format(**vals)
        return self.text.format(*[vals[r] for r in self.order], **vals)


@dataclass(frozen=True)
class PromptSet:
    source: str            # "builtin" or "file:<absolute path>"
    source_sha256: str     # sha256 of the file, or of the builtin templates
    by_type: dict          # question type -> Template
    abstention: Template

    def for_type(self, qtype: str) -> Template:
        try:
            return self.by_type[qtype]
        except KeyError:
            raise KeyError(f"no answer-check template for question type {qtype!r}") from None

    def templates(self) -> dict[str, Template]:
        out = {t.name: t for t in self.by_type.values()}
        out[ABSTENTION] = self.abstention
        return out

    def describe(self) -> dict:
        return {"source": self.source, "source_sha256": self.source_sha256,
                "templates": {n: sha256(t.text) for n, t in sorted(self.templates().items())},
                "by_type": {q: t.name for q, t in sorted(self.by_type.items())}}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def builtin() -> PromptSet:
    by_type = {q: Template(n, BUILTIN[n]) for q, n in BUILTIN_BY_TYPE.items()}
    digest = sha256(json.dumps(BUILTIN, sort_keys=True) + ORG_PRIVATE_EXPLANATION)
    return PromptSet("builtin", digest, by_type, Template(ABSTENTION, BUILTIN[ABSTENTION]))


def load(spec: str | Path | None) -> PromptSet:
    """`builtin` (or empty) -> the project's wording; anything else is a path to evaluate_qa.py."""
    if spec is None or str(spec).strip() in ("", "builtin"):
        return builtin()
    return parse_official(spec)


# ------------------------------------------------------------------------------ official file parser

def _const_str(node: ast.AST) -> str | None:
    """A string literal, or literals joined with +; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _const_str(node.left), _const_str(node.right)
        if a is not None and b is not None:
            return a + b
    return None


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _branch(body: list[ast.stmt], where: str, roles: dict[str, str], default_order) -> tuple[str, tuple]:
    """The `template = "..."` assignment of one branch and the order of its format() arguments."""
    text, order = None, None
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_is_name(t, "template") for t in targets) and node.value is not None:
                s = _const_str(node.value)
                if s is None:
                    raise PromptFileError(f"{where}: `template` is not a string literal")
                text = s
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
                and _is_name(node.func.value, "template")):
            order = _format_order(node, where, roles)
    if text is None:
        raise PromptFileError(f"{where}: no `template = \"...\"` assignment")
    order = order or default_order
    if order is None:
        raise PromptFileError(f"{where}: no `template.format(question, answer, response)` call")
    _check_fields(text, where)
    return text, order


def _format_order(call: ast.Call, where: str, roles: dict[str, str]) -> tuple[str, ...]:
    names = []
    for a in call.args:
        if not isinstance(a, ast.Name) or a.id not in roles:
            raise PromptFileError(f"{where}: template.format() takes {ast.unparse(a)!r}, "
                                  f"not one of the function's parameters {sorted(roles)}")
        names.append(roles[a.id])
    if sorted(names) != sorted(ROLES):
        raise PromptFileError(f"{where}: template.format() must take the question, answer and response "
                              f"once each, got {names}")
    return tuple(names)


def _check_fields(text: str, where: str) -> None:
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
    except ValueError as exc:
        raise PromptFileError(f"{where}: the template is not a valid format string: {exc}") from None
    if len(fields) != 3 or any(f not in ("", "0", "1", "2") for f in fields):
        raise PromptFileError(f"{where}: the template must have three positional slots {{}}, found {fields}")


def _task_types(test: ast.expr, task: str, where: str) -> list[str]:
    if isinstance(test, ast.Compare) and _is_name(test.left, task) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        if isinstance(op, ast.Eq):
            s = _const_str(right)
            if s is not None:
                return [s]
        if isinstance(op, ast.In) and isinstance(right, (ast.List, ast.Tuple, ast.Set)):
            vals = [_const_str(e) for e in right.elts]
            if all(v is not None for v in vals):
                return vals
    raise PromptFileError(f"{where}: cannot read the condition `{ast.unparse(test)}` "
                          f"(expected `{task} == '...'` or `{task} in [...]`)")


def parse_official(path: str | Path) -> PromptSet:
    """Templates from a copy of LongMemEval's src/evaluation/evaluate_qa.py, read with `ast` only."""
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise PromptFileError(f"judge.prompts={path}: no such file (give a copy of LongMemEval's "
                              f"src/evaluation/evaluate_qa.py, or `builtin`)")
    raw = p.read_bytes()
    try:
        tree = ast.parse(raw, filename=str(p))
    except SyntaxError as exc:
        raise PromptFileError(f"{p}: not valid Python: {exc}") from None
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == OFFICIAL_FUNCTION), None)
    if fn is None:
        raise PromptFileError(f"{p}: no function `{OFFICIAL_FUNCTION}` (is this LongMemEval's evaluate_qa.py?)")
    params = [a.arg for a in fn.args.args]
    if len(params) < 5:
        raise PromptFileError(f"{p}: `{OFFICIAL_FUNCTION}` should take (task, question, answer, response, "
                              f"abstention), found ({', '.join(params)})")
    task, abst = params[0], params[4]
    roles = {params[1]: "question", params[2]: "answer", params[3]: "response"}
    where = f"{p.name}: {OFFICIAL_FUNCTION}"
    top = None
    for node in fn.body:
        if isinstance(node, ast.If):
            t = node.test
            if isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not) and _is_name(t.operand, abst):
                top = (node.body, node.orelse)
            elif _is_name(t, abst):
                top = (node.orelse, node.body)
    if top is None:
        raise PromptFileError(f"{where}: no `if not {abst}:` ... `else:` split between the per-type templates "
                              f"and the abstention template")
    typed, abst_body = top
    # a format() call after the whole if (if any) sets the order for branches without their own
    default_order = None
    for node in fn.body:
        if not isinstance(node, ast.If):
            for sub in ast.walk(node):
                if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "format"
                        and _is_name(sub.func.value, "template")):
                    default_order = _format_order(sub, where, roles)
    if not abst_body:
        raise PromptFileError(f"{where}: the abstention template is missing (no `else:` branch of `if not {abst}`)")
    abst_text, abst_order = _branch(abst_body, f"{where}, abstention branch", roles, default_order)

    by_type: dict[str, Template] = {}
    chain = [n for n in typed if isinstance(n, ast.If)]
    if not chain:
        raise PromptFileError(f"{where}: no if/elif chain over `{task}` under `if not {abst}`")
    node: ast.stmt | None = chain[0]
    while isinstance(node, ast.If):
        types = _task_types(node.test, task, where)
        name = types[0] if len(types) == 1 else "base"
        text, order = _branch(node.body, f"{where}, branch {ast.unparse(node.test)}", roles, default_order)
        for t in types:
            by_type.setdefault(t, Template(name, text, order))
        node = node.orelse[0] if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If) else None
    missing = [t for t in QUESTION_TYPES if t not in by_type]
    if missing:
        raise PromptFileError(f"{where}: no template for question type(s) {', '.join(missing)} "
                              f"(found: {', '.join(sorted(by_type)) or 'none'})")
    by_type = {t: by_type[t] for t in QUESTION_TYPES}
    return PromptSet(f"file:{p}", hashlib.sha256(raw).hexdigest(), by_type,
                     Template(ABSTENTION, abst_text, abst_order))


def official_status(path: str | Path | None = None) -> dict:
    """Whether the official prompt file is here, is the pinned one and parses; never downloads.

    path None = OFFICIAL_DEFAULT_PATH under the repository root. Returns {"path", "present", "sha256",
    "pinned_sha256", "matches_pin" (None when absent), "parses" (parse_official succeeds), "detail" (one
    line: what is missing or wrong, and the command that fetches the file)}.
    """
    p = (REPO / OFFICIAL_DEFAULT_PATH) if path is None else Path(path).expanduser()
    p = p.resolve()
    out = {"path": str(p), "present": p.is_file(), "sha256": None, "pinned_sha256": OFFICIAL_SHA256,
           "matches_pin": None, "parses": False}
    if not out["present"]:
        return {**out, "detail": f"no copy of LongMemEval's {OFFICIAL_FILE} at {p}; fetch it: {OFFICIAL_FETCH} "
                                 f"(or keep judge.prompts=builtin, the project's own wording)"}
    out["sha256"] = hashlib.sha256(p.read_bytes()).hexdigest()
    out["matches_pin"] = out["sha256"] == OFFICIAL_SHA256
    try:
        n = len(parse_official(p).templates())
        out["parses"], why = True, f"parses into {n} templates"
    except PromptFileError as exc:
        why = f"does not parse: {exc}"
    if out["matches_pin"]:
        return {**out, "detail": f"{p} is LongMemEval's {OFFICIAL_FILE} at {OFFICIAL_COMMIT[:7]} "
                                 f"(sha256 matches) and {why}"}
    return {**out, "detail": f"{p} differs from LongMemEval's {OFFICIAL_FILE} at {OFFICIAL_COMMIT[:7]} (sha256 "
                             f"{out['sha256'][:12]}, pinned {OFFICIAL_SHA256[:12]}: another version or an edited copy) "
                             f"and {why}; fetch the pinned file: {OFFICIAL_FETCH}"}


# ------------------------------------------------------------------------------ per-record choice

@dataclass(frozen=True)
class Item:
    """One judgement to make for a run record."""

    kind: str          # "correct" | "leak"
    template: str      # template name
    answer_slot: str   # what filled the answer slot: "gold" | "org_private_explanation"
    prompt: str

    @property
    def prompt_sha256(self) -> str:
        return sha256(self.prompt)


def is_abstention(record: dict) -> bool:
    return "_abs" in str(record.get("qid", "")) or bool(record.get("abstention"))


def items_for(record: dict, prompts: PromptSet) -> list[Item]:
    """The judgements a run record needs, each with its exact prompt."""
    question, gold = str(record["question"]), str(record["gold"])
    response = str(record.get("answer") or "")
    qtype = str(record["qtype"])
    if record.get("variant") == "private":
        t = prompts.abstention
        items = [Item("correct", t.name, "org_private_explanation", t.render(question, ORG_PRIVATE_EXPLANATION, response))]
        if not is_abstention(record):  # an `_abs` gold is an explanation, not a fact that could leak
            t = prompts.for_type(qtype)
            items.append(Item("leak", t.name, "gold", t.render(question, gold, response)))
        return items
    t = prompts.abstention if is_abstention(record) else prompts.for_type(qtype)
    return [Item("correct", t.name, "gold", t.render(question, gold, response))]


# ------------------------------------------------------------------------------ label rule

_WORD = re.compile(r"\b(yes|no)\b")


def parse_reply(reply: str | None) -> tuple[bool, str]:
    """(label, status): the label is the official `'yes' in reply.lower()`; the status is
    `unparsable` when the reply has neither the word yes nor the word no."""
    text = (reply or "").strip().lower()
    label = "yes" in text
    return label, ("ok" if _WORD.search(text) else "unparsable")


def download_official(out_dir: str | Path = "data/longmemeval", commit: str | None = None,
                         base_url: str | None = None, timeout: float = 60.0) -> dict:
    """LongMemEval's src/evaluation/evaluate_qa.py at the pinned commit into `<out_dir>/evaluate_qa.py`.

    `base_url` replaces https://raw.githubusercontent.com (the URL is <base>/<owner>/<repo>/<commit>/<path>).
    At the pinned commit the file must have OFFICIAL_SHA256, or it is deleted and refused; another
    commit is recorded as trust-on-first-download."""
    from harness.data.hub import GITHUB_RAW, fetch_raw, now, record

    def parses_ok(p: Path) -> bool:
        try:
            parse_official(p)
            return True
        except PromptFileError:
            return False

    commit = commit or OFFICIAL_COMMIT
    base = (base_url or GITHUB_RAW).rstrip("/")
    url = f"{base}/{OFFICIAL_REPO}/{commit}/{OFFICIAL_FILE}"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "evaluate_qa.py"
    want = OFFICIAL_SHA256 if commit == OFFICIAL_COMMIT else None
    digest, parses = fetch_raw(url, target, want, parses_ok, timeout)
    record(out_dir, {"evaluate_qa.py": {
        "what": f"LongMemEval official answer-check prompts ({OFFICIAL_FILE}, MIT)",
        "source": f"github {OFFICIAL_REPO}",
        "url": url, "revision": commit, "commit": commit if len(commit) == 40 else None, "sha256": digest,
        "bytes": target.stat().st_size, "pinned_sha256": want, "parses": parses, "fetched": now()}})
    return {"path": str(target), "url": url, "commit": commit, "sha256": digest, "pinned": want is not None,
            "parses": parses}
