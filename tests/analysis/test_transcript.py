"""transcript.py: which tools act on the world, by their name and description (a recorded side effect
says so first)."""

from __future__ import annotations

import pytest

from agentreplay_analysis.transcript import tool_acts


@pytest.mark.parametrize("name, description", [
    ("book_flight", ""), ("issue_refund", ""), ("customer_refund", ""), ("write_file", ""), ("send_email", ""),
    ("schedule_meeting", ""), ("createEvent", ""), ("bank_transfer", "Transfer money between accounts."),
    ("apply_patch", ""), ("ledger", "Write an entry to the ledger"),
])
def test_tools_that_act(name, description):
    assert tool_acts(name, description)


@pytest.mark.parametrize("name, description", [
    ("search_flights", ""), ("get_refund_status", ""), ("lookup_order", ""), ("list_issues", ""),
    ("github_issue", ""), ("order_status", ""), ("transfer_history", ""), ("booking_status", ""), ("run_sql", "Run a SQL query."),
    ("fetch_url", "Fetch a web page."), ("read_file", "Read a file of the repository."),
])
def test_tools_that_only_read(name, description):
    assert not tool_acts(name, description)
