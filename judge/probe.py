"""`python -m judge.probe stage=NAME [judge=...]` (`make probe`): how often the judge is wrong.

From the stage's own questions (its records' question, gold and type) the probe plants answers
whose correctness is known and has the judge grade them with the stage's prompts:

* planted wrong: another question's gold (`other_gold`), the gold with the asked number changed
  (`changed_number`) or the asked date changed (`changed_date`), the gold named and denied
  (`denied`: it contains the gold verbatim), and for an abstention question a confident answer
  (`confident_answer`);
* planted right: right by construction, whatever the gold's punctuation or sentence structure means:
  the whole gold restated in a frame (`paraphrase`), the whole gold with extra words around it
  (`extra_words`), the whole gold with each of its numbers in words (`number_words`: it shares no
  surface form with the gold; only where every number of the gold is a plain whole number below
  1000 and the gold names no date); for an abstention question a plain refusal. Nothing of the
  gold is dropped or moved: a transformation whose truth depends on reading the gold (reordering
  its comma or "and" parts: "Portland, Oregon", "Pride and Prejudice, Emma and Persuasion", "Smith,
  John", answers to a "respectively" question; dropping a sentence: "A watch for my dad. I also gave
  my mom a scarf.") is never planted as right.

A wrong answer is planted only where it provably changes the answer: a number changed only when
the question asks for a quantity and the number is the gold's first (what the question asks), with
every accepted alternative ("12 weeks if rounded up", "22 days is also acceptable") cut from the
planted answer; a date changed only when the question asks when.
Every planted answer is then checked by a second, independent rule (`check`: by what the answer
contains, not by how it was made) and dropped, and counted, when it fails. A plain substring
matcher (`substring_judge`) is graded on the same answers as a control: a probe it passed would
not tell a judge from string matching.

A planted answer becomes a pseudo-record (`probe.<kind>.<qid>.r0`, condition `probe`) judged
through judge/answer_check.py like any run: the same prompts, the reply cache, the metering
proxy into the stage's ledger (tag `judge-probe:<id>`, role judge) and the stage's spending cap.
Its judgements go to judgements/<judge>.probe.jsonl, which no analysis takes for correctness;
`make analyze` turns them into false-positive and false-negative rates per question type with
Wilson intervals beside the accuracy they bound (analysis/tables/judge_error.py). Seeded: the
same stage and seed plant the same answers.
"""

from __future__ import annotations

import random
import re
import sys

import hydra
from omegaconf import DictConfig

from harness.failures import STOPPED, exits_with_code
from harness.records import RunDir
from harness.run import sweep as _sweep  # noqa: F401  (hydra.sweep.dir's resolver: a dry run writes no sweep file)

WRONG = ("other_gold", "changed_number", "changed_date", "denied", "confident_answer")
RIGHT = ("paraphrase", "extra_words", "number_words", "refusal")
SUFFIX = "probe"
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_NUMBER = re.compile(r"(?<![\w.,$])\$?(\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w,]\d)")
_MONTH = re.compile(r"\b(" + "|".join(MONTHS) + r")\b")
_DAY = re.compile(r"\b(" + "|".join(DAYS) + r")\b")
_ISO = re.compile(r"\b(\d{4})[-/](\d{2})[-/](\d{2})\b")
# the question asks for a quantity / for a time
_ASKS_NUMBER = re.compile(r"\bhow (many|much|long|old|far|often|fast|big|tall|heavy)\b|\bwhat (percentage|number|"
                          r"amount|price|total|age|score|time|year)\b|\bhow many\b", re.I)
# "when" as the question's word ("When did I ...", "... when was it"), not a clause ("What was I doing when I met ...")
_ASKS_WHEN = re.compile(r"^\W*when\b|\bwhen (did|was|were|is|are|do|does|will|would|had|has|have)\b|"
                        r"\b(what|which) (date|day|month|year)\b", re.I)
# a sentence of a gold that states an accepted alternative ("22 days ... is also acceptable", "12 weeks if rounded up")
_ALTERNATIVE = re.compile(r"\b(accept|acceptable|accepted|also|rounded|alternatively)\b", re.I)
_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
          "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")


def numbers(text: str) -> set[float]:
    """Every number written in digits in `text` ("$2,500" is 2500)."""
    return {float(m.group(0).lstrip("$").replace(",", "")) for m in
            re.finditer(r"(?<![\w.])\$?\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\w.,])\d+(?:\.\d+)?", text)}


def in_words(x: int) -> str | None:
    """0..999 in English words (None beyond)."""
    if x < 0 or x > 999:
        return None
    if x < 20:
        return _WORDS[x]
    if x < 100:
        return _TENS[x // 10] + ("" if x % 10 == 0 else "-" + _WORDS[x % 10])
    rest = x % 100
    return _WORDS[x // 100] + " hundred" + ("" if rest == 0 else " and " + in_words(rest))


def from_words(text: str) -> set[int]:
    """Every number 0..999 written in words in `text` (the check of `number_words`, independent of `in_words`)."""
    units = {w: i for i, w in enumerate(_WORDS)}
    tens = {w: 10 * i for i, w in enumerate(_TENS) if w}
    out, cur, seen, prev = set(), 0, False, ""
    for tok in re.findall(r"[a-z]+", text.lower()) + ["."]:
        if tok in units:
            cur, seen = cur + units[tok], True
        elif tok in tens:
            cur, seen = cur + tens[tok], True
        elif tok == "hundred" and seen:
            cur *= 100
        elif tok == "and" and prev == "hundred":  # "one hundred and five"; "three and five" is two numbers
            pass
        else:
            if seen:
                out.add(cur)
            cur, seen = 0, False
        prev = tok
    return out


def main_part(gold: str) -> str:
    """The gold without its accepted alternatives or explanation ("11 weeks (81 days ...)" -> "11 weeks";
    "21 days. 22 days ... is also acceptable." -> "21 days"); every other part stays ("4 plants; the first ...")."""
    parts = re.split(r"(?<=[.;])\s+", gold.strip())
    keep = [p for i, p in enumerate(parts) if i == 0 or not _ALTERNATIVE.search(p)]
    head = " ".join(keep)
    cut = head.find("(")
    head = head[:cut] if cut > 0 else head
    return head.strip().rstrip(".;").strip()


def _change_number(question: str, gold: str) -> str | None:
    if not _ASKS_NUMBER.search(question):
        return None
    head = main_part(gold)
    m = _NUMBER.search(head)
    if not m:
        return None
    x = float(m.group(1).replace(",", ""))
    taken = numbers(gold)
    new = int(x) + 3 if x == int(x) else x * 2
    while float(new) in taken:
        new += 3
    text = f"{new:,}" if "," in m.group(1) else f"{new:g}" if isinstance(new, float) else str(new)
    return head[:m.start(1)] + text + head[m.end(1):]


def _change_date(question: str, gold: str) -> str | None:
    if not _ASKS_WHEN.search(question):
        return None
    head = main_part(gold)
    m = _ISO.search(head)
    if m:
        month = (int(m.group(2)) % 12) + 1
        return head[:m.start()] + f"{m.group(1)}-{month:02d}-{m.group(3)}" + head[m.end():]
    for pat, names in ((_MONTH, MONTHS), (_DAY, DAYS)):
        m = pat.search(head)
        if m:
            other = names[(names.index(m.group(1)) + 3) % len(names)]
            return head[:m.start()] + other + head[m.end():]
    return None


# a whole number a reader writes in words without changing what it says: not money, a decimal, a thousands group,
# a time, a range or compound ("3-day"), a percentage, an ordinal or a unit glued to it ("5th", "3pm")
_PLAIN_NUMBER = re.compile(r"(?<![\w$.,:/\-])\d+(?![\w%$.,:/\-])|(?<![\w$.,:/\-])\d+(?=[.,:](?!\d))")


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text[-1:] in ".!?" else text + "."


# a word before a number that makes it a name or a code, not a count ("Flight 93", "room 12", "area code 415")
_ID_WORD = re.compile(r"^(?:code|number|no|#|flight|room|gate|model|version|route|apartment|apt|unit|suite|bus|line|"
                      r"channel|extension|ext|pin|zip|id|locker|combination|seat|platform|track|exit|highway|"
                      r"interstate|agent|floor|level|station|lane|street|avenue|st|ave|road|box|page|chapter|"
                      r"episode|season|volume|vol|part|item|order|ticket|account|card|table|desk|car|engine)$", re.I)


def quantity(text: str, m: re.Match) -> bool:
    """Whether the number `m` in `text` is a count by construction, so that writing it in words keeps the answer:
    the allowlist is no leading zero ("007", "0412" are codes), no capitalised or possessive word before it
    ("Agent 7", "Boeing 747", "Levi's 501", "Blink 182") nor a word that makes it a label ("room 12", "area code
    415"), and a number of three digits only with a lowercase word after it ("150 pages"). Anything else: no."""
    digits = m.group(0)
    if len(digits) > 1 and digits.startswith("0"):
        return False
    before = text[:m.start()].rstrip()
    prev = re.search(r"([^\s]+)$", before)  # the word right before it ("bus, 30": a comma parts them)
    if prev and re.fullmatch(r"(?i)(no|nr|vol|st|ave|apt|ext|rm|ch|ep|pt)\.", prev.group(1)):
        return False  # "No. 5", "Apt. 12"
    if prev and not re.search(r"[,;:.)]$", prev.group(1)) and (re.match(r"[A-Z]", prev.group(1)) or "'" in prev.group(1) or "\u2019" in prev.group(1)
                 or _ID_WORD.search(prev.group(1))):
        return False
    if len(digits) >= 3 and not re.match(r"\s+[a-z]", text[m.end():]):
        return False
    return True


def _number_words(question: str, gold: str) -> str | None:
    """The whole gold with each of its numbers in words ("3 days" -> "three days"), or None unless every digit
    of the gold is a plain whole number below 1000 that is a count (`quantity`) and the gold names no date."""
    if _MONTH.search(gold) or _DAY.search(gold) or _ISO.search(gold):
        return None
    g = gold.strip()
    if not all(quantity(g, m) for m in _PLAIN_NUMBER.finditer(g)):
        return None
    out = _PLAIN_NUMBER.sub(lambda m: in_words(int(m.group(0))) or m.group(0), g)
    if re.search(r"\d", out) or out == g:
        return None
    return "From what you told me earlier: " + _sentence(out)


_NUMBER_WORDS = set(_WORDS) | {w for w in _TENS if w} | {"hundred"}


def _without_number_words(text: str) -> list[str]:
    """The normalised words of `text` without its numbers written in words (and the "and" inside one)."""
    toks = _norm(text).split()
    keep = []
    for i, t in enumerate(toks):
        inside = t == "and" and 0 < i < len(toks) - 1 and toks[i - 1] == "hundred" and toks[i + 1] in _NUMBER_WORDS
        if t not in _NUMBER_WORDS and not inside:
            keep.append(t)
    return keep


_ONCE = {"once": "1", "twice": "2", "thrice": "3"}
_UNITLESS = {"times", "time", "dollars", "dollar", "usd", "bucks"}


def canonical(text: str) -> list[str]:
    """The words of an answer with what does not change its meaning taken out: numbers in words as digits
    ("fifty" -> 50, "twice" -> 2), currency ("$50", "50 dollars" -> 50), "times", punctuation, case, and the
    order of the words ("Smith, John" = "John Smith"). Two answers with the same canonical words say the same."""
    t = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text.lower()).replace("$", " ")
    toks = re.findall(r"[a-z]+|\d+(?:\.\d+)?", t)
    units = {w: i for i, w in enumerate(_WORDS)}
    tens = {w: 10 * i for i, w in enumerate(_TENS) if w}
    out, cur, seen = [], 0, False
    for tok in toks + [""]:
        if tok in units or tok in tens:
            cur, seen = cur + units.get(tok, 0) + tens.get(tok, 0), True
            continue
        if tok == "hundred" and seen:
            cur *= 100
            continue
        if tok == "and" and seen and cur % 100 == 0:
            continue
        if seen:
            out.append(str(cur))
            cur, seen = 0, False
        tok = _ONCE.get(tok, tok)
        if tok and tok not in _UNITLESS:
            out.append(f"{float(tok):g}" if re.fullmatch(r"\d+(?:\.\d+)?", tok) else tok)
    return sorted(out)


def may_be_equivalent(a: str, b: str) -> bool:
    """Whether answer `a` could be right where `b` is (the same canonical words, or the words of one all among
    the other's: "3" and "3 bikes", "Smith" and "John Smith"): then `a` is never planted as wrong for `b`."""
    ca, cb = canonical(a), canonical(b)
    return not ca or not cb or set(ca) <= set(cb) or set(cb) <= set(ca)


def _norm(x: str) -> str:
    return " ".join(re.sub(r"[^\w$%]+", " ", x.lower()).split())


def _has(hay: str, needle: str) -> bool:
    """Whether `needle` occurs in `hay` as whole words (normalised)."""
    n = _norm(needle)
    return bool(n) and f" {n} " in f" {_norm(hay)} "


def substring_judge(gold: str, answer: str, abstention: bool = False) -> bool:
    """The control judge: right when the (normalised) gold occurs in the answer; for an abstention
    question, when the answer declines. No model: what a probe must be able to tell a judge from."""
    if abstention:
        return bool(re.search(r"\b(don't|do not|no) (have|record|information)|never mentioned|not mentioned", answer, re.I))
    return _has(answer, main_part(gold))


def check(p: dict) -> str:
    """The second, independent rule: '' when the planted answer is what its kind claims, else why not.
    It reads what the answer contains (numbers, words, the gold's parts), not how it was made."""
    kind, answer, gold, question = p["kind"], p["answer"], str(p["gold"]), str(p["question"])
    gold_n, ans_n = numbers(gold), numbers(answer)
    if kind == "changed_number":
        gold_all = gold_n | {float(x) for x in from_words(gold)}  # "or twelve if rounded up" is an alternative too
        if not ans_n or (ans_n | {float(x) for x in from_words(answer)}) & gold_all:
            return "it still contains a number of the gold (the answer or an accepted alternative)"
        if not _ASKS_NUMBER.search(question):
            return "the question does not ask for a quantity"
    elif kind == "changed_date":
        if not _ASKS_WHEN.search(question):
            return "the question does not ask when"
        if _has(answer, main_part(gold)) or _has(gold, answer):
            return "it still states the gold's date"
        names = [n for n in (*MONTHS, *DAYS) if _has(main_part(gold), n)]
        isos = set(_ISO.findall(gold))
        if any(_has(answer, n) for n in names) and not isos or isos & set(_ISO.findall(answer)):
            return "it still contains the gold's date"
    elif kind == "other_gold":
        if _has(answer, main_part(gold)) or _has(gold, answer) or (gold_n and gold_n <= ans_n):
            return "another question's gold that contains or equals this one"
        if may_be_equivalent(answer, main_part(gold)) or may_be_equivalent(answer, gold):
            return "another question's gold that may say the same (numbers in words, currency, times, name order)"
    elif kind == "denied":
        if not re.search(r"\bnot\b", answer) or not _has(answer, main_part(gold)):
            return "not a denial of the gold"
    elif kind == "number_words":
        if ans_n or re.search(r"\d", answer):
            return "it contains digits"
        if re.search(r"(?<!\d)0\d|[A-Z][\w'\u2019.]*\s+\d|\d{3}(?!\s+[a-z])", gold):
            return "a number of the gold may be a name or a code (a leading zero, a capitalised word before it, three digits)"
        if not gold_n or not gold_n <= {float(x) for x in from_words(answer)}:
            return "its numbers in words are not the gold's"
        g = " ".join(w for w in _norm(gold).split() if not re.fullmatch(r"\d+", w))
        if g and f" {g} " not in f" {' '.join(_without_number_words(answer))} ":
            return "it does not state every other word of the gold, in order"
    elif kind in ("paraphrase", "extra_words"):
        if not _has(answer, gold):
            return "it does not state the whole gold"
    elif kind not in ("confident_answer", "refusal"):
        return f"{kind!r} is not a kind the probe plants"
    return ""


def plant_checked(questions: list[dict], seed: int) -> tuple[list[dict], list[dict]]:
    """(kept, dropped): every planted answer that passes `check`, and those that do not (with why)."""
    kept, dropped = [], []
    for p in plant_all(questions, seed):
        why = check(p)
        (dropped if why else kept).append({**p, "dropped": why} if why else p)
    return kept, dropped


def plant(questions: list[dict], seed: int) -> list[dict]:
    """Planted answers for every question that pass the second rule: {qid, qtype, abstention, question,
    gold, kind, truth, answer}."""
    return plant_checked(questions, seed)[0]


def plant_all(questions: list[dict], seed: int) -> list[dict]:
    """Every planted answer before the check."""
    qs = sorted({q["qid"]: q for q in questions}.values(), key=lambda q: q["qid"])
    out = []
    for q in qs:
        rng = random.Random(f"probe:{seed}:{q['qid']}")
        gold, abst, question = str(q["gold"]), bool(q["abstention"]), str(q.get("question") or "")
        others = [o for o in qs if o["qid"] != q["qid"] and not o["abstention"] and str(o["gold"]) != gold
                  and not may_be_equivalent(main_part(str(o["gold"])), main_part(gold))]
        other = main_part(str(rng.choice(others)["gold"])) if others else None
        answers: dict[str, str | None]
        if abst:
            answers = {"confident_answer": f"Yes, I remember: it was {other}." if other else None,
                       "refusal": "I don't have that information; it was never mentioned in our conversations."}
        else:
            head = main_part(gold)
            changed_n, changed_d = _change_number(question, gold), _change_date(question, gold)
            answers = {"other_gold": other,
                       "changed_number": changed_n,
                       "changed_date": changed_d if changed_d != changed_n else None,
                       "denied": f"It was not {head}; I can't recall what it was.",
                       # right answers: the whole gold, nothing dropped or moved
                       "paraphrase": f"From what you told me earlier, the answer is: {_sentence(gold)}",
                       "extra_words": f"Let me check our past conversations. {_sentence(gold)} I hope that helps!",
                       "number_words": _number_words(question, gold)}
        for kind, answer in answers.items():
            if answer is not None:
                out.append({**{k: q.get(k) for k in ("qid", "qtype", "abstention", "question", "gold")}, "kind": kind,
                            "truth": kind in RIGHT, "answer": answer})
    return out


def probe_records(records: list[dict], seed: int) -> list[dict]:
    """Pseudo-records of the planted answers, in the record schema's shape (the judge reads them as runs)."""
    base = [r for r in records if (r.get("variant") or "") != "private"]  # Org private asks for declining
    out = []
    for p in plant(base, seed):
        src = next(r for r in base if r["qid"] == p["qid"])
        out.append({**src, "run_id": f"probe.{p['kind']}.{p['qid']}.r0", "condition": "probe", "module": "probe",
                    "variant": "", "repeat": 0, "attempt": 1, "status": "ok", "error": None, "answer": p["answer"],
                    "condition_notes": {"probe_kind": p["kind"], "probe_truth": p["truth"]}})
    return out


def judgements_name(judge: str) -> str:
    return f"{judge}.{SUFFIX}"


def run_probe(cfg, rd: RunDir | None = None) -> dict:
    from judge.answer_check import judge_model_config, judge_stage

    from judge.common import NothingToJudge, answer_check_stage, stage_budget

    rd = rd or RunDir.for_stage(cfg)
    answer_check_stage(cfg, rd, "judge.probe")
    records = [r.model_dump(mode="json") for r in rd.records()]
    if not records:
        raise NothingToJudge(f"{rd.root} has no records; run the stage first")
    planted = probe_records(records, int(cfg.seed))
    base = [r for r in records if (r.get("variant") or "") != "private"]
    dropped = plant_checked(base, int(cfg.seed))[1]
    if dropped:  # counted, never graded: a transformation the second rule did not confirm
        print(f"probe: {len(dropped)} planted answer(s) failed the second rule and were dropped: "
              + "; ".join(f"{p['kind']} {p['qid']} ({p['dropped']})" for p in dropped[:5])
              + (" ..." if len(dropped) > 5 else ""), file=sys.stderr)
    budget = stage_budget(cfg, rd, judge_model_config(cfg.judge).get("prices"))  # the probe's calls count too
    return judge_stage(cfg, rd, records=planted, name=judgements_name(str(cfg.judge.name)),
                       tag_prefix="judge-probe", budget=budget)


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with exits_with_code():  # 2 bad input, 3 stopped, 4 budget (harness.failures)
        s = run_probe(cfg)
        if s["failed"]:
            print(f"{s['failed']} probe judgements failed: run the same command again", file=sys.stderr)
            sys.exit(STOPPED)


if __name__ == "__main__":
    main()
