"""taxonomy.py: the 14 MAST modes in 3 categories, named once."""

from __future__ import annotations

import pytest

from agentreplay_analysis.taxonomy import BY_ID, IDS, MODES, Category, mode


def test_fourteen_modes_in_three_categories_in_the_papers_order():
    assert IDS == ("FM-1.1", "FM-1.2", "FM-1.3", "FM-1.4", "FM-1.5", "FM-2.1", "FM-2.2", "FM-2.3", "FM-2.4",
                   "FM-2.5", "FM-2.6", "FM-3.1", "FM-3.2", "FM-3.3")
    counts = {c: sum(m.category is c for m in MODES) for c in Category}
    assert counts == {Category.SPECIFICATION: 5, Category.MISALIGNMENT: 6, Category.VERIFICATION: 3}
    assert all(m.definition and m.name for m in MODES)
    assert mode("FM-1.1").label == "FM-1.1 disobey task specification"
    assert BY_ID["FM-2.6"].name == "reasoning-action mismatch"


def test_an_unknown_id_names_the_ones_that_exist():
    with pytest.raises(KeyError, match="FM-1.1, FM-1.2"):
        mode("FM-9.9")
