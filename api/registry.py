"""A small generic registry: register, get, list by pattern, and where each entry came from.

One `Registry` instance holds one kind of thing (variants, tasks). Registration refuses duplicate
names and wrong types loudly; lookup of an unknown name raises `UnknownNameError`, a `LookupError`
whose message suggests close matches (via `difflib`) and lists what exists.

Example:
    >>> reg = Registry("variant", base=object)
    >>> _ = reg.register("softmax", object, origin="attnbench")
    >>> reg.get("sofmax")
    Traceback (most recent call last):
    ...
    attnbench.registry.UnknownNameError: Unknown variant 'sofmax'. Did you mean: softmax? ...
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

# Discovery sets this while it imports a plugin, so entries registered by that import are
# attributed to the distribution that declared the entry point.
_current_origin: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "attnbench_registry_origin", default=None
)


class UnknownNameError(LookupError):
    """An unknown name was looked up; the message suggests close matches."""

    def __str__(self) -> str:  # LookupError would do this too; KeyError would print a repr.
        return str(self.args[0]) if self.args else ""


class DuplicateNameError(ValueError):
    """A name was registered twice."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered item and where it came from.

    Attributes:
        name: The user-facing name (the Hydra option, e.g. ``variant=softmax``).
        obj: The registered object (a class).
        origin: The distribution (or module) that provided it.
    """

    name: str
    obj: T
    origin: str


@contextlib.contextmanager
def registering_from(origin: str) -> Iterator[None]:
    """Attribute every registration inside the block to ``origin`` (a distribution name)."""
    token = _current_origin.set(origin)
    try:
        yield
    finally:
        _current_origin.reset(token)


class Registry(Generic[T]):
    """Named items of one kind, each a subclass of ``base``.

    Args:
        kind: What the items are, used in messages ("variant", "task").
        base: Every registered object must be a subclass of this class.
    """

    def __init__(self, kind: str, base: type) -> None:
        self.kind = kind
        self.base = base
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, obj: T, origin: str | None = None) -> T:
        """Add ``obj`` under ``name``.

        Raises:
            DuplicateNameError: ``name`` is already registered (by another object).
            TypeError: ``obj`` is not a subclass of the registry's base, or ``name`` is not
                an identifier.
        """
        if not isinstance(name, str) or not name.isidentifier():
            raise TypeError(
                f"{self.kind} name {name!r} is not valid: use letters, digits and underscores "
                "(it becomes a Hydra config option)."
            )
        if not (isinstance(obj, type) and issubclass(obj, self.base)):
            raise TypeError(
                f"Cannot register {obj!r} as {self.kind} '{name}': it must be a subclass of "
                f"{self.base.__module__}.{self.base.__qualname__}."
            )
        existing = self._entries.get(name)
        if existing is not None:
            if existing.obj is obj:  # re-import of the same module: harmless
                return obj
            raise DuplicateNameError(
                f"{self.kind} '{name}' is already registered by {existing.origin} "
                f"({existing.obj.__module__}.{existing.obj.__qualname__}); choose another name."
            )
        origin = origin or _current_origin.get() or obj.__module__.split(".")[0]
        self._entries[name] = Entry(name=name, obj=obj, origin=origin)
        return obj

    def unregister(self, name: str) -> None:
        """Remove ``name`` (used by tests that register temporary items)."""
        self._entries.pop(name, None)

    def get(self, name: str) -> T:
        """Return the object registered under ``name``.

        Raises:
            UnknownNameError: with "did you mean" suggestions and the list of available names.
        """
        return self.entry(name).obj

    def entry(self, name: str) -> Entry[T]:
        """Return the full `Entry` for ``name`` (see `get` for errors)."""
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        """The one-sentence error for an unknown ``name``."""
        available = sorted(self._entries)
        close = difflib.get_close_matches(name, available, n=3, cutoff=0.6)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        listing = ", ".join(available) if available else f"(no {self.kind}s registered)"
        return f"Unknown {self.kind} '{name}'.{hint} Available: {listing}"

    def names(self, pattern: str = "*") -> list[str]:
        """Registered names matching a shell-style ``pattern``, sorted."""
        return sorted(n for n in self._entries if fnmatch.fnmatchcase(n, pattern))

    def entries(self) -> list[Entry[T]]:
        """All entries, sorted by name."""
        return [self._entries[n] for n in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)
