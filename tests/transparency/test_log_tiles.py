"""The tiles a saved head keeps (``agentreplay log checkpoint --json``): they make the signed root,
stay few, and are single leaves while the log is small, so an audit names the exact position."""

from __future__ import annotations

import pytest

from agentreplay_otel.core import merkle
from agentreplay_replay.cli._log import MAX_TILES, root_of_tiles, tile_ranges


@pytest.mark.parametrize("size", [1, 2, 3, 6, 7, 1023, 1024, 1025, 3000, 10_000_019])
def test_tiles_cover_the_tree_with_perfect_subtrees(size):
    ranges = tile_ranges(size)
    assert ranges[0][0] == 0 and ranges[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    assert all(merkle.is_subtree(s, e) and (e - s) & (e - s - 1) == 0 for s, e in ranges)
    assert len(ranges) <= MAX_TILES + size.bit_length()
    if size <= MAX_TILES:
        assert ranges == [(i, i + 1) for i in range(size)]


@pytest.mark.parametrize("size", [1, 2, 5, 8, 13, 1500, 2049])
def test_tiles_make_the_root(size):
    leaves = [merkle.leaf_hash(i.to_bytes(4, "big")) for i in range(size)]
    tiles = [merkle.root_hash(leaves[s:e]) for s, e in tile_ranges(size)]
    assert root_of_tiles(size, tiles) == merkle.root_hash(leaves)
    tiles[len(tiles) // 2] = merkle.leaf_hash(b"x")
    assert root_of_tiles(size, tiles) != merkle.root_hash(leaves)
