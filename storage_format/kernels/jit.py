"""The compiled kernels: defined lazily, and cached by numba so that each compiles once per machine.

`njit` marks a kernel like numba's decorator, but numba (a third of a second to import) is imported only
when a kernel first runs: the driver, which plans and never runs kernels, starts without it. The first
call of any kernel turns every kernel defined so far into a numba dispatcher, in its module too, so that
kernels calling kernels compile against dispatchers.

In a source tree numba caches next to the module (__pycache__). Imported from a `--py-files` zip,
numba's own zip locator keys its cache directory by the zip's location, which Spark makes new for
every application: each application would compile again. `StableZipLocator` keys it by the package
name only (the index inside is still checked against a hash of the module's source, so a changed
module compiles anew). numba checks a kernel only against its own module's source, not against the
helpers it inlines from `HELPER_MODULES`: every locator here adds their source to this package's
kernels' stamps, so a changed helper compiles its kernels anew too. Warming every kernel is
`storage_format.kernels.warm`. This module imports nothing else of the package.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import threading
from pathlib import PurePosixPath
from typing import Any, Callable

CACHE_NAME = "reput-kernels"
OPTIONS = {"cache": True, "nogil": True}  # every kernel: cached on disk, runs without the GIL
# Modules whose kernels numba inlines into kernels of other modules (split_kernel's byte helpers).
HELPER_MODULES = ("kernel_bytes",)

_defined: list["Kernel"] = []
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
            import numba

            install()
            for kernel in _defined:
                if kernel.dispatcher is None:
                    kernel.dispatcher = numba.njit(**kernel.options)(kernel.py_func)
            for namespace in {id(k.py_func.__globals__): k.py_func.__globals__ for k in _defined}.values():
                for name, value in list(namespace.items()):
                    if isinstance(value, Kernel):
                        namespace[name] = value.dispatcher
    return first.dispatcher


def install() -> None:
    """Put StableZipLocator first and give numba's own locators the helpers' stamp (idempotent), before
    numba makes any dispatcher."""
    from numba.core import caching

    locator = _stable_zip_locator()
    classes = caching.CacheImpl._locator_classes  # numba's documented extension point is this list
    if locator not in classes:
        classes[:] = [locator] + [type(c.__name__, (HelperStamp, c), {}) for c in classes]


def helper_stamp() -> str:
    """A hash of the helper modules' source (read through their loader: a file or a zip member)."""
    digest = hashlib.sha256()
    for name in HELPER_MODULES:
        spec = importlib.util.find_spec(f"{__package__}.{name}")
        digest.update(spec.loader.get_source(spec.name).encode())
    return digest.hexdigest()


class HelperStamp:
    """Locator mixin: this package's kernels are stamped with their module's source and the helpers'."""

    ours = False

    @classmethod
    def from_function(cls, py_func, py_file):
        self = super().from_function(py_func, py_file)
        if self is not None:
            self.ours = py_func.__module__.startswith(f"{__package__}.")
        return self

    def get_source_stamp(self):
        stamp = super().get_source_stamp()
        return (stamp, helper_stamp()) if self.ours else stamp


@functools.cache
def _stable_zip_locator() -> type:
    """StableZipLocator: numba's zip locator with a cache directory that does not depend on where the zip lies."""
    from numba.core import caching, config

    class StableZipLocator(HelperStamp, caching.ZipCacheLocator):
        def __init__(self, py_func, py_file) -> None:
            super().__init__(py_func, py_file)
            root = config.CACHE_DIR or caching.AppDirs(appname="numba", appauthor=False).user_cache_dir
            package = PurePosixPath(self._internal_path).parent.as_posix().replace("/", ".")
            self._cache_path = os.path.join(root, CACHE_NAME, package)

        @classmethod
        def from_function(cls, py_func, py_file):
            if ".zip" not in py_file:
                return None
            self = cls(py_func, py_file)
            try:
                self.ensure_cache_path()
            except OSError:
                return None
            self.ours = py_func.__module__.startswith(f"{__package__}.")
            return self

    return StableZipLocator
