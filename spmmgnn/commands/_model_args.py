"""The arguments of ``spmmgnn model``, checked before any work: the network constants, the
numbers' ranges, the algorithms asked for and the node layouts they run in. (Not a command:
the leading underscore keeps it out of ``cli.build_parser``.)"""

from __future__ import annotations

import math
import sys

from ..runtime.atomic import check_writable
from ..runtime.errors import SpmmgnnError
from . import check_parts_per_node

# spmmgnn.benchmark.costs.NETWORKS, spelled out so that --help does not import the model
NETWORK_NAMES = ("ethernet-25g", "ib-edr", "ib-hdr", "slingshot")

DEFAULT_C = (1, 2, 4, 8)  # --c when not given
# The volume model holds k x k int64 matrices of peer volumes (k = P / c): 512 MiB each here.
MAX_P = 8192


# bounds that keep every predicted time finite (1e3 s per message or byte, 1e-3 non-zeros x
# columns per second are already far beyond any machine)
LIMITS = dict(alpha=(0, 1e3), beta=(0, 1e3), alpha_intra=(0, 1e3), beta_intra=(0, 1e3),
              rate=(1e-3, 1e30), device_rate=(1e-3, 1e30), device_memory=(0, 1e9))


def _positive(name: str, value: float | None, low: float = 0, high: float = math.inf) -> None:
    if value is not None and not (math.isfinite(value) and low < value <= high):
        raise SpmmgnnError(f"--{name} must be a positive finite number in ({low:g}, {high:g}]"
                           f", got {value}")


def _check_args(args) -> None:
    for name, (low, high) in LIMITS.items():
        _positive(name.replace("_", "-"), getattr(args, name), low, high)
    if args.ranks_per_node and min(args.ranks_per_node) < 1:
        raise SpmmgnnError(f"--ranks-per-node must be positive, got {args.ranks_per_node}")
    if (args.alpha_intra or args.beta_intra or args.exchange) and not args.ranks_per_node:
        raise SpmmgnnError("--alpha-intra / --beta-intra / --exchange price two tiers (inside "
                           "a node, between nodes): give --ranks-per-node K")
    if args.device_rate and not args.device_link:
        raise SpmmgnnError("--device-rate is the local rate of --device-link's GPUs: give "
                           "--device-link NAME")
    if args.device_memory and not args.memory:
        raise SpmmgnnError("--device-memory says what fits a GPU in the memory model: give "
                           "--memory")
    if args.device_memory and args.codec:  # before the tables are computed
        raise SpmmgnnError("--device-memory models the device path without a codec; drop "
                           "--codec")
    args.exchange = args.exchange or ["flat", "node"]
    for grid in args.grids or []:
        ranks = math.prod(int(d) for d in grid.split("x"))
        if ranks not in args.P:
            raise SpmmgnnError(f"--grid {grid} has {ranks} ranks but no --P is {ranks} (--P "
                               f"{' '.join(map(str, args.P))}): a grid is modelled at the P "
                               "it fills")
    if (min(args.P) < 1 or min(args.c) < 1 or (args.features or 1) < 1 or args.layers < 1
            or args.hidden < 1 or (args.classes is not None and args.classes < 1)):
        raise SpmmgnnError("--P, --c, --features, --layers, --hidden and --classes must be "
                           "positive")
    if args.staleness < 0:
        raise SpmmgnnError(f"--staleness must be >= 0, got {args.staleness}")
    if max(args.P) > MAX_P:
        raise SpmmgnnError(f"--P {max(args.P)}: the model holds P x P volume matrices and "
                           f"stops at P = {MAX_P}")
    if not any(P % c == 0 and c <= P for P in args.P for c in args.c):
        raise SpmmgnnError(f"no (P, c) to model: no c in {args.c} divides a P in {args.P}")
    for path, what in ((args.json, "--json"), (args.plot, "--plot")):
        if path:
            check_writable(path, what)


def _alpha_beta(args) -> tuple[float, float, str]:
    if args.alpha is not None and args.beta is not None:
        return args.alpha, args.beta, "given"
    if args.preset:
        from ..benchmark.costs import NETWORKS

        net = NETWORKS[args.preset]
        return net.alpha, net.beta, f"preset {args.preset}: {net.source}"
    if args.network:
        from ..benchmark.records import read_records

        nets = [r for r in read_records(args.network) if r.get("kind") == "network"]
        if not nets:
            raise SpmmgnnError(f"{args.network} has no network record (run spmmgnn bench "
                               "--network)")
        return nets[-1]["alpha"], nets[-1]["beta"], f"measured ({args.network})"
    raise SpmmgnnError("give --alpha and --beta, --network RESULTS.jsonl or --preset NAME")


def _intra(args) -> tuple[float, float, int, str]:
    """(alpha_intra, beta_intra, network links per node, where they come from)."""
    from ..exchange.tiers import NETWORKS, SHARED_MEMORY

    net = NETWORKS.get(args.preset) if args.preset else None
    alpha = args.alpha_intra or (net.alpha_intra if net else SHARED_MEMORY[0])
    beta = args.beta_intra or (net.beta_intra if net else SHARED_MEMORY[1])
    given = args.alpha_intra is not None and args.beta_intra is not None
    source = "given" if given else (net.intra_source if net else SHARED_MEMORY[2])
    return alpha, beta, net.nics if net else 1, source


def _algorithms(args) -> list[str]:
    from ..algorithms import ALGORITHMS
    from ..benchmark.volumes import VOLUMES

    algorithms = args.algorithms or [a for a in ALGORITHMS if a in VOLUMES]
    bad = [a for a in algorithms if a not in VOLUMES]
    if bad:
        raise SpmmgnnError(f"no volume model for {bad}; known: {sorted(VOLUMES)}")
    return algorithms


def _check_parts_per_node(args, algorithms: list[str]) -> None:
    """With a ``twolevel:`` partitioner, the block rows of one node (``--parts-per-node``,
    else ``--ranks-per-node`` / c) must divide every P / c modelled. Values of the default
    c list that do not fit are left out (a note says which); any other misfit is one error
    naming the flags as given. Without one, ``--parts-per-node`` is an error."""
    from ..partitioners.twolevel import is_two_level

    if not is_two_level(args.partitioner):
        check_parts_per_node(args.partitioner, args.parts_per_node, {}, "--partitioner")
        return
    if args.parts_per_node is None and (args.memory or not args.ranks_per_node):
        raise SpmmgnnError(f"--partitioner {args.partitioner} partitions the nodes first: give "
                           "--parts-per-node K (the block rows of one node)"
                           + ("" if args.memory else " or --ranks-per-node K"))
    bad = _two_level_misfits(args, algorithms)
    dropped = sorted({c for _, c, _ in bad if c > 1}) if not args.c_given else []
    if dropped:
        args.c = [c for c in args.c if c not in dropped]
        print(f"spmmgnn model: --partitioner {args.partitioner}: leaving out c = "
              f"{', '.join(map(str, dropped))} of the default --c list (P / c must be a "
              "multiple of the block rows of one node)", file=sys.stderr, flush=True)
        bad = _two_level_misfits(args, algorithms)
    if bad:
        points = "; ".join(f"--P {P}" + (f" --c {c}" if c > 1 else "") + f": {P // c} block "
                           f"rows, {how}" for P, c, how in bad[:4])
        raise SpmmgnnError(f"--partitioner {args.partitioner} keeps the block rows of one "
                           f"node together, so their count must divide P / c: not at {points}")


def _two_level_misfits(args, algorithms: list[str]) -> list[tuple[int, int, str]]:
    """(P, c, the block rows per node as the flags give them) of every modelled point whose
    P / c is not a multiple of its block rows per node."""
    from ..benchmark.kept_volumes import KEPT
    from ..benchmark.volumes import grid_points

    Ks = [None] if args.parts_per_node is not None or args.memory else args.ranks_per_node
    points = {(P, c) for P in args.P for algo in algorithms
              for c, _ in grid_points(algo, P, args.c, args.grids)}
    points |= {(P, 1) for P in args.P if set(algorithms) & set(KEPT)}
    bad = []
    for P, c in sorted(points):
        for K in Ks:
            per_node = args.parts_per_node if K is None else max(1, K // c)
            if (P // c) % per_node:
                how = (f"--parts-per-node {per_node}" if K is None else
                       f"--ranks-per-node {K} / c {c} = {per_node} per node")
                bad.append((P, c, how))
                break
    return bad
