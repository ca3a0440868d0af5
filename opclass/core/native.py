"""The optional native guard: a small C++ extension built against the installed torch.

``python -m opclass.native`` (the README's set-up commands run it) builds it into a cache
directory keyed by Python, torch and source; it is loaded at import when present. Without it
(no compiler, ``OPCLASS_GUARD=python``) opclass uses the pure-Python guard, which behaves the same
and costs more per call; ``OPCLASS_GUARD=native`` makes a missing build an error. Out of the box
(``auto``, no build yet) the first op class defined starts the build in a background process
that nothing waits for (:func:`build_in_background`; ``OPCLASS_NATIVE_BUILD=off`` turns it off);
when it succeeds, the live op classes switch to it, else :func:`guard_info` says why not.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch
import torch.autograd.forward_ad as _forward_ad

_SOURCE = Path(__file__).parent.parent / "csrc" / "guard.cpp"
_NAME = "opclass_guard"
_module: ModuleType | None = None
_backend = "python"
_reason = "not loaded"
_mode = "auto"
_build: threading.Thread | None = None


def cache_dir() -> Path:
    """Where the build goes: ``$OPCLASS_CACHE_DIR`` or ``~/.cache/opclass``, per torch and source."""
    root = Path(os.environ.get("OPCLASS_CACHE_DIR") or Path.home() / ".cache" / "opclass")
    digest = hashlib.sha256(_SOURCE.read_bytes()).hexdigest()[:12]
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}-torch{torch.__version__}-{digest}"
    return root / "".join(c if c.isalnum() or c in "-._" else "_" for c in tag)


def _built_library(directory: Path) -> Path | None:
    candidates = (directory / f"{_NAME}{suffix}" for suffix in (*importlib.machinery.EXTENSION_SUFFIXES, ".so"))
    return next((c for c in candidates if c.is_file()), None)


def _import(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(_NAME, str(path))
    spec = importlib.util.spec_from_file_location(_NAME, str(path), loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    module.set_parameter_type(torch.nn.Parameter)
    module.set_forward_ad(_forward_ad)
    return module


def built() -> Path | None:
    """The native guard's library, if it is built for this torch version."""
    return _built_library(cache_dir())


def build(verbose: bool = False) -> Path:
    """Compile the guard (once per torch version) and return the library path."""
    from torch.utils.cpp_extension import load  # imported here: it pulls in setuptools

    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    load(name=_NAME, sources=[str(_SOURCE)], extra_cflags=["-O2"], build_directory=str(directory), verbose=verbose, is_python_module=False)
    path = _built_library(directory)
    if path is None:
        raise RuntimeError(f"the build left no {_NAME} library in {directory}")
    return path


def load(mode: str | None = None) -> None:
    """Choose the guard: ``mode`` or ``$OPCLASS_GUARD`` (``auto`` default, ``native``, ``python``)."""
    global _module, _backend, _reason, _mode
    mode = (mode or os.environ.get("OPCLASS_GUARD") or "auto").lower()
    if mode not in ("auto", "native", "python"):
        raise ValueError(f"OPCLASS_GUARD={mode!r}: use auto, native or python")
    _module, _backend, _mode = None, "python", mode
    if mode == "python":
        _reason = "OPCLASS_GUARD=python"
        return
    try:
        path = built()
        if path is None:
            if mode == "auto":
                _reason = "not built (run: python -m opclass.native)"
                return
            path = build()
        _module = _import(path)
        _backend, _reason = "native", str(path)
    except Exception as e:  # any failure to build or load falls back, unless native was demanded
        if mode == "native":
            raise
        _reason = f"failed to load: {type(e).__name__}: {e}"


def build_in_background(switch: Callable[[Callable[[], None]], int]) -> None:
    """Start building the native guard in a background process, once, where ``auto`` found no
    build (called when an op class is defined). Once it is loaded, ``switch(activate)`` makes it
    the guard and gives the live op classes calls generated for it (under the definitions' lock)."""
    global _build, _reason
    if _build is not None or _module is not None or _mode != "auto" or os.environ.get("OPCLASS_NATIVE_BUILD", "").lower() == "off":
        return
    _reason = f"not built yet; building in the background into {cache_dir()}"
    _build = threading.Thread(target=_build_and_switch, args=(switch,), name="opclass-native-build", daemon=True)
    _build.start()


def wait_for_build(timeout: float | None = None) -> bool:
    """Wait for a background build to end (tests, benchmarks); ``True`` if the native guard is in use."""
    if _build is not None:
        _build.join(timeout)
    return _module is not None


def _build_and_switch(switch: Callable[[Callable[[], None]], int]) -> None:
    global _reason
    # A separate process: the compiler's minutes of CPU never hold this interpreter's GIL, and
    # it finishes (for the next run) even if this program exits first.
    env = {**os.environ, "OPCLASS_GUARD": "python", "OPCLASS_NATIVE_BUILD": "off", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run([sys.executable, "-m", "opclass.native"], capture_output=True, text=True, env=env, check=False)
        path = built()
        if path is None:
            # `python -m opclass.native` says why in one message (the compiler's error may span lines).
            text = done.stderr or done.stdout or f"exit status {done.returncode}"
            start = text.find("native guard not built")
            said = " ".join(text[start if start >= 0 else 0 :].split())
            _reason = f"background build failed: {said[:400]}"
            return
        module = _import(path)
    except Exception as e:  # never an error in the user's program: the Python guard stays
        _reason = f"background build failed: {type(e).__name__}: {e}"
        return

    def activate() -> None:
        global _module, _backend
        _module, _backend = module, "native"

    switched = switch(activate)
    _reason = f"{path} (built in the background; {switched} op classes switched to it)"


def guard_backend() -> str:
    """``"native"`` or ``"python"``: the guard that op classes defined from now on use.

    Example:
        >>> import opclass
        >>> opclass.guard_backend() in ("native", "python")
        True
    """
    return _backend


def guard_info() -> str:
    """Why the current guard was chosen (library path, or the reason for the Python guard).

    Example:
        >>> import opclass
        >>> opclass.guard_info().split(":")[0] == opclass.guard_backend()
        True
    """
    return f"{_backend}: {_reason}"


def native_module() -> ModuleType | None:
    """The loaded extension, or ``None`` with the Python guard."""
    return _module


# Chosen at import: op classes and OpMeta (whose C ``tp_call`` comes from here) need it early.
load()
#: Whether ``OpMeta`` calls op classes through the extension's C call (fixed at import); if not,
#: each op class's generated call is its ``__new__``.
CALL_IS_NATIVE = _module is not None
