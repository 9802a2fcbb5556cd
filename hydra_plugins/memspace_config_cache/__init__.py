"""Hydra's composition made cheaper, its result unchanged: the `file://`, `pkg://` and `structured://` config sources,
each config file parsed once per process for the bytes it holds, and the defaults tree's interpolation map built
only where a defaults list interpolates (interpolation_map).

WHY: Hydra builds a fresh config repository for every composition and parses every yaml the defaults tree reaches
again, some of them twice (once for the package header). A command composes four to ten times (the unknown-key
check, Hydra's mode and run, each condition's own yaml), and the parsing was a third of a composition: 80 s of CPU
in the test suite. Here a file's parsed config is kept under its path and its exact bytes, and every composition
gets its own deep copy (Hydra edits what it loads), so a yaml changed between two compositions is parsed anew and
nothing parsed is shared.

Hydra imports this module when it scans `hydra_plugins`, before it registers the plugins it found (its own
among them), and its source registry keeps the first class registered for a scheme under a class name: so these
classes, registered here on import under the names of Hydra's own, serve the `file`, `pkg` and `structured`
schemes, reading as Hydra's do (the header from the first 512 characters, the body through OmegaConf.load on
universal-newline text). Registered after Hydra's (a registry built before this module was imported), they change
nothing: Hydra's own sources read every file as before. The interpolation map is replaced on import either way.
"""

from __future__ import annotations

import copy
import io
import os
import threading

from hydra._internal.core_plugins import file_config_source as _file
from hydra._internal.core_plugins import importlib_resources_config_source as _pkg
from hydra._internal import defaults_list as _defaults
from hydra._internal.core_plugins import structured_config_source as _structured
from hydra._internal.sources_registry import SourcesRegistry
from hydra.core.default_element import InputDefault
from hydra.plugins.config_source import ConfigResult, ConfigSource
from omegaconf import OmegaConf

_PARSED: dict[tuple[str, bytes], tuple[object, dict]] = {}  # (where, bytes) -> (config, header)
_LOCK = threading.Lock()
_KEPT_AT_MOST = 4096  # files; past that the kept ones are dropped, not the caller's result


class _Named(io.StringIO):
    """The file's text under the file's name: a yaml error names the file, as when Hydra parses the open file."""

    def __init__(self, text: str, name: str):
        super().__init__(text)
        self.name = name


def parsed(where: str, data: bytes, name: str) -> tuple[object, dict]:
    """A deep copy of the config the bytes `data` of the file at `where` parse to, and its header (a new dict);
    `name`: the file's name in a parse error. Like Hydra's sources: the header first, then the body."""
    key = (where, data)
    with _LOCK:
        kept = _PARSED.get(key)
    if kept is None:
        text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline=None).read()
        header = ConfigSource._get_header_dict(text[:512])
        kept = (OmegaConf.load(_Named(text, name)), header)  # an error is raised, never kept
        with _LOCK:
            if len(_PARSED) >= _KEPT_AT_MOST:
                _PARSED.clear()
            _PARSED[key] = kept
    return copy.deepcopy(kept[0]), dict(kept[1])


class FileConfigSource(_file.FileConfigSource):
    """Hydra's `file://` source, each file parsed once for the bytes it holds."""

    def load_config(self, config_path: str) -> ConfigResult:
        full_path = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
        try:
            with open(full_path, "rb") as f:
                data = f.read()
        except OSError:
            return super().load_config(config_path)  # Hydra's own error for a file it cannot read
        config, header = parsed(full_path, data, full_path)
        return ConfigResult(config=config, path=f"{self.scheme()}://{self.path}", provider=self.provider,
                            header=header)


class ImportlibResourcesConfigSource(_pkg.ImportlibResourcesConfigSource):
    """Hydra's `pkg://` source (its own hydra/ configs among them), each file parsed once for the bytes it holds."""

    def _read_config(self, res) -> ConfigResult:
        try:
            data = res.read_bytes()
        except OSError:
            return super()._read_config(res)
        config, header = parsed(f"{self.scheme()}://{self.path}/{res}", data, str(res))
        return ConfigResult(config=config, path=f"{self.scheme()}://{self.path}", provider=self.provider,
                            header=header)


class StructuredConfigSource(_structured.StructuredConfigSource):
    """Hydra's `structured://` source, whose copies read the one ConfigStore. WHY: Hydra deep-copies its config
    repository for every composition, so that `initialize_sources` (which replaces the list of sources) leaves the
    original alone, and with it copied the whole ConfigStore (Hydra's own schemas, every node), about 3 ms a
    composition and 21 s of CPU in the test suite. The store is the singleton every new source reads anyway,
    filled before a composition starts, and it hands out a copy of any node it loads (ConfigStore.load)."""

    def __deepcopy__(self, memo):
        new = copy.copy(self)  # provider and path are strings; `store` stays Hydra's singleton
        memo[id(self)] = new
        return new


for _source in (FileConfigSource, ImportlibResourcesConfigSource, StructuredConfigSource):
    SourcesRegistry.instance().register(_source)


# the function this module's first run found (Hydra's own), kept on Hydra's module: Hydra's plugin scan executes
# a module it already imported again, and a later run that took whatever is installed then (this wrapper, or a
# wrapper of it) would call itself without end
HYDRAS_INTERPOLATION_MAP = _defaults.__dict__.setdefault("_memspace_hydras_interpolation_map",
                                                         _defaults._create_interpolation_map)


def interpolation_map(overrides, defaults_list, self_added):
    """Hydra's map of the choices known so far, built only for a defaults list that holds an interpolation
    (`- extra: ${db}`). WHY: Hydra builds it for every config of the defaults tree, an OmegaConf of every choice
    known so far (our stages choose dozens), and reads it only to resolve an interpolated default of that list:
    a quarter of a composition (stage=smoke 73 ms, 49 ms without). Every child Hydra resolves with it is an entry
    of this very list, final by now; without one the map is never read, and None would fail loudly if it were."""
    if any(isinstance(d, InputDefault) and d.is_interpolation() for d in defaults_list):
        return HYDRAS_INTERPOLATION_MAP(overrides, defaults_list, self_added)
    return None


interpolation_map.__wrapped__ = HYDRAS_INTERPOLATION_MAP
_defaults._create_interpolation_map = interpolation_map
