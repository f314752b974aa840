"""Capacity preemption between orders of one device class: pure decisions, no I/O, no clock.

Vocabulary (docs/preemption.md):

* **member** — an autoscaled order on the device class, as it last reported itself.
* **recipient** — a member whose autoscaler wants replicas the scheduler cannot place
  (``desired > placed`` with unschedulable pods). When it first becomes one, its *base* is
  recorded: the capacity it held without help (``placed x unit``). From then on it is owed
  ``desired x unit - base`` units of capacity, whatever its pods are doing at the moment; this is
  what keeps a decision from counting the same shortage twice while pods are still moving.
* **donor** — a member with a strictly lower priority than the recipient, running above its
  minReplicas. Taking a replica from it lowers its replica *ceiling* (the HPA's maxReplicas) by
  one below what it runs: the HPA then scales it down and the scheduler places the recipient's
  pending pod on what was freed.
* **hold** — replicas taken from one donor for one recipient. A donor's ceiling is released
  replica by replica as its holds go; with no hold left the ceiling is gone (the class's
  maxReplicas applies again).

Capacity is counted in units of share percent x device count, so a 50 % replica is worth two
25 % ones. Devices are not tracked one by one (that is the planner's job): freeing units on
one device class is taken as room for the same units there.

One decision (:func:`decide`) takes the members, the ledger of the previous decision and the
capacity that came back since (:func:`freed_units`), and returns the next ledger. In order:

1. holds that became invalid go (member gone, priorities no longer strictly ordered, a donor
   below its minReplicas);
2. new recipients are recorded, recipients whose demand fell to their base (and whose pods no
   longer wait) are released;
3. capacity that came back is credited to recipients, highest priority first (their pending pods
   take it, or it stands in for held replicas, which are then given back);
4. per recipient, highest priority first: surplus holds are given back, then a deficit is taken
   from the lowest-priority donors first, never below a donor's minReplicas, and trimmed so that
   no single held replica could be given back without falling short;
5. a recipient still short, or a held donor whose autoscaler wants more than its ceiling, is
   blocked (the order goes Degraded with ScaleUpBlocked).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from inference_api.preemption import MemberReport


class _Model(BaseModel):
    # These travel in the preemption workflow's state: a rollback to a release that does not know a
    # field added later must still decode it (docs/upgrade.md, rule 3), so unknown fields are dropped.
    model_config = ConfigDict(extra="ignore", frozen=True)


class Member(_Model):
    key: str
    priority: int = 0
    minReplicas: int = Field(default=1, ge=0)
    maxReplicas: int = Field(default=1, ge=1)
    unit: int = Field(default=100, ge=1)
    desired: int = Field(default=0, ge=0)
    placed: int = Field(default=0, ge=0)
    unschedulable: int = Field(default=0, ge=0)
    # The autoscaler wants more than its current maxReplicas.
    limited: bool = False

    @property
    def need(self) -> int:
        """Replicas wanted that cannot be placed now (0 while pods are merely starting)."""
        return max(0, self.desired - self.placed) if self.unschedulable > 0 else 0


class Hold(_Model):
    donor: str
    recipient: str
    replicas: int = Field(ge=1)


class Recipient(_Model):
    key: str
    baseUnits: int = Field(ge=0)


class Ledger(_Model):
    """Everything a decision remembers: carried in the preemption workflow's state."""

    holds: tuple[Hold, ...] = ()
    recipients: tuple[Recipient, ...] = ()
    # Donor -> its lowered maxReplicas. A donor is here exactly while it has holds.
    ceilings: Mapping[str, int] = Field(default_factory=dict)

    def held_from(self, donor: str) -> int:
        return sum(h.replicas for h in self.holds if h.donor == donor)

    def held_for(self, recipient: str) -> int:
        return sum(h.replicas for h in self.holds if h.recipient == recipient)

    def base_of(self, recipient: str) -> int | None:
        return next((r.baseUnits for r in self.recipients if r.key == recipient), None)


class Decision(_Model):
    ledger: Ledger
    # Donors whose ceiling changed: the new ceiling, or None when it is lifted.
    ceilings: Mapping[str, int | None] = Field(default_factory=dict)
    # Members that cannot grow, with the reason in words; every blocked member, not only new ones.
    blocked: Mapping[str, str] = Field(default_factory=dict)
    # Recipients that took replicas in this decision (one preemption each).
    preempted: tuple[str, ...] = ()
    taken: tuple[Hold, ...] = ()
    released: tuple[Hold, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.ceilings or self.taken or self.released)


def member_from_report(report: MemberReport) -> Member:
    return Member(
        key=report.workflowId,
        priority=report.priority,
        minReplicas=report.minReplicas,
        maxReplicas=max(1, report.maxReplicas),
        unit=max(1, report.unit),
        desired=max(0, report.desired),
        placed=max(0, report.placed),
        unschedulable=max(0, report.unschedulable),
        limited=report.limited,
    )


def effective_replicas(member: Member, ceiling: int | None) -> int:
    """Replicas a member holds capacity for: what is placed, capped by a lowered ceiling."""
    return member.placed if ceiling is None else min(member.placed, ceiling)


def freed_units(
    previous: Member | None,
    current: Member | None,
    ledger: Ledger,
) -> int:
    """Capacity that came back between two reports of one member (``current`` None: it left).

    A recipient's own changes are not counted: its demand is tracked through its base, except
    that a departing recipient frees its base. A donor shrinking to its ceiling is not counted
    either: that capacity was moved to a recipient, not returned.
    """
    if previous is None:
        return 0
    base = ledger.base_of(previous.key)
    if base is not None:
        return base if current is None else 0
    ceiling = ledger.ceilings.get(previous.key)
    before = effective_replicas(previous, ceiling) * previous.unit
    if current is None:
        return before
    after = effective_replicas(current, ceiling) * current.unit
    return max(0, before - after)


class _Book:
    """Mutable working copy of a ledger for one decision."""

    def __init__(self, members: Mapping[str, Member], ledger: Ledger) -> None:
        self.members = members
        self.holds: dict[tuple[str, str], int] = {}
        for hold in ledger.holds:
            key = (hold.donor, hold.recipient)
            self.holds[key] = self.holds.get(key, 0) + hold.replicas
        self.ceilings: dict[str, int] = dict(ledger.ceilings)
        self.bases: dict[str, int] = {r.key: r.baseUnits for r in ledger.recipients}
        self.taken: dict[tuple[str, str], int] = {}
        self.released: dict[tuple[str, str], int] = {}

    # -- reading
    def held_from(self, donor: str) -> int:
        return sum(n for (d, _), n in self.holds.items() if d == donor)

    def holds_for(self, recipient: str) -> list[tuple[str, int]]:
        return [(d, n) for (d, r), n in self.holds.items() if r == recipient and n > 0]

    def held_units_for(self, recipient: str) -> int:
        return sum(n * self.members[d].unit for d, n in self.holds_for(recipient) if d in self.members)

    def available(self, donor: Member) -> int:
        """Replicas a donor can still give: what it runs (under its ceiling) above its minReplicas."""
        return max(0, effective_replicas(donor, self.ceilings.get(donor.key)) - donor.minReplicas)

    # -- writing
    def release(self, donor: str, recipient: str, replicas: int) -> None:
        key = (donor, recipient)
        replicas = min(replicas, self.holds.get(key, 0))
        if replicas <= 0:
            return
        self.holds[key] -= replicas
        if self.holds[key] == 0:
            del self.holds[key]
        self.released[key] = self.released.get(key, 0) + replicas
        if donor in self.ceilings:
            if self.held_from(donor) == 0:
                del self.ceilings[donor]
            else:
                self.ceilings[donor] += replicas

    def drop_all(self, recipient: str | None = None, donor: str | None = None) -> None:
        for d, r in list(self.holds):
            if (recipient is None or r == recipient) and (donor is None or d == donor):
                self.release(d, r, self.holds[(d, r)])

    def take(self, donor: Member, recipient: str, replicas: int) -> None:
        ceiling = effective_replicas(donor, self.ceilings.get(donor.key)) - replicas
        self.ceilings[donor.key] = ceiling
        key = (donor.key, recipient)
        self.holds[key] = self.holds.get(key, 0) + replicas
        self.taken[key] = self.taken.get(key, 0) + replicas

    def ledger(self) -> Ledger:
        return Ledger(
            holds=tuple(Hold(donor=d, recipient=r, replicas=n) for (d, r), n in sorted(self.holds.items()) if n > 0),
            recipients=tuple(Recipient(key=k, baseUnits=b) for k, b in sorted(self.bases.items())),
            ceilings=dict(sorted(self.ceilings.items())),
        )


def _by_priority_desc(members: Mapping[str, Member], keys: list[str]) -> list[str]:
    return sorted(keys, key=lambda k: (-members[k].priority, k))


def required_units(member: Member, base: int) -> int:
    return max(0, member.desired * member.unit - base)


def _trim(book: _Book, recipient: str, required: int) -> None:
    """Give back held replicas while the rest still covers ``required``: highest-priority donors first."""
    members = book.members
    held = book.held_units_for(recipient)
    donors = sorted(book.holds_for(recipient), key=lambda dn: (-members[dn[0]].priority, dn[0]))
    for donor, count in donors:
        unit = members[donor].unit
        give = min(count, (held - required) // unit) if held > required else 0
        if give > 0:
            book.release(donor, recipient, give)
            held -= give * unit


def _release_satisfied(book: _Book) -> None:
    """A recipient whose demand is back at its base (or that left) is one no longer: its holds go.

    One whose pods still wait stays (with nothing owed): dropping it would make it a recipient
    again at the next report, with a base that no longer counts what was credited to it.
    """
    for key in list(book.bases):
        found = book.members.get(key)
        if found is None or (found.desired * found.unit <= book.bases[key] and found.need == 0):
            book.drop_all(recipient=key)
            del book.bases[key]


def _take_deficit(book: _Book, recipient: Member, required: int) -> bool:
    """Take what ``recipient`` is short of, lowest-priority donors first; True when anything was taken."""
    held = book.held_units_for(recipient.key)
    if held >= required:
        return False
    took = False
    donors = sorted(
        (m for m in book.members.values() if m.priority < recipient.priority),
        key=lambda m: (m.priority, m.key),
    )
    for donor in donors:
        while held < required and book.available(donor) > 0:
            book.take(donor, recipient.key, 1)
            held += donor.unit
            took = True
        if held >= required:
            break
    if took:
        _trim(book, recipient.key, required)
    return took


def decide(members: Mapping[str, Member], ledger: Ledger, freed: int = 0) -> Decision:
    """The next ledger for these members; see the module docstring for the steps."""
    book = _Book(members, ledger)

    # 1. Invalid holds go: a member gone, priorities no longer strictly ordered.
    for giver, taker in list(book.holds):
        if giver not in members or taker not in members or members[giver].priority >= members[taker].priority:
            book.release(giver, taker, book.holds[(giver, taker)])
    for giver in list(book.ceilings):
        if giver not in members:
            book.drop_all(donor=giver)
            book.ceilings.pop(giver, None)
            continue
        # A raised minReplicas: give back (lowest-priority recipients first) until the floor holds.
        floor = members[giver].minReplicas
        for _, taker in sorted((members[t].priority, t) for (g, t) in book.holds if g == giver):
            if giver not in book.ceilings or book.ceilings[giver] >= floor:
                break
            book.release(giver, taker, min(book.holds[(giver, taker)], floor - book.ceilings[giver]))

    # 2. Recipients come and go.
    for key in sorted(members):
        member = members[key]
        if member.need > 0 and key not in book.bases:
            book.bases[key] = member.placed * member.unit
    _release_satisfied(book)

    # 3. Capacity that came back stands in for what a recipient is owed.
    for key in _by_priority_desc(members, list(book.bases)):
        if freed <= 0:
            break
        owed = required_units(members[key], book.bases[key])
        credit = min(freed, owed)
        book.bases[key] += credit
        freed -= credit
    _release_satisfied(book)
    recipients = _by_priority_desc(members, list(book.bases))

    # 4. Surplus goes back first (so it can be taken again below), then each recipient, highest
    # priority first, takes its deficit from the lowest-priority donors. A trim after a take can
    # free a donor replica a recipient before it is short of, hence the passes until nothing moves.
    for key in recipients:
        _trim(book, key, required_units(members[key], book.bases[key]))
    for _ in range(len(members) + 1):
        moved = False
        for key in recipients:
            moved = _take_deficit(book, members[key], required_units(members[key], book.bases[key])) or moved
        if not moved:
            break
    blocked: dict[str, str] = {}
    for key in recipients:
        recipient = members[key]
        required = required_units(recipient, book.bases[key])
        held = book.held_units_for(key)
        if held < required:
            short = -(-(required - held) // recipient.unit)
            blocked[key] = (
                f"the autoscaler wants {recipient.desired} replica(s), {recipient.placed} placed; "
                f"{short} more cannot be placed and no lower-priority order on this device class "
                "runs above its minReplicas"
            )

    # 5. A held donor that wants to grow is blocked by the preemption itself.
    for held_key, ceiling in book.ceilings.items():
        held_member = members[held_key]
        if held_member.limited and ceiling < held_member.maxReplicas and held_key not in blocked:
            blocked[held_key] = (
                f"held at {ceiling} replica(s) (class maxReplicas {held_member.maxReplicas}) to give capacity "
                "to higher-priority orders; the autoscaler wants more"
            )

    new = book.ledger()
    changes: dict[str, int | None] = {}
    for changed in sorted(set(ledger.ceilings) | set(new.ceilings)):
        before, after = ledger.ceilings.get(changed), new.ceilings.get(changed)
        if before != after:
            changes[changed] = after
    # Net changes only: a replica released and taken again in one decision is neither.
    taken, released = _net(book.taken, book.released)
    preempted = [k for k in recipients if any(h.recipient == k for h in taken)]
    return Decision(
        ledger=new,
        ceilings=changes,
        blocked=dict(sorted(blocked.items())),
        preempted=tuple(preempted),
        taken=taken,
        released=released,
    )


def _net(
    taken: Mapping[tuple[str, str], int], released: Mapping[tuple[str, str], int]
) -> tuple[tuple[Hold, ...], tuple[Hold, ...]]:
    out_taken: list[Hold] = []
    out_released: list[Hold] = []
    for key in sorted(set(taken) | set(released)):
        net = taken.get(key, 0) - released.get(key, 0)
        if net > 0:
            out_taken.append(Hold(donor=key[0], recipient=key[1], replicas=net))
        elif net < 0:
            out_released.append(Hold(donor=key[0], recipient=key[1], replicas=-net))
    return tuple(out_taken), tuple(out_released)


def held_replicas(ledger: Ledger) -> dict[str, int]:
    """Replicas withheld from each donor (the ``ai_inference_donor_held_replicas`` gauge)."""
    out: dict[str, int] = {}
    for hold in ledger.holds:
        out[hold.donor] = out.get(hold.donor, 0) + hold.replicas
    return dict(sorted(out.items()))
