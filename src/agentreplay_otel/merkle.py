"""Merkle tree hashing and proofs as RFC 9162 (Certificate Transparency 2.0) §2.1 defines them: pure.

A leaf hashes as ``SHA-256(0x00 || leaf)``, an inner node as ``SHA-256(0x01 || left || right)``,
and the tree of ``n`` leaves splits at ``k``, the largest power of two below ``n``. The
0x00/0x01 prefixes keep a leaf from ever passing for a node (second-preimage resistance).

Proofs are generated over an accessor, *the hash of the subtree [start, end)*, so whoever
keeps the tree decides how to find those hashes. Every subtree a proof names splits into at
most ``log2(n)`` *perfect* subtrees (``2**level`` leaves starting at ``index * 2**level``):
a store that keeps the hash of each perfect subtree answers any proof from O(log n) rows
(:func:`proof_nodes` says which, before any is read). :class:`Frontier` holds the perfect
subtrees along a tree's right edge, which is all an append needs: the nodes an appended
leaf completes, and the new root, in O(log n).

Verification (:func:`verify_inclusion`, :func:`verify_consistency`) follows RFC 9162
§2.1.3.2 and §2.1.4.2 step by step and raises :class:`ProofError` naming what failed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from agentreplay_otel.errors import AgentReplayError

HASH_SIZE = 32
LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"
EMPTY_ROOT = hashlib.sha256(b"").digest()
"""The root of the empty tree (RFC 9162: the hash of the empty string)."""

Range = tuple[int, int]
"""A subtree by its leaves: ``[start, end)``."""

SubtreeHash = Callable[[int, int], bytes]
"""The hash of the subtree of leaves ``[start, end)`` (an RFC 9162 subtree: see :func:`is_subtree`)."""


class ProofError(AgentReplayError):
    """A Merkle proof, tree size or root that does not verify."""


# --- hashing ---------------------------------------------------------------------------------
def leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(LEAF_PREFIX + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def split_point(n: int) -> int:
    """The largest power of two smaller than ``n`` (``n >= 2``): where RFC 9162 splits a tree."""
    if n < 2:
        raise ValueError(f"a tree of {n} leaves does not split")
    return 1 << ((n - 1).bit_length() - 1)


def root_hash(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH of the leaves whose hashes are given (``EMPTY_ROOT`` for none), in O(n) time."""
    frontier = Frontier()
    for h in leaf_hashes:
        frontier.append(h)
    return frontier.root()


# --- perfect subtrees --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, order=True)
class Node:
    """A perfect subtree: ``2**level`` leaves from ``index * 2**level``."""

    level: int
    index: int

    @property
    def start(self) -> int:
        return self.index << self.level

    @property
    def end(self) -> int:
        return (self.index + 1) << self.level


def is_subtree(start: int, end: int) -> bool:
    """Whether ``[start, end)`` is a subtree of some RFC 9162 tree: non-empty, and ``start``
    a multiple of the smallest power of two holding ``end - start`` leaves."""
    if not 0 <= start < end:
        return False
    width = 1 << (end - start - 1).bit_length()
    return start % width == 0


def cover(start: int, end: int) -> list[Node]:
    """The perfect subtrees that make up the subtree ``[start, end)``, largest (leftmost) first.

    MTH of the subtree folds them from the right (:func:`fold`). At most ``log2(end - start) + 1``."""
    if not is_subtree(start, end):
        raise ValueError(f"[{start}, {end}) is not a subtree of a Merkle tree")
    nodes: list[Node] = []
    while start < end:
        level = (end - start).bit_length() - 1  # the largest power of two that fits; start is aligned to it
        nodes.append(Node(level, start >> level))
        start += 1 << level
    return nodes


def fold(hashes: Sequence[bytes]) -> bytes:
    """The hash of a subtree from its cover's hashes (leftmost first)."""
    if not hashes:
        raise ValueError("an empty cover")
    acc = hashes[-1]
    for h in reversed(hashes[:-1]):
        acc = node_hash(h, acc)
    return acc


def subtree_from_nodes(start: int, end: int, perfect: Callable[[Node], bytes]) -> bytes:
    """The hash of ``[start, end)`` from the hashes of its perfect subtrees."""
    return fold([perfect(n) for n in cover(start, end)])


# --- which subtrees a proof names (RFC 9162 §2.1.3.1, §2.1.4.1) -------------------------------------
def inclusion_path(index: int, size: int) -> list[Range]:
    """The subtrees whose hashes prove leaf ``index`` in a tree of ``size`` leaves, leaf's sibling first."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size} leaves")
    path: list[Range] = []
    start, end = 0, size
    while end - start > 1:
        k = split_point(end - start)
        if index < start + k:
            path.append((start + k, end))
            end = start + k
        else:
            path.append((start, start + k))
            start += k
    path.reverse()
    return path


def consistency_path(old: int, new: int) -> list[Range]:
    """The subtrees whose hashes prove the tree of ``old`` leaves a prefix of the one of ``new``."""
    if not 0 <= old <= new:
        raise ValueError(f"no consistency proof from {old} to {new} leaves")
    if old == 0 or old == new:
        return []
    path: list[Range] = []
    start, end, whole = 0, new, True  # SUBPROOF(m, D[start:end], whole), m counted from start
    m = old
    while m != end - start:
        k = split_point(end - start)
        if m <= k:
            path.append((start + k, end))
            end = start + k
        else:
            path.append((start, start + k))
            start += k
            m -= k
            whole = False
    if not whole:
        path.append((start, end))
    path.reverse()
    return path


def proof_nodes(ranges: Iterable[Range]) -> list[Node]:
    """Every perfect subtree whose hash the given subtrees need, each once, in a stable order."""
    return sorted({n for start, end in ranges for n in cover(start, end)})


def inclusion_proof(index: int, size: int, subtree: SubtreeHash) -> list[bytes]:
    return [subtree(s, e) for s, e in inclusion_path(index, size)]


def consistency_proof(old: int, new: int, subtree: SubtreeHash) -> list[bytes]:
    return [subtree(s, e) for s, e in consistency_path(old, new)]


# --- verification (RFC 9162 §2.1.3.2, §2.1.4.2) ------------------------------------------------------
def _check_hash(value: bytes, what: str) -> None:
    if not isinstance(value, bytes) or len(value) != HASH_SIZE:
        raise ProofError(f"{what} is not a {HASH_SIZE}-byte hash")


def root_from_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes]) -> bytes:
    """The root that ``proof`` and the leaf hash imply for a tree of ``size`` leaves (§2.1.3.2)."""
    _check_hash(leaf, "the leaf hash")
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is outside a tree of {size} leaves")
    fn, sn, r = index, size - 1, leaf
    for i, p in enumerate(proof):
        _check_hash(p, f"proof hash {i}")
        if sn == 0:
            raise ProofError(f"the proof is longer than a tree of {size} leaves allows ({len(proof)} hashes)")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError(f"the proof is shorter than a tree of {size} leaves needs ({len(proof)} hashes)")
    return r


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> None:
    """Raise :class:`ProofError` unless ``proof`` shows leaf hash ``leaf`` at ``index`` under ``root``."""
    _check_hash(root, "the root")
    if root_from_inclusion(leaf, index, size, proof) != root:
        raise ProofError(f"leaf {index} is not in the tree of {size} leaves with this root")


def verify_consistency(old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> None:
    """Raise :class:`ProofError` unless ``proof`` shows the tree (``old``, ``old_root``) a prefix of
    (``new``, ``new_root``): every leaf of the old tree is in the new one, unchanged, in place."""
    _check_hash(old_root, "the old root")
    _check_hash(new_root, "the new root")
    for i, p in enumerate(proof):
        _check_hash(p, f"proof hash {i}")
    if not 0 <= old <= new:
        raise ProofError(f"a tree of {new} leaves cannot extend one of {old}: the log shrank")
    if old == 0:  # every tree extends the empty one
        if proof:
            raise ProofError("a consistency proof from the empty tree is empty")
        if old_root != EMPTY_ROOT:
            raise ProofError("the root of the empty tree is not the hash of the empty string")
        return
    if old == new:
        if proof:
            raise ProofError("a consistency proof between trees of the same size is empty")
        if old_root != new_root:
            raise ProofError(f"two different roots for the same tree size {old}")
        return
    if not proof:
        raise ProofError("an empty consistency proof between trees of different sizes")
    path = list(proof)
    if old & (old - 1) == 0:  # an exact power of 2: the old root is itself a node of the new tree
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError(f"the consistency proof is longer than {old} -> {new} allows ({len(proof)} hashes)")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError(f"the consistency proof is shorter than {old} -> {new} needs ({len(proof)} hashes)")
    if fr != old_root:
        raise ProofError(f"the proof does not lead to the old root: the first {old} leaves were changed")
    if sr != new_root:
        raise ProofError(f"the proof does not lead to the new root of {new} leaves")


# --- appending -------------------------------------------------------------------------------------
class Frontier:
    """The perfect subtrees along a tree's right edge (one per set bit of its size): enough to
    append a leaf and to compute the root, each in O(log n), without the rest of the tree."""

    __slots__ = ("_hashes", "_size")

    def __init__(self, size: int = 0, hashes: Sequence[bytes] = ()) -> None:
        nodes = cover(0, size) if size else []
        if len(hashes) != len(nodes):
            raise ValueError(f"a tree of {size} leaves has {len(nodes)} frontier subtrees, not {len(hashes)}")
        self._size = size
        self._hashes = list(hashes)

    @staticmethod
    def nodes(size: int) -> list[Node]:
        """The perfect subtrees whose hashes a frontier of ``size`` leaves holds (largest first)."""
        return cover(0, size) if size else []

    @property
    def size(self) -> int:
        return self._size

    @property
    def hashes(self) -> tuple[bytes, ...]:
        return tuple(self._hashes)

    def copy(self) -> Frontier:
        return Frontier(self._size, self._hashes)

    def append(self, leaf: bytes) -> list[tuple[Node, bytes]]:
        """Add a leaf (by its hash); return every perfect subtree it completes, with its hash
        (the leaf itself first): what a store of perfect-subtree hashes must insert."""
        index = self._size
        made = [(Node(0, index), leaf)]
        acc, level = leaf, 0
        while (index >> level) & 1:  # the subtree at this level was the left half of a pair: close it
            acc = node_hash(self._hashes.pop(), acc)
            level += 1
            made.append((Node(level, index >> level), acc))
        self._hashes.append(acc)
        self._size += 1
        return made

    def root(self) -> bytes:
        return fold(self._hashes) if self._hashes else EMPTY_ROOT
