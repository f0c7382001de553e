"""Shared pieces of the streaming-partitioner tests: small community graphs and pure-Python oracles."""

from __future__ import annotations

import heapq
from collections import defaultdict

import numpy as np
import torch

from graphscale.data.graph import Graph

MASK64 = (1 << 64) - 1


def community_records(n: int = 240, communities: int = 6, degree: float = 8.0, p_in: float = 0.85,
                      isolated: int = 4, hubs: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """Symmetric, de-duplicated, self-loop-free records of a planted-community graph, in shuffled order.

    The last ``isolated`` ids have no edges; the first ``hubs`` ids get many extra edges.

    Returns:
        ``(src, dst, num_vertices)`` with int64 arrays.
    """
    rng = np.random.default_rng(seed)
    m = n - isolated
    comm = rng.integers(0, communities, m)
    k = int(degree * m / 2)
    u = rng.integers(0, m, k)
    same = rng.random(k) < p_in
    members = [np.flatnonzero(comm == c) for c in range(communities)]
    v = np.where(same, [rng.choice(members[c]) for c in comm[u]], rng.integers(0, m, k))
    extra_u = rng.integers(0, hubs, 4 * m // 10)
    extra_v = rng.integers(0, m, extra_u.size)
    u, v = np.concatenate([u, extra_u]), np.concatenate([v, extra_v])
    keep = u != v
    u, v = u[keep], v[keep]
    keys = np.unique(np.concatenate([u * n + v, v * n + u]))
    keys = keys[rng.permutation(keys.size)]
    return keys // n, keys % n, n


def graph_of(src: np.ndarray, dst: np.ndarray, n: int, *, features: int = 3, seed: int = 0) -> Graph:
    """A Graph over the records with random features, labels and split (for store tests)."""
    gen = torch.Generator().manual_seed(seed)
    g = Graph.from_edges(torch.from_numpy(src), torch.from_numpy(dst), n)
    g.x = torch.randn(n, features, generator=gen)
    g.y = torch.randint(0, 4, (n,), generator=gen)
    perm = torch.randperm(n, generator=gen)
    g.train_mask = torch.zeros(n, dtype=torch.bool)
    g.train_mask[perm[: n // 2]] = True
    g.val_mask = torch.zeros(n, dtype=torch.bool)
    g.val_mask[perm[n // 2: 3 * n // 4]] = True
    g.test_mask = ~(g.train_mask | g.val_mask)
    g.meta["num_classes"] = 4
    return g


# ----------------------------------------------------------- SPRING oracle
def reference_spring(src, dst, n: int, p: int, *, beta: float = 1.05, volume_cap: float = 0.1,
                     merge: str = "paper", lpt: str = "vertices",
                     cluster_passes: int = 1) -> tuple[list[int], dict[int, list[int]], list[int]]:
    """Algorithm 1 in plain Python with explicit member lists (no union-find, representatives by scanning).

    ``lpt``: the load of a merged cluster, which the merge cap bounds (``beta`` times a partition's share) and LPT
    balances: ``vertices`` = ``|C|``; ``edges`` = ``vol(C)``, the sum of pass 1's ``vol`` over the initial clusters
    merged into it; ``mix`` = ``|C| / n + vol(C) / M``.

    Returns:
        ``(part per vertex, merged clusters {id: members}, initial cluster per vertex)``.
    """
    records = list(zip(src.tolist(), dst.tolist()))
    d = [0] * n
    for _, v in records:
        d[v] += 1
    tau = volume_cap * len(records) / p
    c, nb, vol, k = [0] * n, [-1] * n, defaultdict(int), 1

    def dd(x):
        return d[x] if x >= 0 else -1

    for u, v in records * cluster_passes:  # restreaming: the same records again, clusters kept
        for x in (u, v):
            if c[x] == 0:
                c[x] = k
                k += 1
                vol[c[x]] += d[x]
        if c[u] != c[v] and vol[c[u]] <= tau and vol[c[v]] <= tau:
            if vol[c[u]] <= vol[c[v]]:
                vol[c[v]] += d[u]
                vol[c[u]] -= d[u]
                c[u] = c[v]
            else:
                vol[c[u]] += d[v]
                vol[c[v]] -= d[v]
                c[v] = c[u]
        if dd(nb[u]) < d[v]:
            nb[u] = v
        if dd(nb[v]) < d[u]:
            nb[v] = u
    for x in range(n):
        if c[x] == 0:
            c[x] = k
            k += 1
    initial = list(c)
    members: dict[int, list[int]] = defaultdict(list)
    for x in range(n):
        members[c[x]].append(x)
    cluster_of = list(c)
    m = max(len(records), 1)

    def volume(i):
        return sum(vol[ic] for ic in {initial[x] for x in members[i]})  # isolated clusters: vol 0

    def load(size, volume):
        if lpt == "vertices":
            return size
        if lpt == "edges":
            return volume
        assert lpt == "mix"
        return size / n + volume / m

    cap = beta * {"vertices": n, "edges": len(records), "mix": 2.0}[lpt] / p

    def target(i):
        rep = min(members[i], key=lambda x: (-dd(nb[x]), x))
        return -1 if nb[rep] < 0 else cluster_of[nb[rep]]

    def try_merge(i):
        j = target(i)
        if j < 0 or j == i or load(len(members[i]) + len(members[j]), volume(i) + volume(j)) > cap:
            return None
        for x in members[i]:
            cluster_of[x] = j
        members[j].extend(members.pop(i))
        return j

    if merge == "paper":
        heap = [(len(ms), i) for i, ms in members.items()]
        heapq.heapify(heap)
        while heap:
            size, i = heapq.heappop(heap)
            if i not in members or len(members[i]) != size:
                continue
            j = try_merge(i)
            if j is not None:
                heapq.heappush(heap, (len(members[j]), j))
    elif merge == "code":
        order = sorted(members, key=lambda i: (len(members[i]), i))
        for i in order[:-1]:
            if i in members:
                try_merge(i)
    keys = {i: load(len(members[i]), volume(i)) for i in members}
    loads = [(0, s) for s in range(p)]
    part = [0] * n
    for i in sorted(members, key=lambda i: (-keys[i], i)):
        load, s = heapq.heappop(loads)
        for x in members[i]:
            part[x] = s
        heapq.heappush(loads, (load + keys[i], s))
    return part, dict(members), initial


# ------------------------------------------------------ vertex-cut oracles
def reference_greedy(src, dst, n: int, p: int, *, hdrf: bool, lam: float = 1.0, eps: float = 1.0):
    """PowerGraph greedy / HDRF by the full O(p) argmax (first maximum), as SDT-GNN's code scores them.

    Returns:
        ``(part per record, home per vertex before the isolated-vertex fill)`` (``-1`` = no record).
    """
    replicas = [set() for _ in range(n)]
    load = [0] * p
    partial = [0] * n
    home = [-1] * n
    src_home = [-1] * n
    out = []
    for u, v in zip(src.tolist(), dst.tolist()):
        theta_u = 0.5
        if hdrf:
            partial[u] += 1
            partial[v] += 1
            theta_u = partial[u] / (partial[u] + partial[v])
        theta_v = 1.0 - theta_u
        maxload, minload = max(load), min(load)
        best, best_score = -1, -1.0
        for s in range(p):
            score = (maxload - load[s]) * (lam / (eps + maxload - minload))
            if s in replicas[u]:
                score += (2.0 - theta_u) if hdrf else 1.0
            if s in replicas[v]:
                score += (2.0 - theta_v) if hdrf else 1.0
            if score > best_score:
                best, best_score = s, score
        replicas[u].add(best)
        replicas[v].add(best)
        load[best] += 1
        home[v] = best
        src_home[u] = best
        out.append(best)
    return out, [h if h >= 0 else s for h, s in zip(home, src_home)]


def splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def replication_from_parts(n: int, edge_sets: list[set[tuple[int, int]]], inner: list[set[int]]) -> float:
    """``sum_s |V_s| / n`` from explicit per-partition record sets and inner vertex sets."""
    total = 0
    for records, own in zip(edge_sets, inner):
        vs = set(own)
        for u, v in records:
            vs.update((u, v))
        total += len(vs)
    return total / n


# ------------------------------------------------------------- 2PS-L oracle
def reference_2psl(src, dst, n: int, p: int, *, remaining: str = "score", cluster_passes: int = 2,
                   balance: float = 1.05, volume_cap: float = 0.1, seed: int = 0):
    """2PS-L's passes in plain Python (dicts and sets, full scans for every minimum), after the module
    docstring of :mod:`graphscale.partition.edge_stream`.

    Returns:
        ``(part per record, home per vertex before the isolated-vertex fill, number of clusters,
        prepartitioned records)`` (``-1`` = no record).
    """
    records = list(zip(src.tolist(), dst.tolist()))
    m = len(records)
    deg = [0] * n
    for _, v in records:
        deg[v] += 1
    # phase 1: streaming clustering, volume cap 0.1 |E| / p, clusters kept across passes
    cluster: dict[int, int] = {}
    vol: dict[int, int] = {}
    cap = volume_cap * m / p
    for _ in range(cluster_passes):
        for u, v in records:
            for x in (u, v):
                if x not in cluster:
                    cluster[x] = len(vol) + 1
                    vol[cluster[x]] = deg[x]
            cu, cv = cluster[u], cluster[v]
            if cu == cv or vol[cu] > cap or vol[cv] > cap:
                continue
            if vol[cu] - deg[u] <= vol[cv] - deg[v]:  # the endpoint of the smaller real volume moves
                mover, source, target = u, cu, cv
            else:
                mover, source, target = v, cv, cu
            if vol[target] + deg[mover] <= cap:
                vol[source] -= deg[mover]
                vol[target] += deg[mover]
                cluster[mover] = target
    # clusters by volume, descending (ties: id), each to the partition of least volume (ties: lowest index);
    # a cluster of volume 0 (only vertices with no in-records) is not scheduled: its records count as partition 0
    scheduled = sorted((k for k in vol if vol[k] > 0), key=lambda k: (-vol[k], k))
    part_volume = [0] * p
    cpart: dict[int, int] = {}
    for k in scheduled:
        s = min(range(p), key=lambda s: (part_volume[s], s))
        cpart[k] = s
        part_volume[s] += vol[k]

    def cluster_part(x):
        return cpart.get(cluster.get(x, 0), 0)

    full = balance * m / p
    load = [0] * p
    replicas = [set() for _ in range(n)]
    home, src_home = [-1] * n, [-1] * n
    out = [-1] * m

    def least_loaded():
        return min(range(p), key=lambda s: (load[s], s))

    def linear(u, v):  # hash of the higher-degree endpoint (ties: v), else the least-loaded partition
        s = splitmix64(splitmix64(seed) ^ (u if deg[u] > deg[v] else v)) % p
        return s if load[s] < full else least_loaded()

    def place(i, u, v, s):
        out[i] = s
        load[s] += 1
        replicas[u].add(s)
        replicas[v].add(s)
        home[v] = s
        src_home[u] = s

    # phase 2: prepartitioning pass, records whose clusters share a partition
    for i, (u, v) in enumerate(records):
        s = cluster_part(u)
        if s == cluster_part(v):
            place(i, u, v, s if load[s] < full else linear(u, v))
    prepartitioned = sum(s >= 0 for s in out)
    # the remaining records, in a second pass
    for i, (u, v) in enumerate(records):
        pu, pv = cluster_part(u), cluster_part(v)
        if pu == pv:
            continue
        if remaining == "hash":
            place(i, u, v, linear(u, v))
            continue
        volu, volv = vol[cluster[u]], vol[cluster[v]]
        best, best_score = -1, -1.0
        for s in (pu, pv):
            if load[s] >= full:
                continue
            score = 0.0
            if s in replicas[u]:
                score += 1 + (1 - deg[u] / (deg[u] + deg[v]))
            if s in replicas[v]:
                score += 1 + (1 - deg[v] / (deg[u] + deg[v]))
            if volu + volv > 0:
                score += (volu if s == pu else volv) / (volu + volv)
            if score > best_score:
                best, best_score = s, score
        place(i, u, v, best if best >= 0 else least_loaded())
    homes = [h if h >= 0 else s for h, s in zip(home, src_home)]
    return out, homes, len(scheduled), prepartitioned
