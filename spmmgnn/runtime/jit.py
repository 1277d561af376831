"""numba, loaded when a kernel first runs instead of at ``import spmmgnn``.

``import numba`` takes ~0.5 s of a 2-core machine's time, per process and per rank (at
P = 16, imports were 17 of 23 s of start-up; ``spmmgnn --help`` needs no kernel). The
kernels of the modules ``import spmmgnn`` loads are declared with this module's ``njit``
(same options as numba's) and ``prange``: each is a ``Lazy`` until its first call, which
imports numba, makes the real dispatcher (compiled, or loaded from numba's cache, on that
call as before) and rebinds every ``Lazy`` global of its module to its real object, so that
numba, compiling a kernel, sees real dispatchers, intrinsics and ``numba.prange`` in the
kernel's globals (a kernel calling another module's kernel binds that one too).

A first compile takes tens of seconds (80 CPU-s for the partitioners' refinement), so every
kernel's dispatcher announces it: when numba misses its cache for a kernel and is about to
compile, ``COMPILE_NOTICE`` is printed once per process, on rank 0, to stderr
(``watch_compiles``; modules that use numba eagerly take ``eager_njit``).
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from .thread_env import loading

_pool = None  # numba's (get_num_threads, set_num_threads) C functions, once its pool runs


def numba_pool() -> tuple[Callable[[], int], Callable[[int], None]]:
    """Start numba's thread pool (once) and return its raw ``get_num_threads`` /
    ``set_num_threads`` (the thread-local count of the calling thread; ~0.1 us a call
    against ~1 us for numba's checked wrappers). Starting numba's OpenMP pool sets the
    shared libgomp's thread count, which is torch's: torch's count is put back if torch is
    loaded (torch is not imported here)."""
    global _pool
    if _pool is None:
        torch = sys.modules.get("torch")
        before = torch.get_num_threads() if torch is not None else None
        with loading():  # libgomp reads its idle-thread wait as it loads (thread_env)
            from numba.np.ufunc import parallel

            parallel._launch_threads()
        if before is not None and torch.get_num_threads() != before:
            torch.set_num_threads(before)
        _pool = (parallel._get_num_threads, parallel._set_num_threads)
    return _pool


_MAKING = threading.RLock()  # one thread makes and binds kernels at a time


class Lazy:
    """A stand-in for a numba object made by ``make()`` on first use (call or ``real``).

    Thread-safe: the real object is handed out only once its module's globals are bound.
    Handed out before (as it once was), a second thread's first call could compile the
    kernel while the first thread was still binding, and numba met a ``Lazy`` among the
    kernel's globals (the partitioner's two candidates refine in two threads: ``spmmgnn
    partition --method metis+maxsend`` on an empty numba cache failed with "Untyped global
    name 'penalty'")."""

    def __init__(self, make: Callable[[], object], name: str, module_globals: dict):
        self._make, self._made, self._real = make, None, None
        self._globals = module_globals
        self.__name__ = self.__qualname__ = name
        self.__doc__ = getattr(make, "__doc__", None)

    def real(self):
        if self._real is None:
            with _MAKING:  # re-entrant: binding the module asks for this object again
                if self._real is not None:
                    return self._real   # made by another thread while this one waited
                if self._made is not None:
                    return self._made   # this thread, binding its module: not yet handed out
                numba_pool()  # the pool starts here, not inside a kernel's first call
                self._made = self._make()
                try:
                    bind(self._globals)
                except BaseException:
                    self._made = None  # the next call tries again
                    raise
                self._real = self._made
        return self._real

    def __call__(self, *args, **kwargs):
        return self.real()(*args, **kwargs)

    def __repr__(self) -> str:
        state = "made" if self._real is not None else "not made yet"
        return f"<spmmgnn.runtime.jit.Lazy {self.__name__} ({state})>"


def prange(*args):
    """numba's ``prange`` inside a kernel (``bind`` puts the real one in the kernel's module);
    ``range`` if called from Python."""
    return range(*args)


def njit(*args, **options):
    """``numba.njit`` made on first use: ``@njit`` or ``@njit(**options)``."""

    def decorate(fn):
        def make():
            import numba

            return watch_compiles(numba.njit(**options)(fn))

        make.__doc__ = fn.__doc__
        return Lazy(make, fn.__name__, fn.__globals__)

    if args and callable(args[0]) and not options:
        return decorate(args[0])
    return decorate


def eager_njit(**options):
    """``numba.njit(**options)`` made now (for modules that import numba anyway), its
    compiles announced like the lazy kernels' (``watch_compiles``)."""
    import numba

    def decorate(fn):
        return watch_compiles(numba.njit(**options)(fn))

    return decorate


def lazy(make: Callable[[], object], module_globals: dict) -> Lazy:
    """Any numba object (e.g. an ``@intrinsic``) built by ``make()`` on first use."""
    return Lazy(make, make.__name__.removeprefix("make_").removeprefix("_make_"),
                module_globals)


def bind(module_globals: dict) -> None:
    """Replace the ``Lazy`` objects and ``prange`` among a module's globals with the real
    numba objects (what numba reads when it compiles a kernel of that module)."""
    import numba

    for name, value in list(module_globals.items()):
        if isinstance(value, Lazy):
            module_globals[name] = value.real()
        elif value is prange:
            module_globals[name] = numba.prange


def real(obj):
    """The numba object behind ``obj`` (``obj`` itself when it is not ``Lazy``)."""
    return obj.real() if isinstance(obj, Lazy) else obj


def kernels_cached(folders: list[Path] | None = None) -> bool:
    """Has numba's cache the compiled kernels of ``spmmgnn.local.kernels`` (an index file
    ``kernels.*.nbi`` in ``$NUMBA_CACHE_DIR`` or beside the module)? If not, the first
    kernel call compiles them (tens of seconds): the command line says so first."""
    if folders is None:  # (spmmgnn/local, where the kernels' module lies)
        here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "local")
        folders = [Path(here) / "__pycache__"]
        if os.environ.get("NUMBA_CACHE_DIR"):  # numba's sub-folder for this source folder
            digest = hashlib.sha1(here.encode()).hexdigest()
            folders.append(Path(os.environ["NUMBA_CACHE_DIR"]) /
                           f"{os.path.basename(here)}_{digest}")
    for folder in folders:
        try:
            if next(folder.glob("kernels.*.nbi"), None) is not None:
                return True
        except OSError:
            continue
    return False


COMPILE_NOTICE = ("compiling the numba kernels (the first run in this environment: about "
                  "20-90 s; later runs load them from numba's cache)")
_notice = {"prefix": "spmmgnn", "shown": False}


def notice_prefix(prefix: str) -> None:
    """What starts the notice line (the command line: ``spmmgnn train``)."""
    _notice["prefix"] = prefix


def announce_compile() -> None:
    """Print ``COMPILE_NOTICE`` once per process, on rank 0 of the MPI job, to stderr."""
    if _notice["shown"]:
        return
    _notice["shown"] = True
    if _world_rank() == 0:
        print(f"{_notice['prefix']}: {COMPILE_NOTICE}", file=sys.stderr, flush=True)


def _world_rank() -> int:
    """This process's rank in MPI's world (0 without MPI running)."""
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            return mpi.COMM_WORLD.Get_rank()
    except Exception:  # noqa: BLE001 - a notice must never fail the call it precedes
        pass
    return 0


def watch_compiles(dispatcher):
    """``dispatcher`` (a numba ``Dispatcher``), made to call ``announce_compile`` when its
    cache does not hold a signature it is about to compile: numba asks the dispatcher's
    cache (``load_overload``) first, and compiles when that finds nothing."""
    cache = getattr(dispatcher, "_cache", None)
    load = getattr(cache, "load_overload", None)
    if load is None:
        return dispatcher

    def load_or_announce(sig, target_context):
        found = load(sig, target_context)
        if found is None:
            announce_compile()
        return found

    cache.load_overload = load_or_announce
    return dispatcher
