"""results.py: a tool call's result read by meaning, in the shapes tools answer with."""

from __future__ import annotations

import pytest

from agentreplay_analysis.results import failure_in


@pytest.mark.parametrize("result, says", [
    ({"approved": False, "reason": "over the limit"}, "approved: false"),
    ({"ok": False, "error_code": "LIMIT_EXCEEDED"}, "error_code: LIMIT_EXCEEDED"),
    ({"success": False}, "success: false"),
    ({"tests_passed": False}, "tests_passed: false"),
    ({"error": "column \"rev\" does not exist"}, "error: column \"rev\" does not exist"),
    ({"exit_code": 2, "stderr": "boom"}, "exit_code: 2"),
    ({"returncode": "1"}, "returncode: 1"),
    ({"status": 404, "text": "Not Found"}, "status: 404"),
    ({"status_code": 503}, "status_code: 503"),
    ({"status": "failed", "error": "sold out"}, "error: sold out"),
    ({"state": "Denied"}, "state: Denied"),
    ({"summary": "12 passed, 2 failed"}, "summary: 12 passed, 2 failed"),
    ({"failures": 3}, "failures: 3"),
    ({"result": {"ok": False}}, "result.ok: false"),
    ("Traceback (most recent call last): ...", "Traceback (most recent call last): ..."),
    ("ValueError: bad input", "ValueError: bad input"),
    ("3 tests failed", "3 tests failed"),
])
def test_failures_in_any_common_shape(result, says):
    assert failure_in(result) == says


@pytest.mark.parametrize("result", [
    {"ok": True, "transfer_id": "TX-1"}, {"approved": True}, {"exit_code": 0, "stdout": "ok"},
    {"status": 200, "text": "fine"}, {"status": "confirmed"}, {"summary": "40 passed, 0 failed"},
    {"error": None, "rows": []}, {"errors": []}, {"rows": [{"error_rate": 0.2}]},
    [{"error": "in a list of records"}], "All 40 tests passed", {"failed": 0},
])
def test_results_that_did_not_fail(result):
    assert failure_in(result) is None
