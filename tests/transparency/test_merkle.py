"""agentreplay_otel.merkle against RFC 9162 §2.1: reference vectors, the RFC's recursive definitions
written out as plainly as the RFC states them, and mutated proofs (each must fail)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay_otel.core import merkle
from agentreplay_otel.merkle import ProofError

# The Certificate Transparency reference inputs and the roots of their first n (RFC 6962 / 9162 hashing).
INPUTS = [bytes.fromhex(h) for h in (
    "", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f",
)]
ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
INCLUSION = [  # (leaf index, tree size, proof)
    (0, 1, []),
    (0, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (5, 8, ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (1, 5, ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
]
CONSISTENCY = [  # (old size, new size, proof)
    (1, 1, []),
    (1, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (6, 8, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 5, ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
]
LEAVES = [merkle.leaf_hash(d) for d in INPUTS]


# --- RFC 9162 §2.1.1, §2.1.3.1, §2.1.4.1, as written (recursive, over the leaves) ---------------------
def mth(d: list[bytes]) -> bytes:
    if not d:
        return hashlib.sha256(b"").digest()
    if len(d) == 1:
        return d[0]
    k = merkle.split_point(len(d))
    return merkle.node_hash(mth(d[:k]), mth(d[k:]))


def rfc_path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) == 1:
        return []
    k = merkle.split_point(len(d))
    return rfc_path(m, d[:k]) + [mth(d[k:])] if m < k else rfc_path(m - k, d[k:]) + [mth(d[:k])]


def rfc_subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    if m == len(d):
        return [] if b else [mth(d)]
    k = merkle.split_point(len(d))
    if m <= k:
        return rfc_subproof(m, d[:k], b) + [mth(d[k:])]
    return rfc_subproof(m - k, d[k:], False) + [mth(d[:k])]


def leaves(n: int, salt: bytes = b"") -> list[bytes]:
    return [merkle.leaf_hash(salt + i.to_bytes(4, "big")) for i in range(n)]


def store_of(d: list[bytes]) -> Callable[[int, int], bytes]:
    """A subtree accessor the way the collector's store answers it: from perfect-subtree hashes only."""
    frontier, perfect = merkle.Frontier(), {}
    for h in d:
        perfect.update(frontier.append(h))
    return lambda start, end: merkle.subtree_from_nodes(start, end, perfect.__getitem__)


# --- vectors ------------------------------------------------------------------------------------
def test_hashes_are_rfc_9162_with_prefixes():
    assert merkle.leaf_hash(b"") == hashlib.sha256(b"\x00").digest()
    assert merkle.node_hash(b"a" * 32, b"b" * 32) == hashlib.sha256(b"\x01" + b"a" * 32 + b"b" * 32).digest()
    assert merkle.EMPTY_ROOT.hex() == ROOTS[0]


@pytest.mark.parametrize("n", range(len(ROOTS)))
def test_roots_match_the_reference_vectors(n):
    assert merkle.root_hash(LEAVES[:n]).hex() == ROOTS[n]
    assert mth(LEAVES[:n]).hex() == ROOTS[n]


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION)
def test_inclusion_vectors_generate_and_verify(index, size, proof):
    generated = merkle.inclusion_proof(index, size, store_of(LEAVES[:size]))
    assert [p.hex() for p in generated] == proof
    merkle.verify_inclusion(LEAVES[index], index, size, generated, bytes.fromhex(ROOTS[size]))


@pytest.mark.parametrize(("old", "new", "proof"), CONSISTENCY)
def test_consistency_vectors_generate_and_verify(old, new, proof):
    generated = merkle.consistency_proof(old, new, store_of(LEAVES[:new]))
    assert [p.hex() for p in generated] == proof
    merkle.verify_consistency(old, new, bytes.fromhex(ROOTS[old]), bytes.fromhex(ROOTS[new]), generated)


def test_every_proof_up_to_40_leaves_is_the_rfc_one():
    d = leaves(40)
    subtree = store_of(d)
    for n in range(1, 41):
        root = mth(d[:n])
        for m in range(n):
            proof = merkle.inclusion_proof(m, n, subtree)
            assert proof == rfc_path(m, d[:n])
            merkle.verify_inclusion(d[m], m, n, proof, root)
        for m in range(1, n + 1):
            proof = merkle.consistency_proof(m, n, subtree)
            assert proof == (rfc_subproof(m, d[:n], True) if m < n else [])
            merkle.verify_consistency(m, n, mth(d[:m]), root, proof)


def test_the_frontier_appends_in_log_n_and_yields_every_perfect_subtree():
    d = leaves(100)
    frontier, made = merkle.Frontier(), {}
    for i, h in enumerate(d):
        new = frontier.append(h)
        assert len(new) == 1 + (len(bin(i)) - len(bin(i).rstrip("1")) if i else 0)  # 1 + trailing ones of i
        made.update(new)
        assert frontier.root() == mth(d[: i + 1])
    assert set(made) == {merkle.Node(lv, j) for lv in range(7) for j in range(100 >> lv)}
    for node, h in made.items():
        assert h == mth(d[node.start : node.end])
    again = merkle.Frontier(frontier.size, frontier.hashes)  # reloaded from its O(log n) hashes
    assert again.root() == frontier.root()
    again.append(d[0])
    frontier.append(d[0])
    assert again.root() == frontier.root()


def test_proofs_name_only_o_log_n_perfect_subtrees():
    n = 10_000_019
    for m in (0, 1, n // 2, n - 2, n - 1):
        assert len(merkle.proof_nodes(merkle.inclusion_path(m, n))) <= 2 * n.bit_length()
    for old in (1, 3, 4_194_304, n - 1):
        assert len(merkle.proof_nodes(merkle.consistency_path(old, n))) <= 3 * n.bit_length()


def test_cover_refuses_what_is_not_a_subtree():
    assert merkle.cover(8, 13) == [merkle.Node(2, 2), merkle.Node(0, 12)]
    for start, end in ((3, 5), (0, 0), (5, 4), (4, 12)):
        with pytest.raises(ValueError):
            merkle.cover(start, end)


# --- mutations: each must fail ---------------------------------------------------------------
def flips(value: bytes):
    for bit in range(len(value) * 8):
        yield value[: bit // 8] + bytes([value[bit // 8] ^ (1 << (bit % 8))]) + value[bit // 8 + 1 :]


def fails(check: Callable[..., None], *args: object) -> bool:
    try:
        check(*args)
    except ProofError:
        return True
    return False


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 8, 12, 13])
def test_every_mutated_inclusion_proof_fails(n):
    d = leaves(n)
    subtree, roots = store_of(d), [mth(d[:k]) for k in range(n + 3)]
    extra = leaves(n + 2)  # a longer log with the same first n leaves: its roots are real roots too
    roots_extra = [mth(extra[:k]) for k in range(n + 3)]
    for m in range(n):
        proof, root = merkle.inclusion_proof(m, n, subtree), roots[n]
        merkle.verify_inclusion(d[m], m, n, proof, root)
        for i, p in enumerate(proof):  # every bit of every proof hash
            for bad in flips(p):
                assert fails(merkle.verify_inclusion, d[m], m, n, proof[:i] + [bad] + proof[i + 1 :], root)
        for bad in flips(d[m]):  # every bit of the leaf
            assert fails(merkle.verify_inclusion, bad, m, n, proof, root)
        for bad in flips(root):  # every bit of the root
            assert fails(merkle.verify_inclusion, d[m], m, n, proof, bad)
        for other in range(-1, n + 2):  # a wrong index
            if other != m:
                assert fails(merkle.verify_inclusion, d[m], other, n, proof, root)
        for size in range(0, n + 3):  # a wrong size, against that size's own root
            if size != n:
                assert fails(merkle.verify_inclusion, d[m], m, size, proof, roots_extra[size])
        for cut in range(len(proof)):  # truncated
            assert fails(merkle.verify_inclusion, d[m], m, n, proof[:cut], root)
        for pad in (root, d[m], proof[-1] if proof else root):  # extended
            assert fails(merkle.verify_inclusion, d[m], m, n, proof + [pad], root)
            assert fails(merkle.verify_inclusion, d[m], m, n, [pad] + proof, root)
        if len(proof) > 1:  # reordered
            assert fails(merkle.verify_inclusion, d[m], m, n, proof[::-1], root)
        assert fails(merkle.verify_inclusion, d[m], m, n, proof + [b"\0" * 31], root)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 12, 13])
def test_every_mutated_consistency_proof_fails(n):
    d = leaves(n + 2)
    subtree, roots = store_of(d), [mth(d[:k]) for k in range(n + 3)]
    for old in range(1, n):
        proof = merkle.consistency_proof(old, n, subtree)
        merkle.verify_consistency(old, n, roots[old], roots[n], proof)
        for i, p in enumerate(proof):
            for bad in flips(p):
                assert fails(merkle.verify_consistency, old, n, roots[old], roots[n],
                                                               proof[:i] + [bad] + proof[i + 1 :])
        for bad in flips(roots[old]):
            assert fails(merkle.verify_consistency, old, n, bad, roots[n], proof)
        for bad in flips(roots[n]):
            assert fails(merkle.verify_consistency, old, n, roots[old], bad, proof)
        for size in range(1, n + 3):  # a wrong old size or new size, each with its own real root
            if size != old:
                assert fails(merkle.verify_consistency, size, n, roots[size], roots[n], proof)
            if size != n:
                assert fails(merkle.verify_consistency, old, size, roots[old], roots[size], proof)
        for cut in range(len(proof)):
            assert fails(merkle.verify_consistency, old, n, roots[old], roots[n], proof[:cut])
        for pad in (roots[old], roots[n], proof[-1]):
            assert fails(merkle.verify_consistency, old, n, roots[old], roots[n], proof + [pad])
            assert fails(merkle.verify_consistency, old, n, roots[old], roots[n], [pad] + proof)
        if len(proof) > 1:
            assert fails(merkle.verify_consistency, old, n, roots[old], roots[n], proof[::-1])


def test_a_rewritten_history_has_no_consistency_proof():
    """Change one old leaf (or drop it, shifting the rest): no proof the new tree can offer
    leads from the old root, whichever it is."""
    d = leaves(20)
    old_root = mth(d[:11])
    changed = d[:4] + [merkle.leaf_hash(b"edited")] + d[5:]
    dropped = d[:4] + d[5:] + leaves(1, b"new")
    for rewritten in (changed, dropped):
        subtree = store_of(rewritten)
        proof = merkle.consistency_proof(11, 20, subtree)
        assert fails(merkle.verify_consistency, 11, 20, old_root, mth(rewritten), proof)


def test_sizes_and_edges():
    assert fails(merkle.verify_inclusion, LEAVES[0], 0, 0, [], merkle.EMPTY_ROOT)
    assert fails(merkle.verify_consistency, 5, 4, LEAVES[0], LEAVES[0], [])  # the log shrank
    merkle.verify_consistency(0, 7, merkle.EMPTY_ROOT, bytes.fromhex(ROOTS[7]), [])
    assert fails(merkle.verify_consistency, 0, 7, merkle.EMPTY_ROOT, bytes.fromhex(ROOTS[7]), [LEAVES[0]])
    merkle.verify_consistency(7, 7, bytes.fromhex(ROOTS[7]), bytes.fromhex(ROOTS[7]), [])
    assert fails(merkle.verify_consistency, 7, 7, bytes.fromhex(ROOTS[7]), bytes.fromhex(ROOTS[6]), [])
    assert fails(merkle.verify_consistency, 3, 7, bytes.fromhex(ROOTS[3]), bytes.fromhex(ROOTS[7]), [])
    assert fails(merkle.verify_inclusion, b"short", 0, 1, [], LEAVES[0])


# --- random trees ------------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(st.integers(1, 700), st.data())
def test_random_trees_prove_every_leaf_and_refuse_a_flipped_bit(n, data):
    d = leaves(n, salt=b"h")
    subtree, root = store_of(d), mth(d)
    m = data.draw(st.integers(0, n - 1))
    proof = merkle.inclusion_proof(m, n, subtree)
    assert proof == rfc_path(m, d)
    merkle.verify_inclusion(d[m], m, n, proof, root)
    if proof:
        i = data.draw(st.integers(0, len(proof) - 1))
        bit = data.draw(st.integers(0, 255))
        bad = bytearray(proof[i])
        bad[bit // 8] ^= 1 << (bit % 8)
        assert fails(merkle.verify_inclusion, d[m], m, n, proof[:i] + [bytes(bad)] + proof[i + 1 :], root)
    other = data.draw(st.integers(0, n))
    if other != m:
        assert fails(merkle.verify_inclusion, d[m], other, n, proof, root)


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 700), st.data())
def test_random_trees_prove_every_prefix_and_refuse_a_changed_leaf(n, data):
    d = leaves(n, salt=b"c")
    old = data.draw(st.integers(1, n - 1))
    subtree = store_of(d)
    proof = merkle.consistency_proof(old, n, subtree)
    assert proof == rfc_subproof(old, d, True)
    merkle.verify_consistency(old, n, mth(d[:old]), mth(d), proof)
    victim = data.draw(st.integers(0, old - 1))
    edited = d[:victim] + [merkle.leaf_hash(b"x")] + d[victim + 1 :]
    assert fails(merkle.verify_consistency, old, n, mth(d[:old]), mth(edited),
                                                   merkle.consistency_proof(old, n, store_of(edited)))
