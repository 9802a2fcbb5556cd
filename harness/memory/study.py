"""Moved: the backend study is the package bench/backends/ (plan, cases, engines, measure, lexical, fanout,
diagnostics, study). This module keeps the old import path and `python -m harness.memory.study` working."""

from __future__ import annotations

import sys

from bench.backends.cases import (CASES, FANOUT_DENSE, K, K_PRIME, LEXICAL_PER_VIEW, LEXICAL_SHARED, ORG,  # noqa: F401
                                  PUBLIC_SHARE, REPO, SPLIT_OF, STAGE_CONF, TRUTH, Config, agent_of, build_seed,
                                  build_units, default_stage, load_histories, parse_configs, public_agents, view_for)
from bench.backends.diagnostics import (THRESHOLD_KEYS, corpus_diagnostics, diagnostics, nn_cosines,  # noqa: F401
                                        realism_checks, stage_realism)
from bench.backends.engines import (apply_query, engine_label, engine_versions, filter_mode,  # noqa: F401
                                    footprint_row, k_prime_of, make_index, query_defaults, server_memory)
from bench.backends.fanout import fanout_side, fanout_steps  # noqa: F401
from bench.backends.lexical import lexical_side  # noqa: F401
from bench.backends.measure import (delta_on_index, local_prediction, measure_case, render_survivors,  # noqa: F401
                                    summarise, survivors_row, write_csv)
from bench.backends.plan import plan, render_plan  # noqa: F401
from bench.backends.study import main, print_report, run, run_study  # noqa: F401
from harness.memory.backends.pgvector import plan_summary  # noqa: F401
from harness.memory.units import Unit  # noqa: F401
from harness.memory.views import View  # noqa: F401


def __getattr__(name: str):
    if name == "APPROXIMATE":  # the approximate backends, as they declare themselves
        from bench.backends import cases

        return cases.APPROXIMATE
    raise AttributeError(name)


if __name__ == "__main__":
    sys.exit(main())
