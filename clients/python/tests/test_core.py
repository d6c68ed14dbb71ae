"""The reading of answers, on its own (pure logic): what no daemon of this
tree answers yet but the contract names."""

from ratelimitd import _core


def test_a_kept_charge_is_not_a_failure():
    # docs/API.md, "Charges the backend cannot take now": 202, applied later
    d = _core.decide("/charge", 202, [("Content-Type", "application/json")],
                     b'{"pending":true,"policy":"tokens","charged":1870}', 3.0, fail_open=False)
    assert (d.allowed, d.status, d.degraded, d.pending, d.charged, d.reason) == (True, 202, False, True, 1870, None)


def test_a_full_backlog_is_the_failure_policy():
    d = _core.decide("/charge", 503, [], b'{"error":"charges: backlog full"}', 1.0, fail_open=False)
    assert (d.allowed, d.status, d.degraded, d.charged) == (False, 503, True, None)
    assert "backlog full" in d.reason
