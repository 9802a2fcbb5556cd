"""`make rehearsal` / `python -m bench.rehearsal [key=value ...]`: the main stage, rehearsed offline.

A benchmark, not a test. Generated S-shape data, the whole `main` stage (its conditions
and groups as conf/stage/main.yaml has them, concurrency 8) run by the real driver
(`python -m harness.run`, a subprocess) against bench.fake_upstream, then judging
(`python -m judge.run`, same fake) and the analysis (`python -m analysis.run`). It
prints where the time, memory and disk go (docs/measurements.md, "Rehearsal").

Knobs (key=value):
  questions=180      main-sample questions (180 = the study); the subset run by every condition twice
                     (and by `full`) is a third of it; the runs are the main stage's plan (2,040 at 180)
  latency_scale=1.0  times the upstream's latency (median 1.5 s); 0.1 = ten times faster calls
  kill_at=none       a fraction (e.g. 0.5): kill -9 the driver once that share of runs is recorded,
                     then run the same command again (it must resume and lose nothing)
  concurrency=8  seed=0  out=.cache/rehearsal  cache_dir=.cache  label=rehearsal

Harness share (how much of the stage is ours, not the upstream's):
  per run   = 1 - (upstream wait + retry back-off) / sum over runs of (setup_s + wall_s)
              where upstream wait is the agent calls' whole time inside the fake (its latency, reading,
              parsing and answering; refused calls included)
              and back-off is the client's expected sleep (backoff_s per refused call);
  per run, memory prepared = the same without setup_s (the run's first touch of a question's
              index, its store lookup: preparation, which the issue measures apart);
  stage     = 1 - (upstream wait + back-off) / (stage wall x concurrency): everything else the
              driver did (start-up, plan, preflight, records, idle slots while the last runs finish).
Only a pass that was not killed gives a per-run share (a killed pass waited for runs it never recorded).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FULL_CHUNKS = 123_000  # the study's main stage at S size: its histories' chunks (measured)


def full_size(o: dict) -> dict:
    """The study's main stage at its own size (the config's samples, not the rehearsal's): its questions
    and runs counted from the plan, so a condition added to the stage is counted without an edit here."""
    from harness.run.plan import build
    from harness.run.settings import stage_node

    cfg = compose(["stage=main", "data=synth_s", f"seed={o['seed']}", f"cache_dir={o['cache_dir']}"])
    plan = build(stage_node(cfg), cfg)
    return {"questions": len({r.qid for r in plan.runs}), "runs": len(plan.runs), "chunks": FULL_CHUNKS}


def parse(argv: list[str]) -> dict:
    opts = {"questions": 180, "latency_scale": 1.0, "kill_at": None, "concurrency": 8, "seed": 0,
            "out": ".cache/rehearsal", "cache_dir": ".cache", "label": "rehearsal"}
    for a in argv:
        key, eq, value = a.partition("=")
        if not eq or key not in opts:
            raise SystemExit(f"unknown argument {a!r}; knobs: {', '.join(opts)}")
        opts[key] = None if value.lower() in ("none", "null", "") else value
    opts["questions"] = int(opts["questions"])
    opts["latency_scale"] = float(opts["latency_scale"])
    opts["concurrency"] = int(opts["concurrency"])
    opts["seed"] = int(opts["seed"])
    opts["kill_at"] = float(opts["kill_at"]) if opts["kill_at"] is not None else None
    return opts


def sample_overrides(questions: int) -> list[str]:
    """main = `questions` (per type, then cut), its subset (full, scale) a third of it, as 180 -> 60."""
    per_type = max(1, math.ceil(questions / 6))
    sub = max(1, round(questions / 18))
    return [f"samples.main.per_type={per_type}", f"samples.main.limit={questions}",
            f"samples.full.per_type={sub}"]


def stage_overrides(o: dict, base_url: str) -> list[str]:
    backoff = round(1.0 * o["latency_scale"], 4)
    return ["stage=main", f"stage.label={o['label']}", "data=synth_s", f"seed={o['seed']}",
            f"concurrency={o['concurrency']}", f"runs_dir={Path(o['out']) / 'runs'}", f"cache_dir={o['cache_dir']}",
            "model=deepseek", f"model.base_url={base_url}", "model.api_key_env=null", f"model.backoff_s={backoff}",
            "judge=deepseek", f"judge.base_url={base_url}", "judge.api_key_env=null", f"judge.backoff_s={backoff}",
            *sample_overrides(o["questions"])]


def compose(overrides: list[str]):
    from hydra import compose as hcompose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return hcompose(config_name="config", overrides=overrides)


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


class Timer(dict):
    def part(self, name: str):
        timer = self

        class _T:
            def __enter__(self):
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                timer[name] = timer.get(name, 0.0) + time.perf_counter() - self.t0

        return _T()


# -- preparation ---------------------------------------------------------------------------
def prepare(cfg) -> dict:
    """What a stage does before its runs, part by part, timed around the harness's own functions:
    the plan (reads and validates every record, hashes the file), the Hermes stores and chunking.
    Embedding is the driver's (harness.run.prepare: beside the runs; its times come from the
    stage's sessions.jsonl), and each question's index is filled by its first run (setup time)."""
    from harness.data import source
    from harness.run.context import Environment
    from harness.run.plan import build
    from harness.run.settings import stage_node
    from harness.runtime import build_store

    t = Timer()
    with t.part("data generation (first use only)"):
        source.resolve(cfg.data)
    with t.part("data check (plan: validate + hash)"):
        plan = build(stage_node(cfg), cfg)
    env = Environment(cfg, plan)
    with t.part("load histories"):
        questions = env.questions
    qids = sorted({r.qid for r in plan.runs})
    sha = plan.data["sha256"]
    built = 0
    with t.part("Hermes stores"):
        for qid in qids:
            built += not build_store(questions[qid], sha).cache_hit
    specs = {r.qid: r for r in plan.runs}
    with t.part("chunking"):
        n_chunks = sum(len(env.units(specs[qid])) for qid in qids)
    return {"parts": dict(t), "questions": len(qids), "chunks": n_chunks, "stores_built": built,
            "runs": len(plan.runs), "plan": plan}


def memory_sessions(rd, planned_runs: list, cfg) -> dict:
    """The driver's memory preparation (sessions.jsonl), and the index builds: the setup time of
    the first run of each question among the runs that read the memory space."""
    from harness.run.agents import needs_memory

    sessions = rd.sessions()
    needs = needs_memory(cfg.stage.conditions)
    memory_runs = {r.run_id for r in planned_runs if needs(r)}
    first: dict[str, float] = {}
    for r in sorted(rd.records(), key=lambda r: r.finished):
        if r.run_id in memory_runs:
            first.setdefault(r.org, r.setup_s)
    m = [s.memory for s in sessions]
    return {"sessions": [s.model_dump() for s in sessions],
            "embedded": sum(x.embedded for x in m), "chunks": sum(x.chunks for x in m),
            "embed_s": sum(x.embed_s for x in m), "chunk_s": sum(x.chunk_s for x in m),
            "index_builds_s": sum(first.values()), "index_builds": len(first)}


# -- the stage -----------------------------------------------------------------------------
def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def drive(cmd: list[str], log: Path, rd_records: Path, total: int, kill_at: float | None) -> dict:
    """Run the driver; sample its RSS; kill -9 it once `kill_at` of the runs are recorded."""
    t0 = time.perf_counter()
    with open(log, "ab") as err:
        p = subprocess.Popen(cmd, cwd=REPO, stdout=err, stderr=err)
        samples, killed = [], False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            n = len(list(rd_records.glob("*.json"))) if rd_records.exists() else 0
            samples.append((round(time.perf_counter() - t0, 2), n, _rss_kb(p.pid)))
            if kill_at is not None and not killed and n >= kill_at * total:
                os.kill(p.pid, signal.SIGKILL)
                killed = True
            time.sleep(0.5)
    p.returncode = os.waitstatus_to_exitcode(status)
    first = next((t for t, n, _ in samples if n > 0), None)
    return {"wall_s": time.perf_counter() - t0, "rc": p.returncode, "killed": killed,
            "peak_rss_mb": ru.ru_maxrss / 1024, "first_record_s": first, "rss": samples}


def shares(busy_s: float, loop_s: float, wait_s: float, stage_wall_s: float, concurrency: int,
           latency_scale: float) -> dict:
    """The harness's share of the time (module doc). `wait_s` is the upstream's wait at the latency
    scale of the rehearsal; the harness's own seconds do not scale with it, so at latency x1 the
    same work waits wait_s / latency_scale: the `_x1` shares are what a real endpoint would give."""
    own = loop_s - wait_s
    x1 = wait_s / latency_scale
    return {
        "share_per_run": 1 - wait_s / busy_s if busy_s else None,
        "share_prepared": own / loop_s if loop_s else None,
        "share_stage": 1 - wait_s / (stage_wall_s * concurrency) if stage_wall_s else None,
        "share_per_run_x1": (busy_s - wait_s) / (busy_s - wait_s + x1) if busy_s else None,
        "share_prepared_x1": own / (own + x1) if loop_s else None,
    }


def per_condition(recs) -> dict:
    """Per condition, per run: seconds in the loop outside successful model calls (tools, retrieval,
    the loop's own work, refused calls and back-off) and the setup seconds."""
    out: dict[str, dict] = {}
    for r in recs:
        c = out.setdefault(r.condition, {"runs": 0, "outside_calls_s": 0.0, "setup_s": 0.0, "calls": 0, "tools": 0})
        c["runs"] += 1
        c["outside_calls_s"] += r.wall_s - sum(x.latency_s for x in r.calls)
        c["setup_s"] += r.setup_s
        c["calls"] += r.agent_calls
        c["tools"] += r.tool_calls
    return {k: {"runs": v["runs"], "outside_calls_ms_per_run": 1000 * v["outside_calls_s"] / v["runs"],
                "setup_ms_per_run": 1000 * v["setup_s"] / v["runs"], "calls_per_run": v["calls"] / v["runs"],
                "tools_per_run": v["tools"] / v["runs"]} for k, v in sorted(out.items())}


def accounting(rd, upstream: dict, stage_wall: float, concurrency: int, backoff_s: float, planned: list[str],
               latency_scale: float) -> dict:
    """The stage's records against what the upstream made them wait (module doc: harness share)."""
    from harness.records.ledger import read_ledger

    recs = list(rd.records())
    busy = sum(r.setup_s + r.wall_s for r in recs)
    loop = sum(r.wall_s for r in recs)
    faults = upstream["faults"]["429"] + upstream["faults"]["5xx"]
    wait = upstream["waited_s"]["agent"] + faults * backoff_s
    interrupted = sum(1 for p in rd.ledger_paths() for e in read_ledger(p) if e.get("event") == "interrupted")
    ledger_bytes = sum(p.stat().st_size for p in rd.ledger_paths() if p.exists())
    got = {r.run_id for r in recs}
    client_s = sum(x.latency_s for r in recs for x in r.calls)
    return {
        "recorded": len(recs), "lost": len(set(planned) - got), "failed": sum(r.status != "ok" for r in recs),
        "interrupted_marks": interrupted, "agent_calls": upstream["calls"]["agent"], "faults": faults,
        "tool_calls": sum(r.tool_calls for r in recs), "upstream_wait_s": wait,
        "busy_s": busy, "setup_s": busy - loop, "loop_s": loop,
        **shares(busy, loop, wait, stage_wall, concurrency, latency_scale),
        "harness_ms_per_call": 1000 * (loop - wait) / max(upstream["calls"]["agent"], 1),
        # what a call costs between the agent and the upstream: client, metering proxy, ledger fsyncs
        "proxy_ms_per_call": 1000 * (client_s - upstream["waited_s"]["agent"]) / max(upstream["calls"]["agent"], 1),
        "ledger_bytes": ledger_bytes, "stage_bytes": du(rd.root), "records_bytes": du(rd.records_dir),
        "per_condition": per_condition(recs),
    }


def main(argv: list[str] | None = None) -> int:
    o = parse(sys.argv[1:] if argv is None else argv)
    from bench.fake_upstream import FakeUpstream
    from harness.records import RunDir

    out = Path(o["out"])
    out.mkdir(parents=True, exist_ok=True)
    stage_root = out / "runs" / "main" / o["label"]
    if stage_root.exists():  # a rehearsal measures a whole stage: start from nothing
        shutil.rmtree(stage_root)
    for name in ("driver.log", "judge.log", "analysis.log"):
        (out / name).unlink(missing_ok=True)
    py = sys.executable
    report: dict = {"knobs": {k: v for k, v in o.items()}}

    salt = f"r{time.time_ns() % 10**8:08d}"  # fresh queries each rehearsal (bench.fake_upstream)
    report["query_salt"] = salt
    with FakeUpstream(seed=o["seed"], scale=o["latency_scale"], query_salt=salt) as fake:
        overrides = stage_overrides(o, fake.base_url)
        cfg = compose(overrides)
        print(f"rehearsal: {' '.join(overrides)}", file=sys.stderr)
        prep = prepare(cfg)
        plan = prep.pop("plan")
        report["prepare"] = prep
        report["forecast"] = forecast_rows(cfg, plan)  # what dry_run=true would have printed, before any run
        rd = RunDir.for_stage(cfg)
        cmd = [py, "-m", "harness.run", *overrides]
        passes = [drive(cmd, out / "driver.log", rd.records_dir, len(plan.runs), o["kill_at"])]
        if passes[0]["killed"]:
            passes.append(drive(cmd, out / "driver.log", rd.records_dir, len(plan.runs), None))
        if passes[-1]["rc"] != 0:
            print((out / "driver.log").read_text()[-3000:], file=sys.stderr)
            raise SystemExit(f"the driver exited with {passes[-1]['rc']} (log: {out / 'driver.log'})")
        agent_stats = fake.stats()
        stage_wall = sum(p["wall_s"] for p in passes)
        report["stage"] = {"passes": [{k: v for k, v in p.items() if k != "rss"} for p in passes],
                           "wall_s": stage_wall, "peak_rss_mb": max(p["peak_rss_mb"] for p in passes),
                           "rss_first_last_mb": _rss_growth(passes[-1]["rss"]), "upstream": agent_stats}
        report["accounting"] = accounting(rd, agent_stats, stage_wall, o["concurrency"],
                                          1.0 * o["latency_scale"], [r.run_id for r in plan.runs], o["latency_scale"])
        report["memory"] = memory_sessions(rd, plan.runs, cfg)
        report["metered"] = metered_rows(rd, cfg)
        report["memory"]["after_ready"] = after_ready(rd, report["memory"]["sessions"])
        if len(passes) > 1:  # a killed pass waited for runs it never recorded: no per-run share
            for k in ("share_per_run", "share_prepared", "share_per_run_x1", "share_prepared_x1",
                      "harness_ms_per_call", "proxy_ms_per_call"):
                report["accounting"][k] = None
        t0 = time.perf_counter()
        with open(out / "judge.log", "wb") as f:
            rc = subprocess.run([py, "-m", "judge.run", *overrides], cwd=REPO, stdout=f, stderr=f).returncode
        report["judge"] = {"wall_s": time.perf_counter() - t0, "rc": rc,
                           "calls": fake.stats()["calls"]["judge"]}
    t0 = time.perf_counter()
    results = out / "results"
    with open(out / "analysis.log", "wb") as f:
        rc = subprocess.run([py, "-m", "analysis.run", f"runs={stage_root}", f"out={results}"],
                            cwd=REPO, stdout=f, stderr=f).returncode
    report["analysis"] = {"wall_s": time.perf_counter() - t0, "rc": rc}
    report["full"] = full_size(o)
    report["expected_full"] = expected_full(report, o)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    print(render(report))
    print(f"\nreport: {out / 'report.json'}; logs: {out}/driver.log, judge.log, analysis.log", file=sys.stderr)
    ok = report["accounting"]["lost"] == 0 and report["analysis"]["rc"] in (0, 1) and report["judge"]["rc"] == 0
    return 0 if ok else 1


def _rss_growth(samples: list) -> tuple[float, float]:
    """RSS (MB) once a tenth of the runs were recorded, and at the last sample: growth with runs."""
    rss = [(n, kb) for _, n, kb in samples if kb]
    if not rss:
        return (0.0, 0.0)
    last_n = rss[-1][0]
    early = next((kb for n, kb in rss if n >= max(1, last_n // 10)), rss[0][1])
    return (round(early / 1024, 1), round(rss[-1][1] / 1024, 1))


def expected_full(r: dict, o: dict) -> dict:
    """The study's size (r["full"]: its questions and runs, latency scale 1) from measured rates."""
    p, a, m, full = r["prepare"], r["accounting"], r["memory"], r["full"]
    q = p["questions"] or 1
    out = {}
    for k, v in p["parts"].items():
        if k == "data generation (first use only)":
            continue
        # the plan reads the whole file whatever the sample; the rest grows with the questions
        out[k] = v if (k.startswith("data check") or k == "load histories") else v / q * full["questions"]
    embed_rate = m["embedded"] / m["embed_s"] if m["embedded"] and m["embed_s"] else None
    out["embedding rate chunks/s"] = embed_rate
    out["embedding"] = p["chunks"] / q * full["questions"] / embed_rate if embed_rate else None
    out["index builds"] = m["index_builds_s"] / max(m["index_builds"], 1) * full["questions"]
    runs = a["recorded"] or 1
    per_run_wait = a["upstream_wait_s"] / o["latency_scale"] / runs
    per_run_harness = (a["busy_s"] - a["upstream_wait_s"]) / runs
    out["stage wall (runs / concurrency x per-run time)"] = full["runs"] * (per_run_wait + per_run_harness) / o["concurrency"]
    out["analysis (linear in runs)"] = r["analysis"]["wall_s"] * full["runs"] / runs
    return out


def forecast_rows(cfg, plan) -> dict:
    from harness.run.forecast import forecast

    rows, said = forecast(cfg, plan)
    prices = dict(cfg.model.prices)
    return {"source": said, "rows": {r.condition: {"calls": r.calls, "prompt": r.hit + r.miss, "output": r.output,
                                                   "cost_list": r.cost(prices)} for r in rows}}


def metered_rows(rd, cfg) -> dict:
    """Per condition, what the ledger-backed records say was spent by the agents (list price)."""
    out: dict[str, dict] = {}
    for r in rd.records():
        m = out.setdefault(r.condition, {"calls": 0, "prompt": 0, "output": 0, "cost_list": 0.0})
        m["calls"] += r.model_calls
        m["prompt"] += r.tokens.prompt
        m["output"] += r.tokens.output
        m["cost_list"] += r.cost_list
    return out


def after_ready(rd, sessions: list[dict]) -> dict:
    """Runs that started once every question's memory was ready (no embedding beside them): the
    share of their loop time spent outside model calls (client-observed: the proxy counts as the call)."""
    from datetime import datetime, timedelta

    done = [s for s in sessions if s["memory"]["all_ready_s"] is not None]
    if not done:
        return {"runs": 0, "outside_calls_share": None}
    s = done[-1]
    ready = datetime.fromisoformat(s["started"]) + timedelta(seconds=s["memory"]["all_ready_s"])
    loop = outside = 0.0
    n = 0
    for r in rd.records():
        start = datetime.fromisoformat(r.finished) - timedelta(seconds=r.wall_s + r.setup_s)
        if start >= ready:
            n += 1
            loop += r.wall_s
            outside += r.wall_s - sum(c.latency_s for c in r.calls)
    return {"runs": n, "outside_calls_share": outside / loop if loop else None}


def render(r: dict) -> str:
    p, a, s, k = r["prepare"], r["accounting"], r["stage"], r["knobs"]
    e = r["expected_full"]
    pct = lambda x: "-" if x is None else f"{100 * x:.2f}%"  # noqa: E731
    m = r["memory"]
    first = m["sessions"][0] if m["sessions"] else None  # a killed first pass writes no session line
    sec = lambda x: "-" if x is None else f"{x:.1f} s"  # noqa: E731
    full_s = lambda x: "" if x is None else f"{x:>26.0f}"  # noqa: E731
    lines = [f"Rehearsal: main stage, {p['questions']} questions, {p['runs']} runs, {p['chunks']:,} chunks, "
             f"latency x{k['latency_scale']}, concurrency {k['concurrency']}, kill_at {k['kill_at']}",
             "", f"{'preparation':<44}{'measured s':>12}{'full size s (expected)':>26}"]
    for name, v in p["parts"].items():
        lines.append(f"  {name:<42}{v:>12.2f}{full_s(e.get(name))}")
    lines.append(f"  {'embedding (driver, beside the runs)':<42}{m['embed_s']:>12.2f}{full_s(e['embedding'])}")
    lines.append(f"  {'index builds (first run of each question)':<42}{m['index_builds_s']:>12.2f}"
                 f"{full_s(e['index builds'])}")
    rate = e["embedding rate chunks/s"]
    lines.append(f"  ({p['stores_built']} stores built, {m['embedded']:,} chunks embedded, "
                 f"{m['chunks'] - m['embedded']:,} cached or repeated texts" + ("" if rate is None else f", {rate:.1f} chunks/s") + ")")
    lines += ["", "time to first results (the driver's first session, from the start of its runs):",
              f"  first run started {sec(first and first['first_run_started_s'])}, first record "
              f"{sec(first and first['first_record_s'])}, first question's memory ready "
              f"{sec(first and first['memory']['first_ready_s'])}, all memory ready "
              f"{sec(first and first['memory']['all_ready_s'])}",
              f"  first record seen from outside (from the driver's launch): {sec(s['passes'][0]['first_record_s'])}"]
    lines += ["", f"{'stage':<44}{'measured':>12}",
              f"  {'wall (all passes)':<42}{s['wall_s']:>11.1f}s",
              *[f"    pass {i + 1}: {q['wall_s']:.1f}s rc {q['rc']}{' killed -9' if q['killed'] else ''}, "
                f"peak RSS {q['peak_rss_mb']:.0f} MB" for i, q in enumerate(s["passes"])],
              f"  {'runs recorded / lost / failed':<42}{a['recorded']:>6} / {a['lost']} / {a['failed']}",
              f"  {'interrupted attempts marked':<42}{a['interrupted_marks']:>12}",
              f"  {'agent calls / tool calls / refused (429,5xx)':<42}{a['agent_calls']:>6} / {a['tool_calls']} / {a['faults']}",
              f"  {'upstream wait incl. back-off':<42}{a['upstream_wait_s']:>11.1f}s",
              f"  {'sum of run time (setup + loop)':<42}{a['busy_s']:>11.1f}s  (setup {a['setup_s']:.1f}s)",
              f"  {'harness share per run':<42}{pct(a['share_per_run']):>12}",
              f"  {'harness share per run, memory prepared':<42}{pct(a['share_prepared']):>12}",
              f"  {'  the same at latency x1 (expected)':<42}{pct(a['share_per_run_x1']):>12}"
              f"{pct(a['share_prepared_x1']):>12} prepared   target <= 2%",
              f"  {'harness per agent call':<42}{'-' if a['harness_ms_per_call'] is None else format(a['harness_ms_per_call'], '.1f') + ' ms':>12}",
              f"  {'metering proxy + client per call':<42}{'-' if a['proxy_ms_per_call'] is None else format(a['proxy_ms_per_call'], '.1f') + ' ms':>12}",
              f"  {'harness share of stage wall x concurrency':<42}{pct(a['share_stage']):>12}",
              f"  {'outside model calls, runs after memory ready':<42}"
              f"{pct(m['after_ready']['outside_calls_share']):>12}  ({m['after_ready']['runs']} runs)",
              f"  {'peak RSS of the driver':<42}{s['peak_rss_mb']:>9.0f} MB   target <= 4 GB",
              f"  {'RSS at 10% of runs -> at the end':<42}{s['rss_first_last_mb'][0]:>7.0f} -> {s['rss_first_last_mb'][1]:.0f} MB",
              f"  {'disk: stage folder':<42}{a['stage_bytes'] / 1e6:>9.1f} MB",
              f"  {'disk: per run (records+transcripts)':<42}{a['records_bytes'] / max(a['recorded'], 1) / 1e3:>9.1f} kB",
              f"  {'ledger size':<42}{a['ledger_bytes'] / 1e6:>9.2f} MB",
              f"  {'judge wall':<42}{r['judge']['wall_s']:>11.1f}s  ({r['judge']['calls']} calls, rc {r['judge']['rc']})",
              f"  {'analysis wall (python -m analysis.run)':<42}{r['analysis']['wall_s']:>11.1f}s  (rc {r['analysis']['rc']})",
              "", f"{'per condition, per run':<26}{'calls':>7}{'tools':>7}{'setup ms':>10}{'loop outside calls ms':>23}",
              *[f"  {c:<24}{v['calls_per_run']:>7.1f}{v['tools_per_run']:>7.1f}{v['setup_ms_per_run']:>10.0f}"
                f"{v['outside_calls_ms_per_run']:>23.0f}" for c, v in a["per_condition"].items()],
              "", f"forecast (dry_run=true, from {r['forecast']['source']}) against the metered agents' spend "
              "(the fake upstream's conversations, list prices):",
              f"  {'condition':<24}{'calls fc/metered':>20}{'prompt tok fc/metered':>28}{'USD fc/metered':>22}",
              *[f"  {c:<24}{f['calls']:>9,.0f} /{r['metered'].get(c, {}).get('calls', 0):>8,}"
                f"{f['prompt']:>14,.0f} /{r['metered'].get(c, {}).get('prompt', 0):>12,}"
                f"{f['cost_list']:>11.3f} /{r['metered'].get(c, {}).get('cost_list', 0.0):>9.3f}"
                for c, f in r["forecast"]["rows"].items()],
              f"  {'total':<24}{sum(f['calls'] for f in r['forecast']['rows'].values()):>9,.0f} /"
              f"{sum(m['calls'] for m in r['metered'].values()):>8,}"
              f"{sum(f['prompt'] for f in r['forecast']['rows'].values()):>14,.0f} /"
              f"{sum(m['prompt'] for m in r['metered'].values()):>12,}"
              f"{sum(f['cost_list'] for f in r['forecast']['rows'].values()):>11.3f} /"
              f"{sum(m['cost_list'] for m in r['metered'].values()):>9.3f}",
              "", f"expected at full size ({r['full']['questions']} questions, {r['full']['runs']:,} runs, latency x1):",
              f"  stage wall {e['stage wall (runs / concurrency x per-run time)'] / 60:.0f} min, "
              f"analysis <= {e['analysis (linear in runs)']:.0f} s (proportional to runs: an upper bound, start-up is most of it), embedding "
              + ("-" if e['embedding'] is None else f"{e['embedding'] / 60:.0f} min at {e['embedding rate chunks/s']:.1f} chunks/s"),
              f"  stage disk {a['stage_bytes'] / max(a['recorded'], 1) * r['full']['runs'] / 1e6:.0f} MB, "
              f"ledger {a['ledger_bytes'] / max(a['recorded'], 1) * r['full']['runs'] / 1e6:.0f} MB"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
