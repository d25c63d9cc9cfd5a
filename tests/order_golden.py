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

# Follow order (docs/ORDER.md §5.1): windows of capacity min(M, 2^w) over the arrival order,
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
