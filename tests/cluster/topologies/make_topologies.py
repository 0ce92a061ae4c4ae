#!/usr/bin/env python3
"""Writes the hwloc XML topologies of the node shapes superoffload's users run on, from
public facts, for tests/unit/test_node_topologies.cpp (loaded with hwloc_topology_set_xml).

- gh200.xml: one GH200 superchip. Grace: 72 Arm Neoverse V2 cores, one thread each, 480 GB
  LPDDR5X as NUMA node 0. The Hopper GPU's 96 GB HBM3 is NUMA node 1, a node without CPUs;
  nodes 2-8, also without CPUs or memory, are what the driver keeps for MIG partitions. The
  GPU (PCI 10de:2342) is at 0009:01:00.0, under the socket.
- gh200x4.xml: four of them in one node (as in CSCS Alps' quad GH200 nodes): Grace NUMA nodes
  0-3, 72 cores each (288 in all); each GPU's HBM is node 4, 12, 20 or 28 (the MIG nodes
  between them are left out); GPUs at 0009/0019/0029/0039:01:00.0.
- dgx_h100.xml: a two-socket x86 node like a DGX H100: 2 x 56 cores, 2 threads each (Linux
  numbering: socket s core c is CPU 56s+c, its sibling +112), one DDR5 NUMA node per socket,
  8 H100 SXM (10de:2330) in pairs behind four PCIe switches, two switches per socket.

Where a CPU-less node hangs in the tree differs between machines (by the firmware's HMAT):
here the GH200 HBM nodes are attached to their GPU's socket, the harder case, since such a
node's CPU set is then the socket's own. Run `python3 make_topologies.py` to rewrite them.
"""
import os

GIB = 1 << 30


def bitmap(indices):
    """hwloc's bitmap text: 32-bit words, most significant first, comma-separated."""
    indices = list(indices)
    if not indices:
        return "0x0"
    words = [0] * (max(indices) // 32 + 1)
    for i in indices:
        words[i // 32] |= 1 << (i % 32)
    return ",".join(f"0x{w:08x}" for w in reversed(words))


class Writer:
    def __init__(self):
        self.lines = ['<?xml version="1.0" encoding="UTF-8"?>', '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
                      '<topology version="2.0">']
        self.gp = 0

    def open(self, depth, kind, extra="", cpus=None, nodes=None, close=False):
        self.gp += 1
        sets = ""
        if cpus is not None:
            sets = (f' cpuset="{bitmap(cpus)}" complete_cpuset="{bitmap(cpus)}"'
                    f' nodeset="{bitmap(nodes)}" complete_nodeset="{bitmap(nodes)}"')
        self.lines.append("  " * depth + f'<object type="{kind}"{extra}{sets} gp_index="{self.gp}"' + ("/>" if close else ">"))

    def close(self, depth):
        self.lines.append("  " * depth + "</object>")

    def numa(self, depth, os_index, cpus, nodes, memory):
        self.open(depth, "NUMANode", f' os_index="{os_index}"', cpus, nodes,
                  close=False)
        self.lines[-1] = self.lines[-1][:-1] + f' local_memory="{memory}">'
        self.lines.append("  " * (depth + 1) + f'<page_type size="65536" count="{memory // 65536}"/>')
        self.close(depth)

    def cores(self, depth, first_core, count, pus_of, nodes):
        for c in range(first_core, first_core + count):
            pus = pus_of(c)
            self.open(depth, "Core", f' os_index="{c}"', pus, nodes)
            for pu in pus:
                self.open(depth + 1, "PU", f' os_index="{pu}"', [pu], nodes, close=True)
            self.close(depth)

    def gpu(self, depth, busid, device):
        self.open(depth, "PCIDev", f' pci_busid="{busid}" pci_type="0302 [10de:{device}] [10de:16cb] a1" pci_link_speed="0.000000"',
                  close=True)

    def finish(self, path, all_cpus, all_nodes):
        self.lines.insert(3, f'  <object type="Machine" os_index="0" cpuset="{bitmap(all_cpus)}" complete_cpuset="{bitmap(all_cpus)}"'
                             f' allowed_cpuset="{bitmap(all_cpus)}" nodeset="{bitmap(all_nodes)}" complete_nodeset="{bitmap(all_nodes)}"'
                             f' allowed_nodeset="{bitmap(all_nodes)}" gp_index="0">')
        self.lines.append("  </object>")
        for name in ("discovery.pu", "discovery.numa", "discovery.numa_memory", "custom.exported_support"):
            self.lines.append(f'  <support name="{name}"/>')
        self.lines.append("</topology>")
        with open(path, "w") as out:
            out.write("\n".join(self.lines) + "\n")


def gh200_node(path, sockets, hbm_nodes, mig_nodes):
    w = Writer()
    cores = 72
    all_nodes = list(range(sockets)) + [n for s in range(sockets) for n in [hbm_nodes[s]] + mig_nodes[s]]
    for s in range(sockets):
        cpus = range(s * cores, (s + 1) * cores)
        nodes = [s, hbm_nodes[s]] + mig_nodes[s]
        w.open(2, "Package", f' os_index="{s}"', cpus, nodes)
        w.numa(3, s, cpus, nodes, 480 * GIB)           # Grace LPDDR5X
        w.numa(3, hbm_nodes[s], cpus, nodes, 96 * GIB)  # Hopper HBM3, no CPUs of its own
        for n in mig_nodes[s]:
            w.numa(3, n, cpus, nodes, 0)
        w.cores(3, s * cores, cores, lambda c: [c], [s])
        w.gpu(3, f"{9 + 16 * s:04x}:01:00.0", "2342")
        w.close(2)
    w.finish(path, range(sockets * cores), sorted(all_nodes))


def dgx_h100(path):
    w = Writer()
    per_socket, total = 56, 112
    for s in range(2):
        cpus = [c + t * total for c in range(s * per_socket, (s + 1) * per_socket) for t in range(2)]
        w.open(2, "Package", f' os_index="{s}"', cpus, [s])
        w.numa(3, s, cpus, [s], 1024 * GIB)
        w.cores(3, s * per_socket, per_socket, lambda c: [c, c + total], [s])
        for switch in range(2):
            bus = 0x18 + 0x40 * s + 0x20 * switch
            w.open(3, "Bridge", f' bridge_type="0-1" depth="0" bridge_pci="0000:[{bus:02x}-{bus + 3:02x}]"')
            w.open(4, "Bridge", f' bridge_type="1-1" depth="1" bridge_pci="0000:[{bus + 1:02x}-{bus + 3:02x}]"'
                               f' pci_busid="0000:{bus:02x}:00.0" pci_type="0604 [1000:c030] [1000:100b] b0" pci_link_speed="0.000000"')
            for gpu in range(2):
                w.gpu(5, f"0000:{bus + 2 + gpu:02x}:00.0", "2330")
            w.close(4)
            w.close(3)
        w.close(2)
    w.finish(path, range(2 * total), [0, 1])


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    gh200_node(os.path.join(here, "gh200.xml"), 1, [1], [list(range(2, 9))])
    gh200_node(os.path.join(here, "gh200x4.xml"), 4, [4, 12, 20, 28], [[], [], [], []])
    dgx_h100(os.path.join(here, "dgx_h100.xml"))
