"""The compiled kernels: defined lazily, and cached by numba on disk under a key of their source.

`njit` marks a kernel like numba's decorator, but numba (a third of a second to import) is imported only
when a kernel first runs: the driver, which plans and never runs kernels, starts without it. The first
call of any kernel turns every kernel defined so far into a numba dispatcher, in its module too, so that
kernels calling kernels compile against dispatchers.

Where numba caches them is `KernelCacheLocator`, placed first through numba's documented
NUMBA_CACHE_LOCATOR_CLASSES (numba >= 0.62; no private numba name is touched):
`CACHE_DIR/reput-kernels/KEY/` with CACHE_DIR numba's NUMBA_CACHE_DIR (else `__pycache__` beside the
kernels in a source tree, `~/.cache/numba` for a `--py-files` zip) and KEY a hash of the kernel modules'
source and numba's version (`kernel_key`). So a zip that Spark unpacks at a new path for every application
loads what the last one compiled, a changed kernel or inlined helper compiles anew, and two reput versions
on one executor keep two caches instead of recompiling each other's. Where numba does not honour the
locator, or lacks the one private option a kernel uses (`_nrt`), the first kernel call raises a one-line
RuntimeError naming numba's version and what is missing. Warming every kernel is
`storage_format.kernels.warm`. This module imports nothing else of the package.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import tempfile
import threading
from typing import Any, Callable

CACHE_NAME = "reput-kernels"
OPTIONS = {"cache": True, "nogil": True}  # every kernel: cached on disk, runs without the GIL
# The modules whose source makes the compiled code (the kernels, the helpers numba inlines into them, and
# this one's OPTIONS): their source is the cache key. tests/test_kernel_cache.py checks the list is whole.
KERNEL_MODULES = ("jit", "kernel_bytes", "crc_kernel", "lmq_kernel", "split_kernel", "row_groups", "index_chain",
                  "layout_kernel", "record_search", "record_fields")
# numba 0.62 added NUMBA_CACHE_LOCATOR_CLASSES; pyproject.toml's numba floor (a test keeps them equal).
NUMBA_FLOOR = (0, 62)
LOCATORS_ENV = "NUMBA_CACHE_LOCATOR_CLASSES"
# numba's own locators in its default order (its docs name them): kept after ours for every other function.
NUMBA_LOCATORS = ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator", "IPythonCacheLocator",
                  "ZipCacheLocator")

_defined: list["Kernel"] = []
_located: set[int] = set()  # id() of each kernel function KernelCacheLocator placed
_lock = threading.Lock()


class Kernel:
    """A kernel before its first call (the plain Python function) and after (numba's dispatcher)."""

    def __init__(self, func: Callable, options: dict[str, Any]) -> None:
        functools.update_wrapper(self, func)
        self.py_func, self.options, self.dispatcher = func, options, None

    def __call__(self, *args):
        return (self.dispatcher or _compile_all(self))(*args)

    def __getattr__(self, name: str):  # the dispatcher's own attributes (stats, signatures, ...)
        if name in ("py_func", "options", "dispatcher"):
            raise AttributeError(name)
        return getattr(self.dispatcher or _compile_all(self), name)


def njit(**options: Any) -> Callable[[Callable], Kernel]:
    """Mark a kernel (numba.njit's options, over OPTIONS); numba compiles or loads it at its first call."""
    def mark(func: Callable) -> Kernel:
        kernel = Kernel(func, {**OPTIONS, **options})
        _defined.append(kernel)
        return kernel
    return mark


def _compile_all(first: Kernel):
    """Import numba and make every kernel defined so far a dispatcher, in its module's namespace too."""
    with _lock:
        if first.dispatcher is None:
            numba = install()
            made = []
            for kernel in _defined:
                if kernel.dispatcher is None:
                    kernel.dispatcher = numba.njit(**kernel.options)(kernel.py_func)
                    made.append(kernel)
            _check_in_effect(numba, made)
            for namespace in {id(k.py_func.__globals__): k.py_func.__globals__ for k in _defined}.values():
                for name, value in list(namespace.items()):
                    if isinstance(value, Kernel):
                        namespace[name] = value.dispatcher
    return first.dispatcher


def install():
    """Name KernelCacheLocator first in NUMBA_CACHE_LOCATOR_CLASSES (over a value the user set, else numba's
    default list), import numba and check its version; returns the numba module. Idempotent."""
    ours = f"{__name__}.{KernelCacheLocator.__name__}"
    names = [n.strip() for n in os.environ.get(LOCATORS_ENV, "").split(",") if n.strip()] or list(NUMBA_LOCATORS)
    value = ",".join([ours] + [n for n in names if n != ours])
    os.environ[LOCATORS_ENV] = value  # read at numba's import and whenever it reloads its configuration
    import numba

    found = tuple(int(p) for p in numba.__version__.split(".")[:2])
    if found < NUMBA_FLOOR:
        raise RuntimeError(f"reput: numba {numba.__version__} has no {LOCATORS_ENV} (numba "
                           f"{'.'.join(map(str, NUMBA_FLOOR))} added it), which places reput's kernel cache: "
                           f"install numba>={'.'.join(map(str, NUMBA_FLOOR))}")
    numba.config.CACHE_LOCATOR_CLASSES = value  # a numba imported before this read the variable already
    return numba


def _check_in_effect(numba, made: list["Kernel"]) -> None:
    """A loud one-line error when numba placed a cached kernel elsewhere than KernelCacheLocator, or does not
    take a private option a kernel is compiled with (tried on a trivial function, cached like the kernels)."""
    astray = sorted(k.__qualname__ for k in made if k.options.get("cache") and id(k.py_func) not in _located)
    if astray:
        raise RuntimeError(f"reput: numba {numba.__version__} did not take reput's kernel cache locator from "
                           f"{LOCATORS_ENV} for {', '.join(astray)}")
    private = {name: value for k in made for name, value in k.options.items() if name.startswith("_")}
    if private:
        try:
            numba.njit(**OPTIONS, **private)(_options_probe)()
        except KeyError:
            raise RuntimeError(f"reput: numba {numba.__version__} does not take the njit option(s) "
                               f"{', '.join(sorted(private))} that reput's kernels are compiled with") from None


def _options_probe() -> int:
    """Compiled with the kernels' private options, to find at once whether numba still takes them."""
    return 0


@functools.cache
def kernel_key() -> str:
    """A hash of the kernel modules' source (read through their loader: a file or a zip member) and numba's
    version: the cache directory's name, and the stamp numba checks each cached kernel against."""
    import numba

    digest = hashlib.sha256(f"numba {numba.__version__}\n".encode())
    for name in KERNEL_MODULES:
        spec = importlib.util.find_spec(f"{__package__}.{name}")
        source = spec.loader.get_source(spec.name).encode()
        digest.update(f"{name} {len(source)}\n".encode() + source)
    return digest.hexdigest()[:20]


def cache_root(py_file: str) -> str:
    """Where the kernels' cache directories lie: numba's NUMBA_CACHE_DIR when set, else `__pycache__` beside
    the kernels in a source tree (as numba's own default), else (a zip) the user's cache directory."""
    import numba

    if numba.config.CACHE_DIR:
        return numba.config.CACHE_DIR
    if os.path.isfile(py_file):
        return os.path.join(os.path.dirname(py_file), "__pycache__")
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "numba")


class KernelCacheLocator:
    """numba's cache locator for this package's kernels (numba's locator protocol: from_function,
    ensure_cache_path, get_cache_path, get_source_stamp, get_disambiguator); any other function gets None, so
    numba's own locators place it."""

    def __init__(self, py_func: Callable, py_file: str) -> None:
        self._py_file = py_file  # numba names it when it cannot cache a function
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = os.path.join(cache_root(py_file), CACHE_NAME, kernel_key())

    @classmethod
    def from_function(cls, py_func: Callable, py_file: str) -> "KernelCacheLocator | None":
        if not py_func.__module__.startswith(f"{__package__}."):
            return None
        self = cls(py_func, py_file)
        try:
            self.ensure_cache_path()
        except OSError as e:
            raise RuntimeError(f"reput: the kernel cache {self._cache_path} is not writable ({e.strerror}): "
                               f"set NUMBA_CACHE_DIR to a writable directory") from None
        _located.add(id(py_func))
        return self

    def ensure_cache_path(self) -> None:
        os.makedirs(self._cache_path, exist_ok=True)
        tempfile.TemporaryFile(dir=self._cache_path).close()

    def get_cache_path(self) -> str:
        return self._cache_path

    def get_source_stamp(self) -> str:
        return kernel_key()

    def get_disambiguator(self) -> str:
        return str(self._lineno)
