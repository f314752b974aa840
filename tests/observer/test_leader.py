"""The observer's leader election: its pure decisions, and the elector's safety rule on a fake clock.

The elector itself runs against the real API server in test_leader_cluster.py; here its decisions
(when to take, renew or wait; what it writes; when a leader stops) are checked one by one, and the
rule that makes two leaders impossible is checked over a timeline: a deposed leader's fence closes
``leaseDuration - renewDeadline`` before a standby may take the Lease.
"""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from inference_api.settings import LeaderElectionSettings, ModuleSettings, ObserverSettings
from worker.observer.leader import (
    LeaseRecord,
    Step,
    default_identity,
    lease_name,
    lease_spec,
    micro_time,
    next_step,
    record_of,
    released_spec,
    seen_since,
    still_leading,
)

AT = datetime(2026, 12, 1, 18, 0, 0, 5, tzinfo=UTC)


def record(holder: str = "a", rv: str = "1", duration: int = 15, transitions: int = 3) -> LeaseRecord:
    return LeaseRecord(
        holder=holder,
        duration_seconds=duration,
        acquire_time="2026-12-01T17:00:00.000000Z",
        renew_time="2026-12-01T17:59:58.000000Z",
        transitions=transitions,
        resource_version=rv,
    )


# ---------------------------------------------------------------------------------- next_step


def test_no_lease_is_created() -> None:
    assert next_step(None, "me", None, 100.0) == Step.CREATE


def test_my_lease_is_renewed_whatever_the_clock() -> None:
    assert next_step(record(holder="me"), "me", 0.0, 10_000.0) == Step.RENEW


def test_a_released_lease_is_taken_at_once() -> None:
    assert next_step(record(holder=""), "me", 100.0, 100.0) == Step.TAKE


def test_another_holder_is_waited_for_a_whole_lease_duration_from_when_it_was_seen() -> None:
    held = record(holder="other", duration=15)
    assert next_step(held, "me", 100.0, 100.0) == Step.WAIT
    assert next_step(held, "me", 100.0, 114.999) == Step.WAIT
    assert next_step(held, "me", 100.0, 115.0) == Step.TAKE
    # Never seen (no observation time): waited, however old its renewTime looks.
    assert next_step(held, "me", None, 1e9) == Step.WAIT


# --------------------------------------------------------------------------------- seen_since


def test_seen_since_restarts_at_every_write_and_holds_otherwise() -> None:
    first = record(rv="1")
    assert seen_since(None, None, first, 10.0) == 10.0
    assert seen_since(first, 10.0, record(rv="1"), 20.0) == 10.0  # unchanged: still seen since 10
    assert seen_since(first, 10.0, record(rv="2"), 20.0) == 20.0  # renewed: the wait starts again
    assert seen_since(first, 10.0, None, 20.0) is None  # gone


# ------------------------------------------------------------------------------ still_leading


def test_a_leader_leads_strictly_within_the_renew_deadline_of_its_last_renewal_sent() -> None:
    assert still_leading(100.0, 109.999, 10.0)
    assert not still_leading(100.0, 110.0, 10.0)
    assert not still_leading(None, 0.0, 10.0)


def test_a_deposed_leader_stops_before_any_standby_may_take_over() -> None:
    """The timeline of a partition: the leader's last renewal is sent at t=100 and lands; a standby
    reads it right after (it cannot see it before it was sent). The leader's fence closes at
    100 + renewDeadline; the standby takes at the earliest 100 + leaseDuration."""
    config = LeaderElectionSettings(leaseDurationSeconds=15, renewDeadlineSeconds=10, retryPeriodSeconds=2)
    sent = 100.0
    renewed = record(holder="leader", rv="7", duration=config.leaseDurationSeconds)
    seen = seen_since(record(holder="leader", rv="6"), 98.0, renewed, sent + 0.001)
    assert seen is not None
    takeover = next(
        t / 1000 for t in range(100_000, 200_000) if next_step(renewed, "standby", seen, t / 1000) == Step.TAKE
    )
    fence_closes = next(
        t / 1000 for t in range(100_000, 200_000) if not still_leading(sent, t / 1000, config.renewDeadlineSeconds)
    )
    assert fence_closes == pytest.approx(110.0)
    assert takeover >= fence_closes + (config.leaseDurationSeconds - config.renewDeadlineSeconds) - 0.01


# -------------------------------------------------------------------------------- lease_spec


def test_create_holds_with_no_transition_yet() -> None:
    spec = lease_spec(Step.CREATE, None, "me", 15, AT)
    assert spec == {
        "holderIdentity": "me",
        "leaseDurationSeconds": 15,
        "acquireTime": "2026-12-01T18:00:00.000005Z",
        "renewTime": "2026-12-01T18:00:00.000005Z",
        "leaseTransitions": 0,
    }


def test_take_counts_one_more_transition_and_a_new_acquire_time() -> None:
    spec = lease_spec(Step.TAKE, record(holder="other", transitions=3), "me", 15, AT)
    assert spec["holderIdentity"] == "me"
    assert spec["leaseTransitions"] == 4
    assert spec["acquireTime"] == spec["renewTime"] == micro_time(AT)


def test_renew_keeps_acquire_time_and_transitions() -> None:
    held = record(holder="me", transitions=3)
    spec = lease_spec(Step.RENEW, held, "me", 15, AT)
    assert spec["acquireTime"] == held.acquire_time
    assert spec["renewTime"] == micro_time(AT)
    assert spec["leaseTransitions"] == 3


def test_wait_writes_nothing() -> None:
    with pytest.raises(ValueError, match="nothing to write"):
        lease_spec(Step.WAIT, record(), "me", 15, AT)


def test_release_leaves_no_holder_and_keeps_the_count() -> None:
    spec = released_spec(record(holder="me", transitions=5), AT)
    assert spec["holderIdentity"] is None
    assert spec["leaseTransitions"] == 5
    assert spec["leaseDurationSeconds"] == 1


def test_micro_time_is_utc_with_six_digits_even_at_a_whole_second() -> None:
    assert micro_time(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05.000000Z"


def test_record_of_reads_a_lease_as_the_client_returns_it() -> None:
    lease = SimpleNamespace(
        metadata=SimpleNamespace(resource_version="42"),
        spec=SimpleNamespace(
            holder_identity=None, lease_duration_seconds=15, acquire_time=AT, renew_time=AT, lease_transitions=None
        ),
    )
    got = record_of(lease)
    assert got == LeaseRecord("", 15, micro_time(AT), micro_time(AT), 0, "42")


# ------------------------------------------------------------------------------ names, settings


def test_one_lease_per_shard() -> None:
    assert lease_name(ObserverSettings()) == "ai-inference-observer"
    assert lease_name(ObserverSettings(shards=3, shard=2)) == "ai-inference-observer-2"


def test_identities_are_unique_per_process() -> None:
    assert default_identity() != default_identity()


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"leaseDurationSeconds": 10, "renewDeadlineSeconds": 10}, "renewDeadlineSeconds"),
        ({"leaseDurationSeconds": 15, "renewDeadlineSeconds": 10, "retryPeriodSeconds": 9}, "retryPeriodSeconds"),
    ],
)
def test_timings_that_would_allow_two_leaders_are_refused_with_the_field_named(
    values: dict[str, float], field: str
) -> None:
    with pytest.raises(ValidationError, match=field):
        LeaderElectionSettings.model_validate(values)


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AI_INFERENCE_OBSERVER__LEADERELECTION__ENABLED", "true")
    monkeypatch.setenv("AI_INFERENCE_OBSERVER__LEADERELECTION__LEASEDURATIONSECONDS", "6")
    monkeypatch.setenv("AI_INFERENCE_OBSERVER__LEADERELECTION__RENEWDEADLINESECONDS", "4")
    monkeypatch.setenv("AI_INFERENCE_OBSERVER__LEADERELECTION__RETRYPERIODSECONDS", "1")
    election = ModuleSettings().observer.leaderElection
    assert (election.enabled, election.leaseDurationSeconds, election.renewDeadlineSeconds) == (True, 6, 4.0)
