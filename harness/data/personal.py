"""Personalization trials (second seed paper, Section 4.2): a user profile, a task context, a vague query.

A trial is one synthetic user: a profile (preferences, tools, language, response
style) told to ProfileAgent, a task context (project, goals, blockers, next steps)
told to TaskAgent, some small talk for the conversation extractor, and a follow-up
query such as "What should I focus on next?" that cannot be answered well without
both. Every trial is its own user, so a stage has as many users as trials and any
memory of one user in another's prompt is a contamination, never a coincidence.

Deterministic for a seed (one `random.Random(seed)`); facts are drawn without
replacement per trial from pools large enough that 150 trials are not near-copies
(`check` measures it). Written as JSON under `data/` or the cache, never committed.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from itertools import combinations
from pathlib import Path

VERSION = 1
NEAR_COPY = 0.5  # two trials sharing more than half of their facts (Jaccard) are near-copies

FIRST = ["Ana", "Bilal", "Chen", "Dara", "Elif", "Femi", "Greta", "Hiro", "Ines", "Jonas", "Kavya", "Lior",
         "Maya", "Nikos", "Oona", "Pavel", "Quinn", "Rosa", "Sami", "Tariq", "Uma", "Viktor", "Wen", "Yara"]
PREFERENCES = [
    "prefers bullet-point summaries over long paragraphs", "likes to see a concrete code example first",
    "wants trade-offs spelled out before a recommendation", "prefers step-by-step checklists",
    "dislikes jargon and wants plain wording", "likes answers that cite the relevant docs section",
    "prefers working in short focused sessions of 25 minutes", "wants estimates in hours, not days",
    "prefers to fix root causes rather than add workarounds", "likes to tackle the hardest item first",
    "prefers small pull requests that are easy to review", "wants risks flagged explicitly",
    "prefers command-line tools over graphical ones", "likes diagrams described in text",
    "prefers test-driven development", "wants every suggestion tied to a measurable outcome",
    "prefers async written updates over meetings", "likes to batch similar chores together",
]
TOOLS = ["VS Code", "Neovim", "PyCharm", "JupyterLab", "Docker", "Kubernetes", "Terraform", "GitHub Actions",
         "GitLab CI", "Postman", "Grafana", "Sentry", "Jira", "Linear", "Notion", "Obsidian", "tmux", "pytest",
         "Figma", "dbt", "Airflow", "Poetry", "Bazel", "Datadog"]
LANGUAGES = ["Python", "TypeScript", "Go", "Rust", "Java", "Kotlin", "C#", "Ruby", "Scala", "Elixir", "Swift",
             "C++"]
STYLES = ["concise and direct", "detailed with worked examples", "friendly and encouraging",
          "formal and precise", "Socratic, with guiding questions", "terse, just the key facts",
          "structured with headings", "casual and conversational"]
PROJECTS = [
    "migrating the billing service to Kubernetes", "building a recommendation API for the online shop",
    "rewriting the mobile app's offline sync", "setting up a data warehouse for sales reporting",
    "adding single sign-on to the internal dashboard", "porting the image pipeline to GPU workers",
    "launching a public status page", "cutting the CI pipeline time in half",
    "building a churn prediction model", "upgrading the monolith to the new web framework",
    "designing the event schema for the analytics platform", "hardening the payments webhook handler",
    "shipping a plugin system for the editor", "moving logs from files to a central store",
    "automating the quarterly compliance report", "building a chatbot for customer support triage",
    "creating a load-testing harness for the booking system", "refactoring the search indexer",
    "writing a thesis chapter on graph neural networks", "preparing a conference talk on observability",
]
GOALS = [
    "have a working prototype by Friday", "reduce p95 latency below 200 ms", "reach 80% test coverage",
    "get sign-off from the security team", "demo the feature to the product owner", "cut cloud costs by 15%",
    "finish the design document", "onboard two new teammates onto the codebase", "ship the beta to 50 users",
    "remove the last dependency on the legacy database", "write the migration runbook",
    "get the pipeline green on every branch", "publish the API documentation", "pass the load test at 2k rps",
    "close the remaining P1 bugs", "submit the draft to the advisor", "automate the nightly backfill",
    "freeze the public interface", "set up alerting for the new service", "hand over the on-call rota",
]
BLOCKERS = [
    "flaky integration tests on CI", "waiting on credentials from the platform team",
    "an unclear requirement about data retention", "a memory leak in the worker process",
    "a breaking change in an upstream library", "slow code reviews from another team",
    "missing staging environment", "a schema mismatch between two services", "rate limits on a partner API",
    "no budget approval for new instances", "a race condition in the cache invalidation",
    "a vendor SDK without type hints", "time-zone bugs in the scheduler", "an outdated architecture diagram",
    "a pending legal review of the data export", "disk pressure on the build machines",
    "unreliable test data fixtures", "a deadlock under heavy write load", "conflicting priorities from two managers",
    "a certificate that expires next week",
]
STEPS = [
    "write a failing test that reproduces the bug", "draft the rollback plan", "profile the hot path",
    "pair with the platform team on the credentials", "split the migration into three smaller steps",
    "benchmark the two candidate libraries", "update the runbook with the new alerts",
    "schedule a review with the security team", "add tracing around the payment calls",
    "clean up the feature flags", "write the changelog entry", "set up a staging database snapshot",
    "pin the upstream library to the last good version", "ask the product owner to clarify retention",
    "add retries with backoff to the partner client", "move the secrets into the vault",
    "record a short demo video", "prune unused dashboards", "write the onboarding guide",
    "tune the connection pool size",
]
SMALL_TALK = [
    "By the way, I watched a great documentary about octopuses last night.",
    "I finally tried that new ramen place downtown, it was fantastic.",
    "My neighbour's dog kept me up half the night barking.",
    "I'm planning a hiking trip in the mountains next month.",
    "I started learning to play the cello a few weeks ago.",
    "The weather has been so grey lately, I miss the sun.",
    "I just finished a novel about a lighthouse keeper, really moving.",
    "We adopted a kitten last weekend and she is chaos.",
    "I've been trying to drink less coffee, with mixed results.",
    "My sister is getting married in the spring and I'm giving a speech.",
    "I ran my first 10k race on Sunday.",
    "I'm repainting the living room a pale green colour.",
]
QUERIES = ["What should I focus on next?", "What should I do next?", "Any advice on how to proceed?",
           "Where should I start today?", "What would you suggest I work on now?",
           "Can you help me plan my next steps?", "What's the best use of my time right now?",
           "How should I move forward from here?"]


class TrialError(ValueError):
    pass


def _pick(rng: random.Random, pool: list, k: int) -> list:
    return rng.sample(pool, k)


def make_trial(rng: random.Random, index: int, seed: int) -> dict:
    name = rng.choice(FIRST)
    profile = {"name": name, "preferences": _pick(rng, PREFERENCES, 2), "tools": _pick(rng, TOOLS, 3),
               "language": rng.choice(LANGUAGES), "response_style": rng.choice(STYLES)}
    task = {"project": rng.choice(PROJECTS), "goals": _pick(rng, GOALS, 2), "blockers": _pick(rng, BLOCKERS, 2),
            "next_steps": _pick(rng, STEPS, 2)}
    uid = hashlib.sha256(f"personal|{seed}|{index}".encode()).hexdigest()[:10]
    p, t = profile, task
    profile_msg = (f"Hi, I'm {p['name']}. I mostly write {p['language']} and my daily tools are "
                   f"{p['tools'][0]}, {p['tools'][1]} and {p['tools'][2]}. I {p['preferences'][0]}, and I "
                   f"{p['preferences'][1]}. Please keep your answers {p['response_style']}.")
    profile_msg = profile_msg.replace("I prefers", "I prefer").replace("I likes", "I like").replace(
        "I wants", "I want").replace("I dislikes", "I dislike")
    task_msg = (f"Right now I'm {t['project']}. My goals are to {t['goals'][0]} and to {t['goals'][1]}. "
                f"What's blocking me is {t['blockers'][0]}, and also {t['blockers'][1]}. The next steps I have "
                f"in mind are to {t['next_steps'][0]} and to {t['next_steps'][1]}.")
    return {
        "trial_id": f"t{index:04d}", "user_id": f"user-{uid}", "session_id": f"sess-{uid}",
        "profile": profile, "task": task,
        "messages": {"profile": profile_msg, "task": task_msg, "conversation": rng.choice(SMALL_TALK)},
        "query": rng.choice(QUERIES),
        "keywords": {"profile": keywords_profile(profile), "task": keywords_task(task)},
    }


def keywords_profile(p: dict) -> list[str]:
    """What a response that used the profile would name: the language and the tools."""
    return [p["language"], *p["tools"]]


def keywords_task(t: dict) -> list[str]:
    """Distinctive words of the blockers and next steps (the hybrid judge's keyword half)."""
    out = []
    for phrase in t["blockers"] + t["next_steps"]:
        words = [w for w in re.findall(r"[A-Za-z][A-Za-z0-9-]+", phrase) if len(w) > 4]
        out.append(max(words, key=len) if words else phrase)
    return out


def facts(trial: dict) -> set[str]:
    p, t = trial["profile"], trial["task"]
    return {*(f"pref:{x}" for x in p["preferences"]), *(f"tool:{x}" for x in p["tools"]),
            f"lang:{p['language']}", f"style:{p['response_style']}", f"project:{t['project']}",
            *(f"goal:{x}" for x in t["goals"]), *(f"blocker:{x}" for x in t["blockers"]),
            *(f"step:{x}" for x in t["next_steps"])}


def generate(n: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    return {"format": "personal-trials", "version": VERSION, "seed": seed, "n": n,
            "trials": [make_trial(rng, i, seed) for i in range(n)]}


def default_path(root: str | Path, n: int, seed: int) -> Path:
    return Path(root) / f"personal_trials_n{n}_seed{seed}.json"


def write(path: str | Path, n: int, seed: int = 0) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(dumps(n, seed))
    tmp.replace(path)
    return path


def dumps(n: int, seed: int = 0) -> bytes:
    """The trials file's bytes: what `write` writes, and what a dry run holds in memory instead."""
    return json.dumps(generate(n, seed), indent=1, sort_keys=True).encode("utf-8")


def ensure(path: str | Path, n: int, seed: int, write_missing: bool = True):
    """The trials file, written on first use (a dry run, `write_missing=False`, holds it in memory:
    harness.data.source.Unwritten); an existing file must be the one this seed writes."""
    path = Path(path)
    if not path.exists():
        if not write_missing:
            from .source import Unwritten

            return Unwritten(path, dumps(n, seed))
        return write(path, n, seed)
    data = load(path)
    if data["seed"] != seed or data["n"] != n:
        raise TrialError(f"{path} holds n={data['n']} seed={data['seed']}, the stage asks n={n} seed={seed}")
    return path


def load(path) -> dict:
    """A trials file, or a dry run's in memory (anything with `read_bytes`)."""
    data = json.loads((path if hasattr(path, "read_bytes") else Path(path)).read_bytes().decode("utf-8"))
    validate(data)
    return data


def validate(data: dict) -> None:
    if data.get("format") != "personal-trials" or data.get("version") != VERSION:
        raise TrialError(f"not a version-{VERSION} personal-trials file")
    trials = data.get("trials")
    if not isinstance(trials, list) or len(trials) != data.get("n"):
        raise TrialError("`trials` must be a list of `n` trials")
    seen_ids, seen_users = set(), set()
    for i, t in enumerate(trials):
        where = f"trial {i} ({t.get('trial_id')!r})"
        for key in ("trial_id", "user_id", "session_id", "query"):
            if not isinstance(t.get(key), str) or not t[key]:
                raise TrialError(f"{where}: missing {key}")
        for key in ("preferences", "tools"):
            if not t["profile"].get(key):
                raise TrialError(f"{where}: empty profile.{key}")
        for key in ("goals", "blockers", "next_steps"):
            if not t["task"].get(key):
                raise TrialError(f"{where}: empty task.{key}")
        for key in ("profile", "task", "conversation"):
            if not t["messages"].get(key):
                raise TrialError(f"{where}: empty messages.{key}")
        if t["trial_id"] in seen_ids or t["user_id"] in seen_users:
            raise TrialError(f"{where}: duplicate trial or user id")
        seen_ids.add(t["trial_id"])
        seen_users.add(t["user_id"])
        for kw in t["keywords"]["profile"]:
            if kw.lower() not in t["messages"]["profile"].lower():
                raise TrialError(f"{where}: profile keyword {kw!r} is not in the profile message")
        for kw in t["keywords"]["task"]:
            if kw.lower() not in t["messages"]["task"].lower():
                raise TrialError(f"{where}: task keyword {kw!r} is not in the task message")


def variety(trials: list[dict]) -> dict:
    """Pairwise Jaccard similarity of the trials' fact sets: the near-copy check."""
    sets = [facts(t) for t in trials]
    sims = [len(a & b) / len(a | b) for a, b in combinations(sets, 2)]
    return {"pairs": len(sims), "max_jaccard": max(sims, default=0.0),
            "mean_jaccard": sum(sims) / len(sims) if sims else 0.0,
            "near_copies": sum(s > NEAR_COPY for s in sims),
            "distinct_profiles": len({json.dumps(t["profile"], sort_keys=True) for t in trials}),
            "distinct_tasks": len({json.dumps(t["task"], sort_keys=True) for t in trials})}
