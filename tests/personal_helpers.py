"""Shared pieces of the personalization tests: a scripted writer/assistant policy and a stage config."""

from __future__ import annotations

import json
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

CONF = str(Path(__file__).resolve().parent.parent / "conf")


def last_user(req: dict) -> str:
    return next(m["content"] for m in reversed(req["messages"]) if m["role"] == "user")


class Script:
    """Writers echo the user's message into their JSON fields (so every item carries text unique to its
    user); Mem0's extraction gets one fact; the assistant repeats the start of its memory block.
    `writer_delay_s` makes writers late; `broken` names writers whose reply is not JSON; `hang` names
    writers that sleep `hang_s` (longer than the client's timeout)."""

    def __init__(self, writer_delay_s: float = 0.0, broken=(), hang=(), hang_s: float = 30.0):
        self.writer_delay_s, self.broken, self.hang, self.hang_s = writer_delay_s, set(broken), set(hang), hang_s

    def __call__(self, req: dict) -> dict:
        system = req["messages"][0]["content"]
        text = last_user(req)
        for name, field in (("ProfileAgent", "preferences"), ("TaskAgent", "project"),
                            ("ConversationExtractor", "note")):
            if system.startswith(f"You are {name}"):
                if name in self.hang:
                    time.sleep(self.hang_s)
                time.sleep(self.writer_delay_s)
                if name in self.broken:
                    return {"role": "assistant", "content": "sorry, no JSON today"}
                return {"role": "assistant", "content": json.dumps({field: [text] if field != "note" else text})}
        if "memory" in system.lower() and "json" in system.lower() and req.get("response_format"):
            return {"role": "assistant", "content": json.dumps({"memory": [{"text": "The user shared some facts: "
                                                                            + text[-120:]}]})}
        block = req["messages"][1]["content"] if len(req["messages"]) > 2 else ""
        return {"role": "assistant", "content": "Focus on this. " + block[:300]}


def stage_cfg(tmp: Path, fake_url: str, methods: list[str], n: int = 4, extra: list[str] = (),
              stage: str = "personal_smoke"):
    overrides = [f"stage={stage}", "model=vllm", f"model.base_url={fake_url}", "model.backoff_s=0.01",
                 "model.max_retries=2", f"runs_dir={tmp}/runs", f"cache_dir={tmp}/cache",
                 f"stage.trials.n={n}", f"stage.methods=[{','.join(methods)}]", *extra]
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def records(rd) -> dict[str, dict]:
    return {r.run_id: r.model_dump(mode="json") for r in rd.records()}
