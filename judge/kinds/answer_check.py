"""LongMemEval's answer check: `correct` for every run, `leak` for Org private runs (judge/prompts.py)."""

from judge.kinds import Kind, register
from judge.prompts import items_for

register(Kind("answer_check", items_for))
