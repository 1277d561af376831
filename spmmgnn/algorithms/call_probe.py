"""The one all-reduce every collective call of an operator starts with.

Every collective method of ``DistSpMM`` (``matmul``, ``matmul_t``, ``gather_rows``,
``scatter_rows``, ``fetch_rows``, ``allgather_rows`` and ``qr`` through ``check_local``;
``dot``, ``norm`` and ``gram`` with their sums; ``allreduce``) enters the same collective
first when the operator validates: a SUM all-reduce of ``LENGTH`` float64 over the grid,
through one persistent request per operator where ``persistent.available()``. Ranks that
are in different calls meet there and read the same verdict (one error on every rank),
where they would otherwise enter different collectives (a hang, or MPI's "Message
truncated").

The buffer is [error flag, the call's ``DIGITS`` 16-bit digits d, their squares d^2,
``FOLD`` values of a sum]. A call is ``WORDS`` numbers below 2^32 (call, side, root, two
widths, itemsize), two digits each. Every rank passed the same words iff the sums are P
times this rank's own d and d^2 (then P sum(d^2) = (sum d)^2, equality in Cauchy-Schwarz,
which holds only when all are equal), so every rank reaches the same verdict from the same
sums; exact in float64 for P < 2^21. ``dot``, ``norm`` and ``gram`` send their sum in the
``FOLD`` slots (one all-reduce a call). On a difference, one ``Allgather`` of every rank's
words names it.

The probe is numpy on the host whatever the grid's backend (``check_local`` reads only the
shape and dtype of a device array), like every small agreement collective.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..exchange.persistent import Owned, available
from ..runtime.errors import agree, collective_error

# the operator's collective calls, in the order their disagreement names them
CALLS = ("matmul", "matmul_t", "gather_rows", "scatter_rows", "dot", "norm", "gram", "qr",
         "fetch_rows", "allgather_rows", "allreduce")
SIDES = ("input", "output")
NO_SIDE, BAD_SIDE = 2, 3  # side codes: a call without side=, a side that is neither
WORDS = 6  # call, side, root + 1 (0: not a rank), width of x, width of y, itemsize
DIGITS = 2 * WORDS
FOLD = 16  # values of a sum sent in the same all-reduce
LENGTH = 1 + 2 * DIGITS + FOLD
SUMS = slice(1 + 2 * DIGITS, LENGTH)  # where the folded sum comes back
MAX_WORD = 2**32 - 1

CACHED = 512  # distinct calls whose probe an operator keeps (a program makes a handful)


def side_code(side) -> int:
    return NO_SIDE if side is None else SIDES.index(side) if side in SIDES else BAD_SIDE


def root_code(root) -> int:
    """root + 1 for a rank number, 0 for anything else (that rank's own error says why)."""
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or root < 0:
        return 0
    return min(int(root) + 1, MAX_WORD)


def words(call: tuple) -> tuple[int, ...]:
    """The words of ``call`` = (what, side, root, width of x, width of y, itemsize), each
    below 2^32 (a width beyond is clipped)."""
    what, side, root, fx, fy, itemsize = call
    return (CALLS.index(what), side_code(side), root_code(root), min(int(fx), MAX_WORD),
            min(int(fy), MAX_WORD), int(itemsize))


class Head:
    """One call's probe: the buffer [0, digits, squares, zeros] (read-only), the bytes the
    reduced buffer has when all ``size`` ranks sent it without an error and without a sum
    (``agreed``; ``agreed_head`` its [flag, digits, squares] part), and the words."""

    __slots__ = ("buf", "agreed", "agreed_head", "words")

    def __init__(self, key: tuple[int, ...], size: int):
        d = np.array([(w >> shift) & 0xFFFF for w in key for shift in (0, 16)],
                     dtype=np.float64)
        self.buf = np.concatenate([[0.0], d, d * d, np.zeros(FOLD)])
        self.buf.flags.writeable = False
        self.agreed = (self.buf * size).tobytes()
        self.agreed_head = self.agreed[:8 * SUMS.start]
        self.words = key


class CallProbe:
    """One operator's call agreement: its buffers and its persistent all-reduce, made on
    the first validated call (every rank's first call enters it, whichever call it is).
    The send buffer keeps the last call's probe: the same call again (an iterative
    method's ``matmul``) sends it as it is."""

    __slots__ = ("comm", "size", "send", "seen", "request", "owned", "heads", "last",
                 "__weakref__")

    def __init__(self, comm: MPI.Comm):
        self.comm, self.size = comm, comm.Get_size()
        self.send = np.zeros(LENGTH)
        self.seen = np.zeros(LENGTH)
        self.request = self.owned = self.last = None
        self.heads: dict[tuple, Head] = {}

    def head(self, call: tuple) -> Head:
        """``call``'s probe, made once per distinct call."""
        try:
            return self.heads[call]
        except KeyError:
            pass
        except TypeError:  # an unhashable side= (that rank's own error says why)
            return Head(words(call), self.size)
        found = Head(words(call), self.size)
        if len(self.heads) < CACHED:
            self.heads[call] = found
        return found

    def agree(self, call: tuple, error: str | None,
              local: np.ndarray | None = None) -> np.ndarray | None:
        """Collective: return when every rank made the same ``call`` = (what, side, root,
        width of x, width of y, itemsize) without an ``error``, with ``local`` (at most
        FOLD float64 values) summed over the ranks (None without ``local``); else one
        SpmmgnnError on every rank."""
        found = self.head(call)
        send, seen = self.send, self.seen
        if found is not self.last or error is not None or local is not None:
            send[:] = found.buf
            self.last = found
            if error is not None or local is not None:
                self.last = None  # (the next call writes its own probe)
                send[0] = error is not None
                if local is not None:
                    send[SUMS.start:SUMS.start + local.size] = local
        self._reduce()
        if local is None:
            if seen.tobytes() == found.agreed:
                return None
        elif seen[:SUMS.start].tobytes() == found.agreed_head:
            return seen[SUMS.start:SUMS.start + local.size].copy()
        every = np.empty((self.size, WORDS + 1), dtype=np.int64)
        self.comm.Allgather(np.array([error is not None, *found.words], dtype=np.int64),
                            every)
        message = disagreement(every)
        if message:  # every rank computed it from the same gathered words
            raise collective_error(message)
        agree(self.comm, error)
        raise collective_error("the ranks disagree on a call")  # (not reached: sums exact)

    def _reduce(self) -> None:
        """The SUM all-reduce of ``send`` into ``seen``: persistent where available (made on
        the first call, the same collective on every rank), else posted anew."""
        if self.request is None:
            if not available():
                self.comm.Allreduce(self.send, self.seen, op=MPI.SUM)
                return
            self.owned = Owned(self)
            self.request = self.owned.allreduce(self.comm, self.send, self.seen, MPI.SUM)
        self.request.Start()  # (waited right below, every time: never left active)
        self.request.Wait()


def disagreement(every: np.ndarray) -> str | None:
    """What the ranks disagree on (``every``: each rank's [error flag, words]), or None when
    only some rank's own error explains the difference (the caller agrees on it)."""
    failed, lo, hi = every[:, 0].any(), every[:, 1:].min(axis=0), every[:, 1:].max(axis=0)
    if lo[0] != hi[0]:
        return (f"the ranks call different methods at the same time ({CALLS[lo[0]]} and "
                f"{CALLS[hi[0]]}): every rank must make the same collective call")
    what = CALLS[lo[0]]
    if lo[1] != hi[1] and hi[1] < NO_SIDE:  # (a bad side is that rank's own error)
        return (f"{what}: the ranks pass different side= ({SIDES[lo[1]]} and "
                f"{SIDES[hi[1]]}); every rank must pass the same side")
    if lo[2] != hi[2] and lo[2] > 0:
        return (f"{what}: the ranks pass different root= ({lo[2] - 1} and {hi[2] - 1}); "
                "every rank must pass the same root")
    if failed:
        return None
    if what == "allreduce":
        return ("allreduce: ranks disagree on the shape, the dtype or op= (every rank must "
                "pass the same shape, dtype and op)")
    return f"{what}: ranks disagree on the number of columns or the dtype"
