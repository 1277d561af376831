"""The local work of the device path (``on_device``): an operator's blocks as torch sparse
CSR on the grid's device, and the two product loops run there with torch: ``DeviceProduct``
(the sparse algorithms' owned/ghost product with its halo exchange staged through host
buffers; for prepost1d the ghost block is M_recv and the rows sent are M_send X) and
``DeviceBroadcast`` (the oblivious stage loop, each stage's block row staged through the
host for its broadcast). Bytes are counted by the same code as the CPU path (``Route.post``,
``count_stage``); the host <-> device copies as the ``device_host`` tier.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ..backend import torch_quantize
from ..backend.convert import mpi_float_type
from ..backend.device import to_device, to_host
from ..backend.staging import Staging, cuda_aware
from ..local import kernels
from ..local.codecs import CastCodec
from ..runtime.errors import agree
from .base import DistSpMM
from .block_broadcast import count_stage


def torch_dtype(codec: CastCodec):
    import torch

    return getattr(torch, codec.wire)


def tensor_csr(m: sp.csr_array, device, dtype):
    """``m`` as a torch sparse CSR tensor on ``device`` (int32 indices when they fit)."""
    import torch

    m = sp.csr_array(m)
    small = m.nnz < 2**31 - 1 and max(m.shape) < 2**31 - 1
    itype = torch.int32 if small else torch.int64
    with warnings.catch_warnings():  # "sparse CSR support is in beta", once per process
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(
            torch.from_numpy(m.indptr.astype(np.int64)).to(device=device, dtype=itype),
            torch.from_numpy(m.indices.astype(np.int64)).to(device=device, dtype=itype),
            torch.from_numpy(m.data).to(device=device, dtype=dtype), size=m.shape,
            check_invariants=False)


class DeviceBlock:
    """One local block (a ``LocalCSR``) as torch CSR on the device, per dtype, and its
    transpose (built on the first transposed product)."""

    def __init__(self, block, device):
        self.block, self.device = block, device
        self._csr: dict = {}

    def csr(self, dtype, transposed: bool = False):
        key = (dtype, transposed)
        if key not in self._csr:
            m = self.block.to_scipy()
            self._csr[key] = tensor_csr(m.T.tocsr() if transposed else m, self.device, dtype)
        return self._csr[key]

    def drop_transpose(self) -> None:
        """Free the transposed CSR copies (``A.T y`` runs as ``A y`` on a symmetric A)."""
        self._csr = {k: v for k, v in self._csr.items() if not k[1]}

    def matmul(self, x, transposed: bool = False, out=None):
        """``self @ x`` (or ``self.T @ x``), added to ``out`` in place when given (an empty
        block adds nothing: no kernel, no pass over ``out``)."""
        import torch

        if out is not None and self.block.nnz == 0:
            return out
        a = self.csr(x.dtype, transposed)
        if out is None:
            return torch.sparse.mm(a, x)
        return out.addmm_(a, x)


class DeviceRoute:
    """One halo plan's exchange from and to the device: rows encoded on the device (cast, or
    quantized and bit-packed: ``torch_quantize``), staged (``staging.Staging``), posted and
    landed."""

    def __init__(self, plan, stats, device):
        self.plan, self.stats, self.device = plan, stats, device
        self.staging = Staging(device, stats, cuda_aware(plan.comm, device))

    def wire(self, codec, rows, dtype, key: int, name: str):
        """(rows to post, param bytes): ``rows`` as they are, cast or (integer codecs)
        quantized and bit-packed on the device, staged to the host (or, CUDA-aware, the
        device tensor itself); NaN or Inf reaching a codec on any rank is one error on every
        rank."""
        import torch

        if codec is not None and not self.plan.passthrough(codec, numpy_dtype(dtype)):
            with self.stats.timing("seconds_codec"):
                if isinstance(codec, CastCodec):
                    cast = rows.to(torch_dtype(codec))
                    bad = int((~torch.isfinite(cast).all(dim=1)).sum()) if cast.numel() else 0
                    # explicit widths: a rank with no rows still posts the codec's row type
                    packed = cast.reshape(-1).view(torch.uint8).reshape(
                        cast.shape[0], codec.row_bytes(cast.shape[1]))
                else:
                    packed, bad = torch_quantize.encode(codec.bits, rows,
                                                         self.plan.codec_key(key))
            agree(self.plan.comm, f"{bad} row(s) with NaN or Inf reached the {codec.name} "
                  "codec" if bad else None)
            rows = packed
        with self.stats.timing("seconds_exchange"):
            return (self.staging.out(rows, name + "_host"),
                    0 if codec is None else codec.param_bytes)

    def arrived(self, codec, recv, dtype, f: int):
        """What landed in ``recv`` (a host buffer, or CUDA-aware a device tensor), on the
        device as ``dtype`` rows (decoded there)."""
        with self.stats.timing("seconds_exchange"):
            rows = self.staging.arrived(recv)
        if rows.dtype == dtype:
            return rows
        with self.stats.timing("seconds_codec"):
            if isinstance(codec, CastCodec):
                return rows.reshape(-1).view(torch_dtype(codec)).reshape(-1, f).to(dtype)
            return torch_quantize.decode(codec.bits, rows, f, dtype)

    def post(self, send, rows: int, forward: bool, param_bytes: int, name: str = ""):
        """Post the plan's Ialltoallv of ``send`` (host rows, or CUDA-aware a device tensor;
        counted by ``Route.post``) once its copy or the work writing it has finished; ``name``
        tells apart receive buffers in flight at once."""
        recv = self.staging.recv(("dev_recv" if forward else "dev_partial_recv") + name, rows,
                                 send)
        with self.stats.timing("seconds_exchange"):
            self.staging.ready(send)
        return self.plan.post(send, recv, forward, param_bytes), recv, time.perf_counter()

    def wait(self, request, posted: float) -> None:
        stats = self.stats
        stats.seconds_exchange_hidden += time.perf_counter() - posted
        with stats.timing("seconds_exchange"):
            request.Wait()

class DeviceProduct:
    """A ``GhostProduct`` run on the device (see the module docstring)."""

    def __init__(self, op: DistSpMM):
        import torch

        # a GhostProduct's blocks, or prepost1d's: M_recv multiplies what arrives, M_send
        # makes the rows the plan sends (its X rows and pre-aggregated partial sums)
        product = getattr(op, "product", None) or op
        self.op, self.plan, self.stats = op, product.plan, op.stats
        self.device = op.grid.device
        self.diag = DeviceBlock(product.diag, self.device)
        self.ghost = DeviceBlock(getattr(product, "ghost", None) or op.M_recv, self.device)
        self.pre = DeviceBlock(op.M_send, self.device) if product is op else None
        self.codec, self.codec_backward = product.codec, product.codec_backward
        # the node-aware (and auto) exchange: its plan's own verbs on host copies, through
        # the numpy path's ``GhostBlock`` (the same choices, reads and bytes)
        self.via_host = self.plan.exchange != "flat"
        self.reader = op.received if product is op else product.block
        self.send_idx = (None if self.via_host else
                         torch.from_numpy(self.plan.send_idx).to(self.device))
        self.route = DeviceRoute(self.plan, self.stats, self.device)
        self.staging = self.route.staging

    def device_blocks(self) -> list[DeviceBlock]:
        return [self.diag, self.ghost] + ([self.pre] if self.pre is not None else [])

    def _early(self, block: DeviceBlock, x, transposed: bool):
        """With asynchronous copies (CUDA, staged): queue ``block``'s product now, so it
        runs while the rows are copied to the host and travel; else None (it runs after the
        exchange is posted, as on the CPU path)."""
        if not self.staging.asynchronous:
            return None
        with self.stats.timing("seconds_multiply"):
            return block.matmul(x, transposed=transposed)

    def matmul(self, x, key: int):
        """out = A x on the device (``key``: the integer codecs' rounding)."""
        stats, plan = self.stats, self.plan
        src = x
        if self.pre is not None:  # prepost1d: the send buffer's rows, S = M_send x
            with stats.timing("seconds_multiply"):
                src = self.pre.matmul(x)
        if self.via_host:
            return self._matmul_via_host(x, src, key)
        with stats.timing("seconds_exchange"):
            send = src.index_select(0, self.send_idx)
        host, params = self.route.wire(self.codec, send, x.dtype, key, "dev_enc_send")
        out = self._early(self.diag, x, False)  # CUDA: runs while the rows are copied out
        request, recv, posted = self.route.post(host, plan.n_ghost, True, params)
        with stats.timing("seconds_multiply"):
            out = self.diag.matmul(x) if out is None else out
        self.route.wait(request, posted)
        ghost_x = self.route.arrived(self.codec, recv, x.dtype, x.shape[1])
        with stats.timing("seconds_multiply"):
            return self.ghost.matmul(ghost_x, out=out)

    def _matmul_via_host(self, x, src, key: int):
        """A x with a plan that is not the flat one (node-aware, auto): all of ``src`` (x,
        or prepost1d's M_send x) is staged to the host, the plan's ``start_bcast`` runs
        there as on the numpy path (codecs included), the ghost rows come back."""
        stats, plan, f = self.stats, self.plan, x.shape[1]
        with stats.timing("seconds_exchange"):
            host = to_host(src, stats)
        started = self.reader.start_bcast(host, key)
        with stats.timing("seconds_multiply"):
            out = self.diag.matmul(x)
        ghost = self.reader.land(started)
        with stats.timing("seconds_exchange"):
            if started[2] is None:  # read in place: the ghost rows out of the node's window
                rows = ghost
                ghost = self.staging.host_buffer("dev_ghost", (plan.n_ghost, f), host.dtype)
                kernels.gather_rows(rows, started[0].ghost_slots, ghost)
            ghost_x = to_device(ghost, self.device, stats)
        with stats.timing("seconds_multiply"):
            return self.ghost.matmul(ghost_x, out=out)

    def _matmul_t_via_host(self, y, partial, key: int):
        """A^T y with a plan that is not the flat one: the ghost rows' partial sums staged
        to the host, the plan's ``start_reduce`` adds what peers send into a host copy of
        the send side's rows, which comes back and is added (prepost1d: through M_send^T)."""
        stats, f = self.stats, y.shape[1]
        with stats.timing("seconds_exchange"):
            host = to_host(partial, stats)
            plan, sums = self.reader.partials(f, host.dtype)  # (a node's window, in place)
            sums[...] = host
        rows = self.pre.block.shape[0] if self.pre is not None else self.op.n_local_in
        acc = self.staging.host_buffer("dev_acc", (rows, f), host.dtype)
        acc[...] = 0
        pending = plan.start_reduce(sums, acc, key)
        with stats.timing("seconds_multiply"):
            out = self.diag.matmul(y, transposed=True)
        pending.finish()
        with stats.timing("seconds_exchange"):
            back = to_device(acc, self.device, stats)
        if self.pre is None:
            with stats.timing("seconds_exchange"):
                return out.add_(back)
        with stats.timing("seconds_multiply"):
            return self.pre.matmul(back, transposed=True, out=out)

    def matmul_t(self, y, key: int):
        """out = A^T y on the device."""
        stats, plan = self.stats, self.plan
        with stats.timing("seconds_multiply"):
            partial = self.ghost.matmul(y, transposed=True)
        if self.via_host:
            return self._matmul_t_via_host(y, partial, key)
        host, params = self.route.wire(self.codec_backward, partial, y.dtype, key,
                                  "dev_enc_partial")
        out = self._early(self.diag, y, True)
        request, recv, posted = self.route.post(host, plan.n_send, False, params)
        with stats.timing("seconds_multiply"):
            out = self.diag.matmul(y, transposed=True) if out is None else out
        self.route.wait(request, posted)
        back = self.route.arrived(self.codec_backward, recv, y.dtype, y.shape[1])
        if self.pre is None:
            with stats.timing("seconds_exchange"):
                return out.index_add_(0, self.send_idx, back)
        import torch

        with stats.timing("seconds_exchange"):  # prepost1d: S' summed per send row, then
            rows = torch.zeros((self.pre.block.shape[0], y.shape[1]), dtype=y.dtype,
                               device=self.device).index_add_(0, self.send_idx, back)
        with stats.timing("seconds_multiply"):   # out += M_send^T S'
            return self.pre.matmul(rows, transposed=True, out=out)


class DeviceBroadcast:
    """A ``BlockBroadcast`` (the oblivious stage loop) run on the device: stage q's owner
    copies its block row of X to the host, MPI broadcasts it, every rank copies it to the
    device and multiplies (CUDA-aware MPI: the broadcast reads and writes device tensors);
    the transpose reduces each stage's partial sums on the host (always staged: not every
    CUDA-aware MPI reduces device buffers)."""

    def __init__(self, op: DistSpMM):
        self.op, self.src, self.stats = op, op.product, op.stats
        self.device = op.grid.device
        self.blocks = {q: DeviceBlock(b, self.device) for q, b in self.src.blocks.items()}
        self.staging = Staging(self.device, self.stats, cuda_aware(self.src.comm, self.device))

    def device_blocks(self) -> list[DeviceBlock]:
        return list(self.blocks.values())

    def matmul(self, x, key: int = 0):
        import torch

        p, stats, device = self.src, self.stats, self.device
        comm, me = p.comm, p.comm.Get_rank()
        mpitype = mpi_float_type(numpy_dtype(x.dtype))
        out = torch.zeros((self.op.n_local, x.shape[1]), dtype=x.dtype, device=device)
        alone = comm.Get_size() == 1  # no peer: nothing to stage or broadcast
        for q in p.stages:
            with stats.timing("seconds_exchange"):
                if q == me:
                    src, nbytes = x, x.numel() * x.element_size()
                    if not alone:
                        send = self.staging.out(x, "stage_out")
                        self.staging.ready(send)
                        comm.Bcast([send, mpitype], root=q)
                else:
                    got = self.staging.recv("stage", int(p.sizes[q]), x)
                    comm.Bcast([got, mpitype], root=q)
                    src = self.staging.arrived(got)
                    nbytes = src.numel() * src.element_size()
            count_stage(stats, p.far, me, q, nbytes, into_root=False)
            with stats.timing("seconds_multiply"):
                self.blocks[q].matmul(src, out=out)
        return out

    def matmul_t(self, y, key: int = 0):
        import torch

        p, stats, device = self.src, self.stats, self.device
        comm, me = p.comm, p.comm.Get_rank()
        mpitype = mpi_float_type(numpy_dtype(y.dtype))
        out = torch.zeros((self.op.n_local_in, y.shape[1]), dtype=y.dtype, device=device)
        for q in p.stages:
            with stats.timing("seconds_multiply"):
                part = self.blocks[q].matmul(y, transposed=True)
            with stats.timing("seconds_exchange"):
                if q == me and comm.Get_size() == 1:
                    out += part
                elif q == me:
                    host = to_host(part, stats)
                    comm.Reduce(MPI.IN_PLACE, [host, mpitype], op=MPI.SUM, root=q)
                    out += to_device(host, device, stats)
                else:
                    comm.Reduce([to_host(part, stats), mpitype], None, op=MPI.SUM, root=q)
            count_stage(stats, p.far, me, q, part.numel() * part.element_size(),
                        into_root=True)
        return out


def numpy_dtype(dtype) -> np.dtype:
    """numpy's float32 / float64 for torch's."""
    return np.dtype(str(dtype).removeprefix("torch."))
