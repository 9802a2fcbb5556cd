"""LongMemEval data: loading and validation, samples, LongMemEval-Org, and a generated benchmark."""

from .longmemeval import (  # noqa: F401
    QUESTION_TYPES, DataError, Question, Session, Turn, iter_questions, load, opaque_session_id, sha256_file,
)
