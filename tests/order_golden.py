#!/usr/bin/env python3
"""Independent transcription of the EpochPermutation algorithm documented in
docs/ORDER.md §1.1; prints the golden values used by tests/order_test.cc."""
M = (1 << 64) - 1
def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)
def perm(n, seed, epoch):
    st = [mix((mix(seed) + epoch) & M)]
    def nxt():
        st[0] = (st[0] + 0x9E3779B97F4A7C15) & M
        return mix(st[0])
    def below(m):
        w = nxt() * m; lo = w & M
        if lo < m:
            t = ((1 << 64) - m) % m
            while lo < t:
                w = nxt() * m; lo = w & M
        return w >> 64
    p = list(range(n))
    for i in range(n - 1, 0, -1):
        j = below(i + 1); p[i], p[j] = p[j], p[i]
    return p
for name, args, k in [("GOLDEN_10_0_0", (10, 0, 0), 10), ("GOLDEN_10_42_0", (10, 42, 0), 10), ("GOLDEN_10_42_1", (10, 42, 1), 10), ("GOLDEN_1000_7_3", (1000, 7, 3), 8)]:
    print(name, ", ".join(map(str, perm(*args)[:k])))

# Order version 2 (docs/ORDER.md §1.2): a 4-round Feistel network over the smallest even bit
# width k >= 2 with 2^k >= n, keyed by SplitMix64 of (seed, epoch), cycle-walked into [0, n).
def shuffle_v2(n, seed, epoch):
    k = 2
    while k < 64 and (1 << k) < n:
        k += 2
    h = k // 2
    mask = (1 << h) - 1
    st = mix((mix(seed) + epoch) & M)
    keys = []
    for _ in range(4):
        st = (st + 0x9E3779B97F4A7C15) & M
        keys.append(mix(st))
    def enc(x):
        l, r = x >> h, x & mask
        for key in keys:
            l, r = r, l ^ (mix(r ^ key) & mask)
        return (l << h) | r
    def at(i):
        y = enc(i)
        while y >= n:
            y = enc(y)
        return y
    return at
print()
for name, (n, seed, epoch), positions in [
        ("GOLDEN_V2_10_0_0", (10, 0, 0), range(10)),
        ("GOLDEN_V2_10_42_0", (10, 42, 0), range(10)),
        ("GOLDEN_V2_10_42_1", (10, 42, 1), range(10)),
        ("GOLDEN_V2_1000_7_3", (1000, 7, 3), range(8)),
        ("GOLDEN_V2_1E7_123_5", (10**7, 123, 5), [0, 1, 2, 4999999, 9999999]),
        ("GOLDEN_V2_2P40P1_9_2", ((1 << 40) + 1, 9, 2), [0, 1, 1 << 40]),
        ("GOLDEN_V2_2P64M1_1_0", ((1 << 64) - 1, 1, 0), [0, 1, (1 << 64) - 2])]:
    at = shuffle_v2(n, seed, epoch)
    print(name, ", ".join(str(at(i)) for i in positions))

# Order version 3, node-local (docs/ORDER.md §5): groups, assignment, a node's epoch. The
# dataset: 40 samples of 3 MiB and 5 MiB in turn, packed back to back (4 KiB aligned, the first
# at 4 KiB) in shards of 64 MiB; seed 42, 3 nodes of 2 ranks, epoch 1, single samples.
MIB = 1 << 20
def spans(n, sizes, shard_bytes):
    out, shard, off = [], 0, 4096
    for i in range(n):
        size = sizes[i % len(sizes)]
        if off + size > shard_bytes and off > 4096:
            shard, off = shard + 1, 4096
        out.append((shard, off, size))
        off += (size + 4095) // 4096 * 4096
    return out
def assign(sp, seed, nodes):
    total = sum(s[2] for s in sp)
    g = max(4096, min(256 * MIB, total // (8 * nodes)) // 4096 * 4096)
    keys = sorted(set((s[0], s[1] // g) for s in sp))
    groups = [[i for i, s in enumerate(sp) if (s[0], s[1] // g) == k] for k in keys]
    st = [mix((mix(seed ^ 0x6E6F64652D617373) + nodes) & M)]
    def nxt():
        st[0] = (st[0] + 0x9E3779B97F4A7C15) & M
        return mix(st[0])
    def below(m):
        w = nxt() * m; lo = w & M
        if lo < m:
            t = ((1 << 64) - m) % m
            while lo < t:
                w = nxt() * m; lo = w & M
        return w >> 64
    deal = list(range(len(groups)))
    for i in range(len(groups) - 1, 0, -1):
        j = below(i + 1); deal[i], deal[j] = deal[j], deal[i]
    count, size, samples = [0] * nodes, [0] * nodes, [[] for _ in range(nodes)]
    for gi in deal:
        k = min(range(nodes), key=lambda x: (count[x], size[x], x))
        count[k] += len(groups[gi]); size[k] += sum(sp[i][2] for i in groups[gi])
        samples[k] += groups[gi]
    return g, [sorted(s) for s in samples]
def node_seed(seed, k):
    return mix(seed ^ mix((k + 0x6C6F63616C6E6F64) & M))
g, a = assign(spans(40, [3 * MIB, 5 * MIB], 64 * MIB), 42, 3)
print()
print("group bytes", g)
print("GOLDEN_NODE0", ", ".join(map(str, a[0])))
print("GOLDEN_NODE1", ", ".join(map(str, a[1])))
L, epoch = 2, 1
S = max((len(x) + L - 1) // L for x in a)
firsts = []
for k in range(3):
    at = shuffle_v2(len(a[k]), node_seed(42, k), epoch)
    q = [a[k][at(i)] for i in range(len(a[k]))]
    for j in range(L):
        for t in range(2):
            u = t * L + j
            firsts.append(q[u] if u < len(q) else q[(u - len(q)) % len(q)])
print("GOLDEN_FIRST_STEPS", ", ".join(map(str, firsts)))
# Follow order (docs/ORDER.md §7.1): windows of capacity min(M, 2^w) over the arrival order,
# each shuffled by ShuffleV2 keyed by Mix(epoch ^ Mix(w + "follow!!")).
def follow_s(n, seed, epoch, window):
    out = []
    b, w = 0, 0
    while b < n:
        c = min(window, 1 << w) if w < 63 else window
        m = min(c, n - b)
        if m > 1:
            at = shuffle_v2(m, seed, mix(epoch ^ mix((w + 0x666F6C6C6F772121) & M)))
            out += [b + at(j) for j in range(m)]
        else:
            out += [b + j for j in range(m)]
        b += c
        w += 1
    return out
print()
for name, args in [("GOLDEN_FOLLOW_20_0_0_4", (20, 0, 0, 4)),
                   ("GOLDEN_FOLLOW_20_42_1_8", (20, 42, 1, 8)),
                   ("GOLDEN_FOLLOW_13_7_3_5", (13, 7, 3, 5))]:
    print(name, ", ".join(map(str, follow_s(*args))))

# Loader states (docs/ORDER.md §8). Version 1 (§8.1): one line of JSON without spaces, the keys in
# the order of the spec: state_version, order, epoch, position, skipped, then the kind's own
# (global: seed, bucketing; node-local: seed, bucketing, locality; caller: steps_digest; follow:
# seed, follow_window). Unversioned (§8.2): the dicts libshard's state_dict() gave before, as
# json.dumps writes them; each decodes to the version 1 state of the same name. With
# `--write-states DIR` the script writes them there (tests/data/loader_state/, which
# tests/loader_state_test.cc checks); otherwise it prints them. Version 2 (§8.1), what
# EncodeLoaderState writes now: version 1's keys, then "identity" (16 hex digits or null),
# "samples" (global and node-local) and "shuffle" (all but a caller's), written as
# version2_<name>.json; each decodes to the state of the same name with that origin.
import json
import sys


def v1(order, epoch, position, skipped, **fields):
    s = {"state_version": 1, "order": order, "epoch": epoch, "position": position,
         "skipped": skipped}
    s.update(fields)
    return json.dumps(s, separators=(",", ":"))


def v2(encoded_v1, identity, samples=None, shuffle=None, kind="global"):
    s = json.loads(encoded_v1)
    s["state_version"] = 2
    s["identity"] = identity
    if kind in ("global", "node_local"):
        s["samples"] = samples
    if kind != "caller":
        s["shuffle"] = shuffle
    return json.dumps(s, separators=(",", ":"))


BUCKETED = {"window": 4096, "batch_size": 0, "max_tokens": 2048, "budget": "padded"}
DIGEST = 11400714819323198485
STATES = {
    "global_v2": (v1(2, 3, 120, [], seed=8, bucketing=None),
                  {"seed": 8, "epoch": 3, "position": 120, "skipped": [], "order": 2,
                   "bucketing": None, "locality": None}),
    # Before order versions: four fields, order 1.
    "global_v1": (v1(1, 0, 7, [5, 2], seed=(1 << 64) - 1, bucketing=None),
                  {"seed": (1 << 64) - 1, "epoch": 0, "position": 7, "skipped": [5, 2]}),
    "global_bucketed": (v1(2, 1, 64, [], seed=5, bucketing=BUCKETED),
                        {"seed": 5, "epoch": 1, "position": 64, "skipped": [], "order": 2,
                         "bucketing": BUCKETED, "locality": None}),
    "node_local": (v1(3, 2, 8, [], seed=3, bucketing=None,
                      locality={"nodes": 2, "local_world_size": 2, "steps": 2}),
                   {"seed": 3, "epoch": 2, "position": 8, "skipped": [], "order": 3,
                    "bucketing": None,
                    "locality": {"nodes": 2, "local_world_size": 2, "steps": 2}}),
    # The start of a node-local epoch, as the releases' state_dict() gave it after an epoch.
    "node_local_start": (v1(3, 4, 0, [], seed=3, bucketing=None, locality=None),
                         {"seed": 3, "epoch": 4, "position": 0, "skipped": [], "order": 3,
                          "bucketing": None, "locality": None, "follow_window": 0}),
    "caller": (v1(0, 2, 2, [], steps_digest=DIGEST),
               {"seed": 0, "epoch": 2, "position": 2, "skipped": [], "order": 0,
                "bucketing": None, "locality": None, "steps_digest": DIGEST}),
    "follow": (v1(2, 0, 12, [], seed=11, follow_window=8),
               {"seed": 11, "epoch": 0, "position": 12, "skipped": [], "order": 2,
                "bucketing": None, "locality": None, "follow_window": 8}),
}
IDENTITY = "0123456789abcdef"
# Version 2: each state of STATES with its origin (identity, samples, shuffle).
STATES_V2 = {
    "global_v2": v2(STATES["global_v2"][0], IDENTITY, 1000, True),
    "global_v1": v2(STATES["global_v1"][0], "fedcba9876543210", 10, False),
    "global_bucketed": v2(STATES["global_bucketed"][0], IDENTITY, 5000, True),
    "node_local": v2(STATES["node_local"][0], IDENTITY, 40, True, kind="node_local"),
    "node_local_start": v2(STATES["node_local_start"][0], None, None, None, kind="node_local"),
    "caller": v2(STATES["caller"][0], IDENTITY, kind="caller"),
    "follow": v2(STATES["follow"][0], IDENTITY, shuffle=True, kind="follow"),
}
if "--write-states" in sys.argv:
    out = sys.argv[sys.argv.index("--write-states") + 1]
    for name, (encoded, legacy) in STATES.items():
        with open(f"{out}/{name}.json", "w") as f:
            f.write(encoded + "\n")
        with open(f"{out}/legacy_{name}.json", "w") as f:
            f.write(json.dumps(legacy) + "\n")
    for name, encoded in STATES_V2.items():
        with open(f"{out}/version2_{name}.json", "w") as f:
            f.write(encoded + "\n")
else:
    print()
    for name, (encoded, legacy) in STATES.items():
        print(name, encoded)
        print("legacy_" + name, json.dumps(legacy))
    for name, encoded in STATES_V2.items():
        print("version2_" + name, encoded)
