"""A digest of the code a function runs, for the Transform stage's cache key.

Transform runs only the module's ``preprocessing_fn`` (and what it calls), so its key need
not change when ``run_fn`` does: :func:`function_digest` hashes the function's code objects
recursively (bytecode, constants, names, defaults, closure values) and every module-level
value it names: constants and containers of them by value, functions and classes defined in
the module's folder (helper files included) by their own code, and a helper module of that
folder by its file's bytes. A library function, class or module (``tft.scale_to_z_score``,
``tf``) counts by its qualified name: its code is the installed library's.

Hand-written because no library offers it: cloudpickle serializes a function by value but
its bytes hold line numbers and are not stable across runs, and ``inspect.getsource`` misses
what the function reaches through helpers and module-level constants.

When anything reachable cannot be fingerprinted (an object instance at module level, a
class from another place holding state, ...), the digest is None and the caller keys on the
whole module folder's digest instead: a changed input must never hit the cache. Line
numbers do not count (a comment added above the function reruns nothing).

Example::

    digest = function_digest(preprocessing_fn)  # None: fall back to the module's digest
    key_part = transform_code(preprocessing_fn, module_digest)  # "function <digest>"
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import os
import sys
import types
from collections.abc import Callable
from typing import Any, Optional

__all__ = ["function_digest", "transform_code"]

_PLAIN = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis))


class _NotFingerprintable(Exception):
    """Something reachable from the function has no stable digest."""


class _Digest:
    """One walk over what a function reaches; ``folder`` is where user code lives."""

    def __init__(self, folder: str):
        self._folder = folder
        self._hash = hashlib.blake2b(digest_size=32)
        self._seen: dict[int, int] = {}  # id -> order first seen: cycles and shared values
        self._keep: list[Any] = []  # keeps ids stable while walking

    def put(self, *parts: Any) -> None:
        for part in parts:
            self._hash.update(repr(part).encode() + b"\0")

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def _ours(self, filename: Optional[str]) -> bool:
        if not filename:
            return False
        path = os.path.realpath(filename)
        return os.path.dirname(path) == self._folder or path.startswith(self._folder + os.sep)

    def value(self, v: Any) -> None:
        if isinstance(v, _PLAIN):
            self.put(type(v).__name__, v)
            return
        if id(v) in self._seen:
            self.put("seen", self._seen[id(v)])
            return
        self._seen[id(v)] = len(self._seen)
        self._keep.append(v)
        if isinstance(v, (tuple, list, frozenset, set)):
            items = sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v
            self.put(type(v).__name__, len(items))
            for item in items:
                self.value(item)
        elif isinstance(v, dict):
            self.put("dict", len(v))
            for k in sorted(v, key=repr):
                self.value(k)
                self.value(v[k])
        elif isinstance(v, types.FunctionType):
            self.function(v)
        elif isinstance(v, functools.partial):
            self.put("partial")
            self.value(v.func)
            self.value(v.args)
            self.value(v.keywords)
        elif isinstance(v, types.ModuleType):
            self.module(v)
        elif isinstance(v, type):
            self.cls(v)
        elif isinstance(v, types.BuiltinFunctionType):
            self.put("builtin", getattr(v, "__module__", None), v.__qualname__)
        elif isinstance(v, types.CodeType):
            self.code(v, {})
        else:
            raise _NotFingerprintable(type(v).__qualname__)

    def module(self, m: types.ModuleType) -> None:
        path = getattr(m, "__file__", None)
        if self._ours(path):  # a helper module beside the module file: its bytes
            with open(path, "rb") as f:
                self.put("helper module", m.__name__, hashlib.blake2b(f.read()).hexdigest())
        else:
            self.put("module", m.__name__)

    def cls(self, c: type) -> None:
        module = sys.modules.get(c.__module__)
        if not self._ours(getattr(module, "__file__", None)):
            self.put("class", c.__module__, c.__qualname__)
            return
        self.put("our class", c.__qualname__, [b.__qualname__ for b in c.__bases__])
        for base in c.__bases__:
            self.value(base)
        for name in sorted(vars(c)):
            if name in ("__dict__", "__weakref__", "__module__", "__doc__"):
                continue
            attr = vars(c)[name]
            if isinstance(attr, (staticmethod, classmethod)):
                attr = attr.__func__
            elif isinstance(attr, property):
                attr = (attr.fget, attr.fset, attr.fdel)
            self.put(name)
            self.value(attr)

    def function(self, fn: types.FunctionType) -> None:
        if not self._ours(fn.__code__.co_filename):
            self.put("function", fn.__module__, fn.__qualname__)
            return
        self.put("our function", fn.__qualname__)
        self.value(fn.__defaults__)
        self.value(fn.__kwdefaults__)
        for cell in fn.__closure__ or ():
            try:
                self.value(cell.cell_contents)
            except ValueError:  # an empty cell (a name not yet bound)
                self.put("empty cell")
        self.code(fn.__code__, fn.__globals__)

    def code(self, co: types.CodeType, globals_: dict) -> None:
        # Not co_filename, co_firstlineno or the line table: moving code reruns nothing.
        self.put(co.co_code, co.co_names, co.co_varnames, co.co_freevars, co.co_cellvars)
        self.put(co.co_argcount, co.co_posonlyargcount, co.co_kwonlyargcount, co.co_flags)
        for const in co.co_consts:
            if isinstance(const, types.CodeType):
                self.code(const, globals_)
            else:
                self.value(const)
        for name in co.co_names:  # globals it reads (attribute names are here too)
            if name in globals_:
                self.put("global", name)
                self.value(globals_[name])
            elif not hasattr(builtins, name):
                self.put("unbound", name)


def function_digest(fn: Callable) -> Optional[str]:
    """The digest of the code ``fn`` runs (see the module docstring), or None when
    something it reaches cannot be fingerprinted (the caller then uses the whole module's
    digest)."""
    code = getattr(fn, "__code__", None)
    if not isinstance(fn, types.FunctionType) or code is None:
        return None
    walk = _Digest(os.path.dirname(os.path.realpath(code.co_filename)))
    walk.put(sys.version_info[:2])  # bytecode differs between Python versions
    try:
        walk.value(fn)
    except (_NotFingerprintable, OSError, RecursionError):
        return None
    return walk.hexdigest()


def transform_code(
    preprocessing_fn: Optional[Callable], module_digest: Optional[str]
) -> Optional[str]:
    """What the Transform stage's cache key holds of the module: ``function <digest>`` of
    what ``preprocessing_fn`` runs, or ``module <module_digest>`` when that digest cannot
    be computed; None without a ``preprocessing_fn``."""
    if preprocessing_fn is None:
        return None
    digest = function_digest(preprocessing_fn)
    return f"function {digest}" if digest else f"module {module_digest}"
