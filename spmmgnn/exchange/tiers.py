"""The two-tier alpha-beta model: what a message costs inside a node and between nodes.

A ``Network`` gives per-message latency alpha (s) and seconds per byte beta for each tier:
*inter* (between nodes, through the node's network interfaces) and *intra* (between ranks of
one node, through shared memory). The inter-node tier follows the max-rate model (Gropp,
Olson and Samfass, EuroMPI 2016): a rank injects at most one link's rate, and the ranks of a
node share its ``nics`` links, so a rank's inter-node transfer takes

    alpha_inter * messages + beta_inter * max(its bytes, its node's bytes / nics).

Inside a node each pair of ranks copies at ``1 / beta_intra`` (the node's memory bandwidth is
not modelled as shared). The presets are nominal figures, not measurements: they say where
each comes from, and ``spmmgnn bench --network`` measures a machine (one tier at a time).
The benchmark's cost model (``benchmark.costs``) and ``exchange="auto"`` (``node_exchange``)
price with these.

A rank on a GPU (``ProcessGrid(device=...)``) adds a third leg: its exchange rows are copied
device -> host before MPI and host -> device after (the ``device_host`` bytes of
``comm_stats()``). ``DEVICE_LINKS`` prices that leg, one alpha-beta pair per link, and
``device_host_seconds`` applies it; ``spmmgnn model --device-link NAME`` adds it to the
projections of the algorithms that run on a device grid (``benchmark.device_volumes``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# MPI through shared memory on a current x86 node: ~0.4 us for a small message, ~10 GB/s for
# a large one between two ranks with a single-copy transfer (Linux CMA / XPMEM); the order of
# magnitude osu_latency / osu_bw report inside one node. The same for every CPU preset.
SHARED_MEMORY = (0.4e-6, 1 / 10e9, "shared memory inside a node: ~0.4 us, ~10 GB/s per rank "
                                    "pair (single-copy MPI transfers; nominal)")


@dataclass(frozen=True)
class Network:
    """A named interconnect: alpha/beta between nodes (``source`` says where they come
    from), alpha/beta inside a node (``intra_source``), and the network links per node."""

    alpha: float
    beta: float
    source: str
    alpha_intra: float = SHARED_MEMORY[0]
    beta_intra: float = SHARED_MEMORY[1]
    intra_source: str = SHARED_MEMORY[2]
    nics: int = 1


NETWORKS = {
    "ib-hdr": Network(1.5e-6, 1 / 25e9, "InfiniBand HDR, 200 Gb/s = 25 GB/s per direction "
                                        "per port; ~1.5 us MPI latency"),
    "ib-edr": Network(1.5e-6, 1 / 12.5e9, "InfiniBand EDR, 100 Gb/s = 12.5 GB/s; ~1.5 us"),
    "slingshot": Network(2.0e-6, 1 / 25e9, "HPE Slingshot 11, 200 Gb/s NIC = 25 GB/s; ~2 us"),
    "ethernet-25g": Network(10e-6, 1 / 3.125e9, "25 Gb Ethernet with TCP, 3.125 GB/s; "
                                                "~10 us through the kernel's stack"),
}
DEFAULT_NETWORK = "ib-hdr"


def network(name: str | None) -> Network:
    """The preset ``name`` (None: ``DEFAULT_NETWORK``); ValueError names the choices."""
    key = DEFAULT_NETWORK if name is None else str(name)
    if key not in NETWORKS:
        raise ValueError(f"unknown network {name!r}; choose one of {sorted(NETWORKS)}")
    return NETWORKS[key]


def intra_seconds(net: Network, messages, nbytes):
    """Seconds of an intra-node step per rank: messages and the larger of bytes sent and
    received (numpy arrays or numbers)."""
    return net.alpha_intra * np.asarray(messages) + net.beta_intra * np.asarray(nbytes)


def inter_seconds(net: Network, messages, nbytes, node_bytes, ranks_per_node: int):
    """Seconds of an inter-node step per rank (max-rate): ``node_bytes`` is what the rank's
    node injects in that step (its ranks' bytes summed), shared by ``min(nics, ranks)``
    links."""
    links = max(1, min(net.nics, int(ranks_per_node)))
    return net.alpha * np.asarray(messages) + net.beta * np.maximum(
        np.asarray(nbytes), np.asarray(node_bytes) / links)


@dataclass(frozen=True)
class DeviceLink:
    """The host <-> device link of one GPU: per-copy latency alpha (s), seconds per byte beta
    (one direction), and where the figures come from."""

    alpha: float
    beta: float
    source: str


DEVICE_LINKS = {
    "pcie5": DeviceLink(10e-6, 1 / 50e9, "PCIe 5.0 x16: 32 GT/s a lane, 16 lanes, 128b/130b "
                                         "= 63 GB/s a direction (PCI-SIG PCIe 5.0 base "
                                         "specification); ~50 GB/s taken for pinned copies, "
                                         "~10 us for a copy's launch and synchronization "
                                         "(nominal)"),
    "pcie4": DeviceLink(10e-6, 1 / 25e9, "PCIe 4.0 x16: 16 GT/s a lane = 31.5 GB/s a "
                                         "direction (PCI-SIG); ~25 GB/s taken for pinned "
                                         "copies, ~10 us a copy (nominal)"),
    "nvlink-c2c": DeviceLink(5e-6, 1 / 450e9, "NVLink-C2C of the NVIDIA GH200 Grace Hopper "
                                              "superchip: 900 GB/s both directions = 450 GB/s "
                                              "a direction (NVIDIA GH200 datasheet); ~5 us a "
                                              "copy (nominal)"),
}


# The local product on a GPU, in non-zeros x columns per second: torch.sparse.mm (cuSPARSE
# CSR x dense) of a 1M-vertex, 16M-non-zero CSBM graph at f = 128 took 2.6 ms on one NVIDIA
# H200 (measured): 16e6 x 128 / 2.6e-3 = 7.9e11. ``spmmgnn model
# --device-rate`` replaces it.
DEVICE_RATE = (7.9e11, "torch.sparse.mm on one NVIDIA H200, 16M non-zeros x 128 columns in "
                       "2.6 ms")


def device_link(name: str) -> DeviceLink:
    """The host <-> device preset ``name``; ValueError names the choices."""
    if name not in DEVICE_LINKS:
        raise ValueError(f"unknown device link {name!r}; choose one of {sorted(DEVICE_LINKS)}")
    return DEVICE_LINKS[name]


def device_host_seconds(link: DeviceLink, copies, nbytes):
    """Seconds a rank spends on the host <-> device leg: ``copies`` copies moving ``nbytes``
    in all (one direction after the other: the two directions of one call do not overlap)."""
    return link.alpha * np.asarray(copies) + link.beta * np.asarray(nbytes)
