"""Where a client library keeps what an instrumentor wraps, across the versions it records.

A library moves a resource from a module into a package of its own (``openai.resources.chat.completions``
became ``...chat.completions.completions``) and adds methods over its versions (``responses``,
``parse``). An instrumentor names every place a method has lived, wraps the one this version has,
skips what this version lacks, and unwraps exactly what it wrapped.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from opentelemetry.instrumentation.utils import unwrap
from wrapt import wrap_function_wrapper


def import_first(*names: str) -> ModuleType | None:
    """The first of ``names`` this version of the library has (a package shadows the module it replaced)."""
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        return module
    return None


class Wraps:
    """The methods one instrumentor wrapped, to unwrap the same ones, call for call."""

    def __init__(self) -> None:
        self._wrapped: list[tuple[Any, str]] = []

    def wrap(self, module: ModuleType | str | None, path: str, wrapper: Any, *, optional: bool = False) -> bool:
        """Wrap ``Class.method`` (or a function) of ``module`` (or the module of that name); one this version
        lacks is skipped when ``optional`` (an error otherwise: the instrumentor then says the library is
        not recorded)."""
        if isinstance(module, str):
            module = importlib.import_module(module)
        owner_path, _, name = path.rpartition(".")
        owner: Any = module
        for part in owner_path.split(".") if owner_path else ():
            owner = getattr(owner, part, None)
        if owner is None or not hasattr(owner, name):
            if optional:
                return False
            raise AttributeError(f"{getattr(module, '__name__', module)} has no {path}")
        wrap_function_wrapper(owner, name, wrapper)
        self._wrapped.append((owner, name))
        return True

    def unwrap_all(self) -> None:
        for owner, name in reversed(self._wrapped):
            unwrap(owner, name)
        self._wrapped.clear()
