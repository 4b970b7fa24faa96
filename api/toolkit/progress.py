"""Progress bars that work in a terminal, a notebook with or without ipywidgets, and a log.

`tqdm.auto` picks the notebook widget inside Jupyter and, where ipywidgets is not installed,
warns "IProgress not found" and shows nothing: a run from a notebook then looks hung. So the
widget is used only where ipywidgets imports; everywhere else the text bar, which a notebook
shows as text too.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import Any, TypeVar

T = TypeVar("T")


def _bar_class() -> type:
    from tqdm import std

    if importlib.util.find_spec("ipywidgets") is None:
        return std.tqdm
    from tqdm import auto

    return auto.tqdm


def progress(items: Iterable[T], **kwargs: Any) -> Any:
    """A tqdm bar over ``items`` (the keyword arguments are tqdm's), without the widget warning."""
    return _bar_class()(items, **kwargs)
