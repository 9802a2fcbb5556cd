"""The backend study (Section 5.4, SPEC 7): index backends under views of different selectivity.

Corpus: the chunks of the sampled histories, each history one agent of one org
("bench"); the queries are the histories' questions, each asked by the agent that
holds its history. Views are cases, not code paths (as in VectorDBBench):

    unfiltered  no predicate at all (not even the org): where the search effort matters
    one         owner = me                          s = 1/N
    public10    owner = me OR visibility = public,  10% of agents public
    public50    the same with 50% of agents public
    all         the org predicate only

Configurations are data (conf/stage/backends.yaml `stage.configs`): a backend, its
build parameters and the query-time settings. Configurations with the same backend
and build share one built index. Visibility is data in the index: each index is built
with the 10% split (unfiltered, one, public10, all) and then, for public50, gets the 50%
split's visibility changed in place where that leaves the graph alone (exact, vector sets,
pgvector with HOT updates); Redis, whose HSET re-inserts the vector, is built again. The
ground truth of each case uses that case's split. Each approximate index is built `builds` times, its units inserted in
an order shuffled by a recorded seed (the engines' own level draws are not seedable);
recall is reported per build and as mean and range over builds. Ground truth is
exact search under the same view.

Per (configuration, case): recall@10 against exact, short result lists (< 10),
client-observed latency p50/p95 of the index call (query vectors precomputed) beside
the server's own time (pgvector: EXPLAIN ANALYZE execution time per query; Redis:
FT.SEARCH microseconds from INFO commandstats), the plan pgvector chose and the
policy Redis executed (FT.PROFILE) per query, and Proposition 2: the survivors of a
post-filter (pgvector, iterative scan off: what its ef_search = K' candidates kept before
truncation to 10) beside the local prediction (how many of the exact K' nearest neighbours,
unfiltered, the view admits) and the global one, K'*s (survivors.csv). Plus: footprint after all of a backend's indexes exist,
the write-path delta on each backend's own loaded index with its parts, fan-out over
1..N per-agent stores (lexical: the runtime's session stores; dense: one HNSW index
per agent) against one shared index (FTS5 with owner IN; Redis with a TAG list),
the lexical side (one FTS5 index with an owner column against exact per-view BM25,
built one view at a time so memory stays bounded), and corpus diagnostics (nearest-
neighbour cosine, distinct queries, unfiltered HNSW recall) checked against a
realistic range before the figures count. The range is the stage's own encoder's: calibrated on
real chitchat text with that encoder (bench.backends.calibrate.for_encoder: recorded in the stage
config for its id, cached by id, or calibrated at the start of the stage), because cosines are a
property of the vector space.

Everything goes into one stage folder, runs/<stage>/<label>/: stage.json (through
the record schema), the CSVs (every row names its engine and version), diagnostics.json (with the
thresholds and the encoder id they were calibrated with), calibration.json (where the thresholds
came from and the calibration's own measurement).

    python -m bench.backends --out runs/backends/x [--data FILE] [--histories 12] [--builds 3]

Modules, by concern (ann-benchmarks: the runner knows no engine; each engine's probes are methods of
its backend in harness/memory/backends/):

    cases.py        corpus, agents, the views as cases, configurations (data)
    calibrate.py    the realistic range measured on real chitchat text, per encoder (cached by id)
    plan.py         what the stage will do and how long it should take
    engines.py      what the study asks of each backend: private index, query settings, versions, footprint
    measure.py      one case on one built index: recall, latency, server time, plans, survivors, delta
    lexical.py      one FTS5 index with an owner column against exact per-view BM25
    fanout.py       1..N per-agent stores against one shared index
    diagnostics.py  corpus diagnostics against the encoder's realistic range
    study.py        the study itself, its report and its entry points (`make run STAGE=backends`)
"""
