"""What one rank's training step on a torch backend reaches in device memory: the model behind
``training.setup.device_memory_problem``, meant to predict ``torch.cuda.max_memory_allocated``
of ``spmmgnn train --device cuda`` within 10 %.

The peak is what stays for the run (``persistent``) plus the highest point of one step
(``step_peak``), each counted from the code that allocates it:

* ``blocks``: the operator's non-empty blocks as torch CSR on the device
  (``backend.convert.csr_bytes``: int32 indices when they fit), one copy per block in the
  training dtype (the float64 copies of the symmetry probe are freed:
  ``DistSpMM.keep_values``), the transposes only when A is not symmetric, and the halo
  plan's pooled send and receive rows (one pair per width the step's products use);
* ``data``: X in the training dtype, labels and vertex ids (int64), the three split masks
  and the loss mask (bool), each split's row indices and the loss rows (int64), the cached
  ``Â X`` (first-layer cache);
* ``model``: the weights, the flat gradient buffer (the ``.grad`` views and two slots), Adam's
  two moments;
* ``step``: the activations autograd keeps and the transients of the forward and backward,
  replayed operation by operation in ``step_peak`` (the layer order of ``nn.layers``, what
  each torch operation allocates and frees, and when Python drops a reference); each SpMM
  allocates its output (``addmm_`` into it: no temporary on the CPU), plus cuSPARSE's
  workspace.

``tests/training/test_device_memory.py`` checks ``step_peak`` against ``backend.peak.PeakTracker``
(every storage torch allocates) on ``device="cpu"`` running the same code; the workspace
and CUDA's fixed buffers (cuBLAS's workspace) are checked on a GPU (``pytest -m gpu``).
Not counted: the CUDA context (outside ``max_memory_allocated``). Modelled as a GCN: a
GraphSAGE layer's second weight and LayerNorm's statistics are approximated.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from ..backend.convert import csr_bytes
from ..backend.fused import CHUNK as FALLBACK_CHUNK
from ..nn.layers import aggregate_first
from ..nn.memory import ModelShape

DROPOUT_IMPLS = ("triton", "torch", "none")
# bytes per entry the fused pass's torch implementation holds at once for a block of
# ``backend.fused.CHUNK`` entries: relu(z + b) (4) and three int64 hash temporaries
FALLBACK_BYTES_PER_ENTRY = 28
CUDA_FIXED = 64 * 2**20  # cuBLAS / cuBLASLt workspaces torch allocates on first use
SPMM_WORKSPACE_PER_ROW = 0  # cuSPARSE SpMM (CSR_ALG2) workspace: calibrated on a GPU


@dataclass
class SpmmCall:
    """What one SpMM call allocates beyond its output: a zeroed output it drops (none: the
    torch backend multiplies into its output with ``addmm_``), the rows exchanged with other
    ranks beyond the pooled buffers, and cuSPARSE's workspace per output row."""

    zeroed_temp: bool = False
    exchange_rows: int = 0
    workspace_per_row: int = SPMM_WORKSPACE_PER_ROW


@dataclass
class StepShape:
    """The step ``step_peak`` replays: the model, this rank's rows, and the options that
    change what autograd keeps."""

    shape: ModelShape
    rows: int
    loss_rows: int
    cached: bool = True            # the first layer reads the cached Â X
    dropout: float = 0.5
    input_dropout: float = 0.0
    layernorm: bool = False
    impl: str = "torch"            # how bias + ReLU + dropout runs (DROPOUT_IMPLS)
    spmm: SpmmCall = field(default_factory=SpmmCall)


class _Trace:
    """Live bytes by name, and the highest total seen (with where it happened)."""

    def __init__(self):
        self.live: dict[str, int] = {}
        self.peak, self.at = 0, ""

    def alloc(self, name: str, nbytes: int, where: str | None = None) -> None:
        self.live[name] = self.live.get(name, 0) + int(nbytes)
        total = sum(self.live.values())
        if total > self.peak:
            self.peak, self.at = total, where or name

    def free(self, *names: str) -> None:
        for name in names:
            self.live.pop(name, None)

    def rename(self, old: str, new: str) -> None:
        self.live[new] = self.live.pop(old)


def _mode(shape: ModelShape, i: int, cached: bool, input_grad: bool) -> str:
    """How layer i runs: "cached" (Â X kept), "agg" ((A h) W) or "wfirst" (A (h W))."""
    a, b = shape.widths[i], shape.widths[i + 1]
    if i == 0 and cached:
        return "cached"
    return "agg" if aggregate_first(a, b, input_grad, True) else "wfirst"


def step_peak(step: StepShape) -> tuple[int, str]:
    """The most bytes one training step holds on the device beyond ``persistent``, and
    where (a phase and operation), from the replayed step."""
    if step.impl not in DROPOUT_IMPLS:
        raise ValueError(f"impl must be one of {DROPOUT_IMPLS}, got {step.impl!r}")
    shape, n = step.shape, step.rows
    s, d, L = shape.itemsize, shape.widths, shape.layers
    t = _Trace()
    drop = step.dropout > 0 and step.impl != "none"

    def spmm(width: int, out: str, where: str) -> None:
        call = step.spmm
        temp = n * width * s if call.zeroed_temp else 0
        extra = call.exchange_rows * width * s + call.workspace_per_row * n
        t.alloc(out, n * width * s)
        t.alloc("spmm temp", temp + extra, where)
        t.free("spmm temp")

    # ------------------------------------------------------------------ forward
    h = None  # the layer's input: None is X (kept for the run)
    cached = step.cached and step.input_dropout <= 0
    if step.input_dropout > 0:  # dense_torch.vertex_dropout: X times the float mask
        t.alloc("x keep", n * d[0])
        t.alloc("x hash", FALLBACK_BYTES_PER_ENTRY * min(n * d[0], FALLBACK_CHUNK),
                "forward: input dropout mask")
        t.free("x hash")
        t.alloc("x keep as float", n * d[0] * s)
        t.alloc("x mask", n * d[0] * s, "forward: input dropout mask")
        t.free("x keep", "x keep as float")
        t.alloc("h-1", n * d[0] * s, "forward: input dropout")
        t.free("x mask")
        h = "h-1"
    kept_by_mm: set[str] = set()
    for i in range(L):
        a, b = d[i], d[i + 1]
        mode = _mode(shape, i, cached, i > 0)
        hidden = i < L - 1
        fused = hidden and drop and not step.layernorm
        where = f"forward: layer {i + 1}"
        if mode == "agg":
            spmm(a, f"ah{i}", f"{where} SpMM (A h)")
            t.alloc(f"z{i}", n * b * s, f"{where} GEMM")
        elif mode == "cached":
            t.alloc(f"z{i}", n * b * s, f"{where} GEMM")
        else:
            t.alloc(f"hw{i}", n * b * s, f"{where} GEMM")
            spmm(b, f"z{i}", f"{where} SpMM (A (h W))")
            t.free(f"hw{i}")
            if h is not None:
                kept_by_mm.add(h)  # the GEMM keeps its input
            if not fused:  # z + b
                t.alloc(f"zb{i}", n * b * s, f"{where} bias")
                t.free(f"z{i}")
                t.rename(f"zb{i}", f"z{i}")
        if hidden:
            h_next = _activation_forward(t, step, i, n * b, s, where)
        # GNN.forward's ``args`` holds the layer's input until the next layer's
        if h == "h-1" and h not in kept_by_mm:
            t.free(h)
        if not hidden:
            break
        h = h_next
    # the loss on the logits z{L-1}: selected rows, their log-softmax (kept), the labels
    m, c = step.loss_rows, d[-1]
    t.alloc("loss rows", m * c * s)
    t.alloc("loss labels", 8 * m)
    t.alloc("log softmax", m * c * s, "forward: loss")
    t.free("loss rows")
    # ------------------------------------------------------------------ backward
    t.alloc("g nll", m * c * s, "backward: loss")
    t.alloc("g lsm", m * c * s, "backward: loss")
    t.free("g nll", "log softmax", "loss labels")
    t.alloc("g zeros", n * c * s)
    t.alloc("g", n * c * s, "backward: loss rows")
    t.free("g zeros", "g lsm")
    for i in reversed(range(L)):
        a, b = d[i], d[i + 1]
        mode = _mode(shape, i, cached, i > 0)
        where = f"backward: layer {i + 1}"
        if i < L - 1:
            _activation_backward(t, step, i, n * b, s, where)
        if mode == "agg" and i > 0:
            t.alloc("g ah", n * a * s, f"{where} GEMM")
            t.free("g", f"ah{i}")
            spmm(a, "g h", f"{where} SpMM")
            t.free("g ah")
            t.rename("g h", "g")
        elif mode in ("agg", "cached"):
            t.free("g", f"ah{i}")
        else:
            spmm(b, "g hw", f"{where} SpMM")
            t.free("g")
            if i > 0:
                t.alloc("g h", n * a * s, f"{where} GEMM")
                t.rename("g h", "g")
            t.free("g hw")
            if i > 0:
                kept_by_mm.discard(f"h{i - 1}")
    return t.peak, t.at


def _activation_forward(t: _Trace, step: StepShape, i: int, entries: int, s: int,
                        where: str) -> str:
    """ReLU (+ bias) (+ dropout) of z{i}: allocates h{i}, frees z{i} (LayerNorm keeps it)."""
    out = f"h{i}"
    z = f"z{i}"
    if step.layernorm:
        t.alloc(f"ln{i}", entries * s, f"{where} LayerNorm")
        t.rename(z, f"ln in{i}")  # kept by LayerNorm's backward
        z = f"ln{i}"
    drop = step.dropout > 0 and step.impl != "none"
    if not drop:
        t.alloc(out, entries * s, f"{where} ReLU")
        t.free(z)
        return out
    if step.impl == "triton":
        t.alloc(out, entries * s, f"{where} fused bias + ReLU + dropout")
    else:
        t.alloc(out, entries * s)
        t.alloc("fallback", FALLBACK_BYTES_PER_ENTRY * min(entries, FALLBACK_CHUNK),
                f"{where} fused pass (torch implementation)")
        t.free("fallback")
    t.free(z)
    return out


def _activation_backward(t: _Trace, step: StepShape, i: int, entries: int, s: int,
                         where: str) -> None:
    """The backward of ``_activation_forward``: "g" (the output's gradient) becomes the
    gradient of z{i}; what the pass kept is freed."""
    if step.impl in ("triton", "none") or step.dropout <= 0:  # one gradient, no mask
        t.alloc("g z", entries * s, f"{where} ReLU/dropout backward")
    else:  # the torch implementation: a bool mask, then the gradient
        t.alloc("g mask", entries)
        t.alloc("g z", entries * s, f"{where} fused pass backward (torch)")
        t.free("g mask")
    t.free("g", f"h{i}")
    t.rename("g z", "g")
    if step.layernorm:
        t.alloc("g ln", entries * s, f"{where} LayerNorm backward")
        t.free("g", f"ln in{i}")
        t.rename("g ln", "g")


# ------------------------------------------------------------------ what stays
def data_bytes(shape: ModelShape, rows: int, split_rows: int, loss_rows: int,
               cached: bool) -> int:
    """X, labels, vertex ids, the split and loss masks, the split and loss row indices,
    and the cached Â X (``Trainer._place_data``)."""
    x = rows * shape.features * shape.itemsize
    return (x + rows * (8 + 8 + 3 + 1) + 8 * (split_rows + loss_rows)
            + (x if cached else 0))


def model_state_bytes(shape: ModelShape) -> int:
    """Weights, the flat gradient buffer (two slots more) and Adam's two moments."""
    p = shape.parameters()
    return shape.itemsize * (p + (p + 2) + 2 * p)


# ------------------------------------------------------------------ one rank's operator
def operator_bytes(op, itemsize: int, symmetric: bool | None = None) -> int:
    """Bytes the operator's blocks take on the device (``backend.convert.csr_bytes``, one copy
    per non-empty block: an empty one is never built), their transposes when A is not
    ``symmetric`` (None: ``op.symmetric``)."""
    total = 0
    for block in op.backend_blocks():
        if block.nnz == 0:
            continue
        rows, cols = block.shape
        total += csr_bytes((rows, cols), block.nnz, itemsize)
        if not (op.symmetric if symmetric is None else symmetric):
            total += csr_bytes((cols, rows), block.nnz, itemsize)
    return total


def exchange_rows(op) -> int:
    """Rows of the halo plan's pooled send and receive buffers (0: no halo plan, one rank)."""
    plan = getattr(getattr(op, "product", None), "plan", None)
    if plan is None or op.grid.comm.Get_size() == 1:
        return 0
    return int(getattr(plan, "n_ghost", 0)) + int(getattr(plan, "n_send", 0))


def spmm_widths(step: StepShape) -> set[int]:
    """The widths of the rows the step's SpMMs move (one pooled buffer pair each)."""
    shape, widths = step.shape, set()
    cached = step.cached and step.input_dropout <= 0
    for i in range(shape.layers):
        mode = _mode(shape, i, cached, i > 0)
        if mode != "cached":
            widths.add(shape.widths[i] if mode == "agg" else shape.widths[i + 1])
    return widths


@dataclass
class DeviceNeed:
    """The predicted peak of one rank's training on its device, by part (bytes)."""

    blocks: int
    data: int
    model: int
    step: int
    fixed: int
    where: str

    @property
    def total(self) -> int:
        return self.blocks + self.data + self.model + self.step + self.fixed


def device_need(op, step: StepShape, split_rows: int, device_type: str = "cuda",
                symmetric: bool | None = None) -> DeviceNeed:
    """The prediction for this rank (``split_rows``: its rows in the three splits, counted
    with repeats; ``symmetric`` as in ``operator_bytes``)."""
    peak, where = step_peak(step)
    cached = step.cached and step.input_dropout <= 0
    s = step.shape.itemsize
    pooled = exchange_rows(op) * sum(spmm_widths(step)) * s
    return DeviceNeed(
        blocks=operator_bytes(op, s, symmetric) + pooled,
        data=data_bytes(step.shape, step.rows, split_rows, step.loss_rows, cached),
        model=model_state_bytes(step.shape), step=peak,
        fixed=CUDA_FIXED if device_type == "cuda" else 0, where=where)


def scaled_need(need: DeviceNeed, step: StepShape, total_rows: int, total_nnz: int,
                ranks: int) -> int:
    """About what each of ``ranks`` ranks would need for the same graph (``total_rows``
    vertices, ``total_nnz`` non-zeros) in a 1D row layout: blocks, data and activations
    shrink with the rows; each rank's pooled exchange rows are at most its non-zeros or the
    other ranks' rows (an upper bound: a partition that cuts few edges moves far fewer)."""
    share = total_rows / ranks / max(1, step.rows)
    rows = max(1, math.ceil(total_rows / ranks))
    moved = 0 if ranks == 1 else 2 * min(total_rows - rows, math.ceil(total_nnz / ranks))
    scaled = dataclasses.replace(step, rows=rows, loss_rows=math.ceil(step.loss_rows * share))
    peak, _ = step_peak(scaled)
    pooled = moved * sum(spmm_widths(step)) * step.shape.itemsize
    return int((need.blocks + need.data) * share + pooled + need.model + peak + need.fixed)


def fits_text(need: DeviceNeed, step: StepShape, total_rows: int, total_nnz: int,
              have: int, ranks: int, show) -> str:
    """What would fit, for the refusal: "use P >= k devices of <have>" (the fewest ranks
    whose ``scaled_need`` fits, up to 4096), "or <ranks> device(s) of >= <need>"
    (``show``: bytes as text)."""
    def fits(p: int) -> bool:
        return scaled_need(need, step, total_rows, total_nnz, p) <= have

    options = []
    p = ranks * 2
    while p <= 4096 and not fits(p):
        p *= 2
    if p <= 4096:
        lo = p // 2 + 1
        while lo < p and not fits(lo):
            lo += 1
        options.append(f"P >= {lo} devices of {show(have)}")
    options.append(f"{ranks} device(s) of >= {show(need.total)}")
    return "use " + ", or ".join(options)
