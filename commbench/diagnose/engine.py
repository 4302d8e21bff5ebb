"""Dumps in, a verdict out: where each process group's progress stopped, and why. Pure and torch-free.

Per group, over its members' collectives (a track per member: sequence ids, what must agree, whether it
completed):
1. The first sequence id at which members that recorded it hold different operations is a MISMATCH
   (one matrix of members x sequence ids, compared column by column in numpy). The majority is taken to
   be right; a tie names every side.
2. Otherwise the furthest sequence id any member reached is where the group stopped. Members whose last
   collective on the group is earlier are BEHIND, unless they are the majority: then the few that went
   on issued a collective the others never did (a MISMATCH, 'extra'). A behind member whose last
   collective came from another call site than the others' at the same sequence id skipped one
   ('skipped'). Where behind members are in flight in another group, the finding says so: that group's
   own finding is the cause.
   Behind members still in flight in their last collective, which the others completed and went past,
   are COMMUNICATION: what they needed of it never arrived (where only some behind members are, the
   BEHIND finding names them so, beside where the others are).
3. Members with no dump make the group MISSING; every member in flight at the same collective and none
   completed is COMMUNICATION.
Sends and receives (recorded by NCCL, not gloo) in flight on two ranks toward each other, both
receiving or both sending, are P2P.

"Completed" is the backend's word: NCCL's entry state; gloo's entries stay 'scheduled', and one is done
when gloo retired it. A collective before a completed one on the same group completed too (both backends
complete a group's work in order; gloo retires asynchronously, so a dump can catch an entry unretired).
"""

from collections import Counter
from dataclasses import dataclass
from functools import cached_property

from commbench.diagnose import verdict as classes
from commbench.diagnose.loading import Job
from commbench.diagnose.reading import STATE_CODES, Signature
from commbench.diagnose.tracks import Track, Tracks, describe_stack
from commbench.diagnose.verdict import (
    Finding,
    GroupReport,
    Operation,
    RankState,
    Verdict,
    group_label,
    ranks_text,
)

STATE_NAMES = {code: name for name, code in STATE_CODES.items()}
WORLD_GROUP = "0"  # torch names the default group '0'
P2P_UNRECORDED = {"gloo"}  # backends whose Flight Recorder holds no send or recv (torch 2.11-2.14)


def diagnose(job: Job, world_size: int | None = None, hosts: dict[int, str] | None = None) -> Verdict:
    """The verdict on ``job``'s dumps; ``world_size`` where the caller knows more ranks than the dumps
    show; ``hosts`` (rank -> host name) where known (a dump does not record it; a commbench run does,
    for every rank, so it also gives the world size)."""
    tracks = Tracks(job)
    hosts = hosts or {}
    world = _world_size(job, tracks, max([world_size or 0, *(rank + 1 for rank in hosts)]))
    missing = tuple(rank for rank in range(world) if rank not in job.dumps)
    context = _Context(job, tracks, world, missing, hosts)
    reports = [context.examine(group_id) for group_id in range(len(job.groups))]
    findings = _crossed([report.finding for report in reports if report.finding is not None], reports)
    findings += context.p2p_findings()
    in_groups = {rank for report in reports for rank in report.members}
    if any(rank not in in_groups for rank in missing):  # no group names them: the job's finding does
        findings.append(Finding(classes.MISSING, WORLD_GROUP, missing,
                                f"{ranks_text(list(missing))} left no dump: dead or unreachable"))
    findings.sort(key=lambda item: (bool(item.elsewhere), classes.CLASS_ORDER.index(item.kind)))
    backends = sorted({dump.backend for dump in job.dumps.values() if dump.backend})
    versions = sorted({dump.version for dump in job.dumps.values()})
    return Verdict(job.source, "/".join(backends) or "?", "/".join(versions), tuple(job.ranks), world,
                   missing, reports, findings, context.notes())


def _crossed(findings: list[Finding], reports: list[GroupReport]) -> list[Finding]:
    """``findings`` with each pair of groups whose behind ranks are in flight in the other (each waits
    where the other has not come: their collectives on the two groups are issued in different orders)
    told as one MISMATCH ('order') instead of two findings that point at each other."""
    held = {item.group: item for item in findings if item.kind == classes.BEHIND and item.elsewhere}
    stopped = {group_label(report.name, report.desc): report.stopped_at for report in reports}
    crossed: dict[str, Finding] = {}  # the first group's label -> the finding standing for the pair
    pairs = [(label, item, held[item.elsewhere]) for label, item in held.items()
             if item.elsewhere in held and held[item.elsewhere].elsewhere == label and label < item.elsewhere]
    for label, item, other in pairs:
        ranks = tuple(sorted({*item.culprits, *other.culprits}))
        crossed[label] = Finding(
            classes.MISMATCH, label, ranks,
            f"{ranks_text(list(ranks))} wait on each other across groups {label} and {other.group}: "
            f"{ranks_text(list(other.culprits))} in {stopped[label].describe()} of {label}, which "
            f"{ranks_text(list(item.culprits))} never entered; {ranks_text(list(item.culprits))} in "
            f"{stopped[other.group].describe()} of {other.group}, which {ranks_text(list(other.culprits))} "
            "never entered: they issue their collectives on these groups in different orders",
            classes.ORDER, item.seq)
    paired = {label for label in crossed} | {held[label].elsewhere for label in crossed}
    return [crossed.get(item.group, item) for item in findings
            if item.group not in paired or item.group in crossed]


def _world_size(job: Job, tracks: Tracks, asked: int | None) -> int:
    """The largest of: the ranks seen, the members the dumps list, the world group's size as its
    all_gathers and reduce_scatters imply it, and what the caller says."""
    known = [rank + 1 for rank in job.dumps]
    known += [max(members) + 1 for dump in job.dumps.values() for members in dump.members.values()]
    world = tracks.group_id(WORLD_GROUP)
    if world is not None:
        known.append(tracks.implied_size(world))
    return max([*known, asked or 0, 1])


@dataclass
class _Context:
    job: Job
    tracks: Tracks
    world: int
    missing: tuple[int, ...]
    hosts: dict[int, str]

    @cached_property
    def listings(self) -> dict[str, dict[int, tuple[int, ...]]]:
        """Group name -> rank -> the members that rank's dump lists for it, gathered in one pass over
        the dumps (one pass per group would take groups x ranks: a second at 4,096 ranks)."""
        found: dict[str, dict[int, tuple[int, ...]]] = {}
        for rank, dump in self.job.dumps.items():
            for name, members in dump.members.items():
                found.setdefault(name, {})[rank] = members
        return found

    def members(self, group_id: int) -> tuple[tuple[int, ...], bool, list[int]]:
        """(members, whether the dumps list them, ranks whose listing disagrees with the others')."""
        name = self.job.groups[group_id][0]
        listings = self.listings.get(name, {})
        if listings:
            common, _ = Counter(listings.values()).most_common(1)[0]
            return common, True, sorted(rank for rank, listed in listings.items() if listed != common)
        recorded = set(self.tracks.by_group[group_id])
        if name == WORLD_GROUP:
            recorded |= set(range(self.world))
        return tuple(sorted(recorded)), False, []

    def examine(self, group_id: int) -> GroupReport:
        name, desc = self.job.groups[group_id]
        members, known, disagree = self.members(group_id)
        tracks = self.tracks.by_group[group_id]
        present = [rank for rank in members if rank in self.job.dumps]
        unnamed = 0 if known else max(0, self.tracks.implied_size(group_id) - len(members))
        label = group_label(name, desc)
        judge = _Judge(self, group_id, label, tracks, present)
        finding = None
        if disagree:
            finding = self.membership(label, name, disagree)
        finding = finding or judge.divergence() or judge.progress()
        absent = [rank for rank in members if rank not in self.job.dumps]
        if finding is None and (absent or unnamed):
            finding = judge.missing(absent, unnamed, self.held_in_one_group(present, group_id))
        if finding is None:
            finding = judge.stalled(known)
        return GroupReport(name, desc, members, known, judge.stopped_at(), judge.states(absent), finding,
                           unnamed)

    def membership(self, label: str, name: str, disagree: list[int]) -> Finding:
        listed = {rank: self.job.dumps[rank].members[name] for rank in disagree}
        text = "; ".join(f"rank {rank} lists {ranks_text(list(ranks))}" for rank, ranks in listed.items())
        return Finding(classes.MEMBERSHIP, label, tuple(disagree),
                       f"{ranks_text(disagree)} {'disagrees' if len(disagree) == 1 else 'disagree'} with the "
                       f"other members on who is in group {label} "
                       f"({text}): the group was created with different ranks on different ranks")

    def operation(self, rank: int, position: int) -> Operation:
        """The entry at ``position`` of ``rank``'s dump, as the verdict shows it."""
        dump = self.job.dumps[rank]
        signature = self.job.signatures[dump.signature[position]]
        done = bool(self.tracks.done[rank][position])
        status = "completed" if done else f"in flight ({STATE_NAMES[int(dump.state[position])]})"
        stack = dump.stack[position]
        where = describe_stack(self.job.stacks[stack]) if stack >= 0 else ""
        return Operation(int(dump.seq[position]), _op_name(signature), signature.raw, signature.sizes(),
                         signature.dtype(), status, where)

    @property
    def unrecorded_p2p(self) -> str:
        """The backends among the dumps' whose recorder holds no send or recv ('' when none)."""
        return "/".join(sorted({dump.backend for dump in self.job.dumps.values()} & P2P_UNRECORDED))

    def elsewhere(self, rank: int, group_id: int) -> str:
        """Where ``rank`` is held up outside ``group_id``: its last entry, when in flight on another group."""
        dump = self.job.dumps[rank]
        if not dump.entries:
            return ""
        last = dump.entries - 1
        other = int(dump.group[last])
        if other == group_id or self.tracks.done[rank][last]:
            return ""
        return group_label(*self.job.groups[other])

    def held_in_one_group(self, ranks: list[int], group_id: int) -> str:
        """The group every one of ``ranks`` is in flight in, outside ``group_id`` ('' when none is)."""
        places = {self.elsewhere(rank, group_id) for rank in ranks}
        return places.pop() if len(places) == 1 else ""

    def host(self, ranks: list[int]) -> str:
        names = sorted({self.hosts[rank] for rank in ranks if rank in self.hosts})
        return f" (hosts {', '.join(names)})" if names else ""

    def p2p_findings(self) -> list[Finding]:
        """Pairs whose in-flight sends or receives wait on each other (both receive, or both send)."""
        waits: dict[tuple[int, int], tuple[str, int, Operation]] = {}
        for rank, pending in self.tracks.pending_p2p.items():
            for position in pending:
                group_id, peer, op = self.tracks.peer_of(rank, int(position))
                if peer is not None:
                    waits[(rank, peer)] = (op, group_id, self.operation(rank, int(position)))
        found = []
        for (rank, peer), (op, group_id, operation) in sorted(waits.items()):
            if rank < peer and (peer, rank) in waits and waits[(peer, rank)][0] == op:
                label = group_label(*self.job.groups[group_id])
                other = waits[(peer, rank)][2]
                matching = "send" if op == "recv" else "recv"
                found.append(Finding(
                    classes.P2P, label, (rank, peer),
                    f"ranks {rank} and {peer} wait on each other: each {op}s ({operation.describe()}; "
                    f"{other.describe()}) and neither issued the matching {matching}",
                    seq=operation.seq, sides=(((rank,), operation), ((peer,), other))))
        return found

    def notes(self) -> list[str]:
        found = []
        if self.unrecorded_p2p:
            found.append(f"{self.unrecorded_p2p} records no send or recv: a rank waiting in one shows as "
                         "behind in its groups")
        if self.missing:
            found.append(f"no dump for {ranks_text(list(self.missing))} of {self.world}")
        return found


def _op_name(signature: Signature) -> str:
    if signature.peer is None:
        return signature.op
    return f"{signature.op} {'to' if signature.op == 'send' else 'from'} {signature.peer}"


class _Judge:
    """One group's tracks, judged: divergence first, then progress, then who is missing."""

    def __init__(self, context: _Context, group_id: int, label: str, tracks: dict[int, Track],
                 present: list[int]) -> None:
        self.context, self.group_id, self.label = context, group_id, label
        self.tracks = tracks
        self.present = present  # members with a dump, whether or not they recorded the group
        self.last = {rank: int(track.seq[-1]) for rank, track in tracks.items()}
        self.stop = max(self.last.values(), default=None)

    def at(self, rank: int, seq: int) -> int | None:
        """The position in ``rank``'s dump of its collective ``seq`` on this group."""
        track = self.tracks.get(rank)
        return None if track is None else track.position_of(seq)

    def operation_at(self, rank: int, seq: int) -> Operation | None:
        position = self.at(rank, seq)
        return None if position is None else self.context.operation(rank, position)

    def stopped_at(self) -> Operation | None:
        if self.stop is None:
            return None
        furthest = [rank for rank, last in self.last.items() if last == self.stop]
        return self.operation_at(furthest[0], self.stop)

    def states(self, absent: list[int]) -> tuple[RankState, ...]:
        found: dict[tuple, list[int]] = {}
        for rank in self.present:
            last = self.operation_at(rank, self.last[rank]) if rank in self.last else None
            found.setdefault((last, self.context.elsewhere(rank, self.group_id)), []).append(rank)
        states = [RankState(tuple(ranks), last, f"in flight in group {note}" if note else "")
                  for (last, note), ranks in found.items()]
        if absent:
            states.append(RankState(tuple(absent), None, "no dump"))
        return tuple(sorted(states, key=lambda state: state.ranks[0]))

    def divergence(self) -> Finding | None:
        seq = Tracks.first_divergence(list(self.tracks.values()))
        if seq is None:
            return None
        sides: dict[int, list[int]] = {}
        for rank, track in self.tracks.items():
            key = track.key_at(seq)
            if key is not None:
                sides.setdefault(key, []).append(rank)
        ranked = sorted(sides.values(), key=len, reverse=True)
        majority = ranked[0] if len(ranked[0]) > len(ranked[1]) else []
        culprits = sorted(rank for ranks in ranked if ranks is not majority for rank in ranks)
        shown = tuple((tuple(ranks), self.operation_at(ranks[0], seq)) for ranks in ranked)
        culprit = culprits[0] if majority else ranked[1][0]
        reference = majority[0] if majority else ranked[0][0]
        detail = self._difference(culprit, reference, seq, majority)
        return Finding(classes.MISMATCH, self.label, tuple(culprits),
                       self._divergence_reading(detail, culprits, ranked, majority, seq), detail, seq, shown)

    def _difference(self, culprit: int, reference: int, seq: int, majority: list[int]) -> str:
        mine, theirs = self.tracks[culprit], self.tracks[reference]
        if majority and mine.key_at(seq) is not None and mine.key_at(seq) == theirs.key_at(seq + 1):
            return classes.SKIPPED
        if majority and mine.key_at(seq + 1) is not None and mine.key_at(seq + 1) == theirs.key_at(seq):
            return classes.EXTRA
        one, other = (self.context.job.signatures[self.context.job.dumps[rank].signature[self.at(rank, seq)]]
                      for rank in (culprit, reference))
        if one.op != other.op or one.raw != other.raw or one.peer != other.peer:
            return classes.DIFFERENT_COLLECTIVE
        if one.inputs != other.inputs or one.outputs != other.outputs:
            return classes.DIFFERENT_SIZE
        return classes.DIFFERENT_DTYPE

    def _divergence_reading(self, detail: str, culprits: list[int], ranked: list[list[int]],
                            majority: list[int], seq: int) -> str:
        def issued(ranks: list[int]) -> str:
            operation = self.operation_at(ranks[0], seq)
            return f"{ranks_text(ranks)} {operation.op} [{operation.sizes}] {operation.dtype}"

        where = f"at #{seq} of group {self.label}"
        if not majority:
            return (f"the members disagree {where} with no majority ({'; '.join(map(issued, ranked))}): a "
                    "code path that differs by rank; the stacks show where each side issued it")
        others = f"{ranks_text(majority)} {'issue' if len(majority) > 1 else 'issues'}"
        if detail == classes.SKIPPED:
            whose = "its" if len(culprits) == 1 else "their"
            return (f"{ranks_text(culprits)} skipped a collective {where}: {whose} #{seq} is the one "
                    f"{others} next")
        if detail == classes.EXTRA:
            return f"{ranks_text(culprits)} issued a collective {where} that {ranks_text(majority)} never did"
        # each minority side with what it issued (several can differ from the majority, each its own way),
        # by their first rank (the sides are disjoint lists of ranks in order)
        minorities = sorted(ranks for ranks in ranked if ranks is not majority)
        return (f"different {detail} {where}: {'; '.join(map(issued, minorities))} where "
                f"{issued(majority)}: a code path that differs by rank")

    def progress(self) -> Finding | None:
        if self.stop is None:
            return None
        behind = [rank for rank in self.present if self.last.get(rank, -1) < self.stop]
        ahead = [rank for rank in self.present if self.last.get(rank) == self.stop]
        if not behind:
            return None
        skipped = self._skipped_by_call_site(behind, ahead)
        if skipped is not None:
            return skipped
        inside = [rank for rank in behind if rank in self.last and not self.done_at(rank, self.last[rank])]
        if inside and len(inside) == len(behind):
            return self._stuck_inside(inside, ahead)
        held_elsewhere = any(self.context.elsewhere(rank, self.group_id) for rank in behind)
        # a behind rank still in an earlier collective did not choose to stop: not the few's extra one
        if len(behind) > len(ahead) and not held_elsewhere and not inside:
            stopped = self.operation_at(ahead[0], self.stop)
            return Finding(classes.MISMATCH, self.label, tuple(ahead),
                           f"{ranks_text(ahead)} issued {stopped.describe()} in group {self.label}, which "
                           f"{ranks_text(behind)} never reached: a collective only some ranks issue",
                           classes.EXTRA, self.stop)
        return self._behind(behind, ahead, inside)

    def done_at(self, rank: int, seq: int) -> bool:
        position = self.at(rank, seq)
        return position is not None and bool(self.context.tracks.done[rank][position])

    def _stuck_inside(self, inside: list[int], ahead: list[int]) -> Finding:
        """Members still in a collective the others went past, completed or left in flight (NCCL, and
        async ops, start the next before the last completes): every member entered it, so what they
        needed of it never arrived."""
        first = self._earliest(inside)
        seq = self.last[first]
        # left in flight where its entry says so; a rank whose recorder dropped the entry went past it
        left = [rank for rank in ahead if self.at(rank, seq) is not None and not self.done_at(rank, seq)]
        completed = [rank for rank in ahead if rank not in left]
        went = []
        if completed:
            went.append(f"{ranks_text(completed)} completed")
        if left:
            went.append(f"{ranks_text(left)} left in flight")
        stuck = self.operation_at(first, seq)
        return Finding(classes.COMMUNICATION, self.label, tuple(inside),
                       f"{ranks_text(inside)} still in {stuck.describe()} of group {self.label}, which "
                       f"{' and '.join(went)} and went past{self.context.host(inside)}: what they needed of "
                       "it never arrived: the communication itself; look at the fabric between them "
                       "(commbench fabric)", seq=seq)

    def _earliest(self, inside: list[int]) -> int:
        """Of the members still inside a collective, the one in the earliest."""
        return min(inside, key=self.last.__getitem__)

    def _skipped_by_call_site(self, behind: list[int], ahead: list[int]) -> Finding | None:
        """A behind rank whose last collective was issued from another line than the others' collective
        at the same sequence id: it skipped the collective they issued there."""
        for rank in behind:
            if rank not in self.last:
                continue
            seq = self.last[rank]
            mine = self.operation_at(rank, seq)
            theirs = [found for other in ahead if (found := self.operation_at(other, seq)) is not None]
            if mine is None or not theirs or not mine.stack or theirs[0].stack in ("", mine.stack):
                continue
            theirs = theirs[0]
            return Finding(classes.MISMATCH, self.label, (rank,),
                           f"rank {rank} skipped a collective in group {self.label}: its #{seq} came from "
                           f"{mine.stack} where {ranks_text(ahead)} issued #{seq} from {theirs.stack}, and "
                           f"{ranks_text(ahead)} went on to #{self.stop}", classes.SKIPPED, seq,
                           (((rank,), mine), (tuple(ahead), theirs)))
        return None

    def _behind(self, behind: list[int], ahead: list[int], inside: list[int]) -> Finding:
        """Members that never entered the collective the group stopped at, each told by where it is:
        still in an earlier one of this group (``inside``), in flight in another group, or in none."""
        stopped = self.operation_at(ahead[0], self.stop)
        places: dict[str, list[int]] = {}  # where each behind rank not inside is held: a group's label, or ''
        for rank in behind:
            if rank not in inside:
                places.setdefault(self.context.elsewhere(rank, self.group_id), []).append(rank)
        idle = "in no collective the recorder holds: busy outside communication"
        if self.context.unrecorded_p2p:
            idle += f", or in a send or recv ({self.context.unrecorded_p2p} records none)"
        held = sorted(label for label in places if label)
        # held in other groups, each of them: those groups' findings are the cause
        elsewhere = ", ".join(held) if "" not in places and not inside else ""
        if len(places) == 1 and not inside:
            cause = f"in flight in group {elsewhere} (its finding says why)" if elsewhere else \
                f"{idle}; look at their stacks"
        else:  # held in different places: say where each is
            parts = [self._still_in(inside)] if inside else []
            parts += [f"{ranks_text(places[label])} in flight in group {label}" for label in held]
            if "" in places:
                parts.append(f"{ranks_text(places[''])} {idle}")
            cause = "; ".join(parts) + (" (their findings say why)" if elsewhere else
                                        "; look at their stacks")
        return Finding(classes.BEHIND, self.label, tuple(behind),
                       f"{ranks_text(behind)} never entered {stopped.describe()} of group {self.label}, "
                       f"which {ranks_text(ahead)} entered{self.context.host(behind)}: {cause}",
                       seq=self.stop, elsewhere=elsewhere)

    def _still_in(self, inside: list[int]) -> str:
        """Members still in an earlier collective of this group: the communication where other members
        completed it; where none did (NCCL enqueues the next before the last completes), they wait in it,
        for members that never entered it among others."""
        first = self._earliest(inside)
        seq = self.last[first]
        where = f"{ranks_text(inside)} still in {self.operation_at(first, seq).describe()}"
        completed = [rank for rank in self.present if self.done_at(rank, seq)]
        if not completed:
            return f"{where}, which no member completed"
        them = "it" if len(inside) == 1 else "they"
        return (f"{where}, which {ranks_text(completed)} completed: what {them} needed of it never arrived"
                f"{self.context.host(inside)} (the communication itself: commbench fabric)")

    def missing(self, absent: list[int], unnamed: int, elsewhere: str) -> Finding:
        stopped = self.stopped_at()
        at = f"; the others reached {stopped.describe()} ({stopped.status})" if stopped else ""
        if elsewhere:  # and went on: where they wait now
            at += f" and are in flight in group {elsewhere}"
        if absent:
            return Finding(classes.MISSING, self.label, tuple(absent),
                           f"{ranks_text(absent)} of group {self.label} left no dump: dead or "
                           f"unreachable{at}", seq=self.stop, elsewhere=elsewhere)
        members = f"{unnamed} member{'s' if unnamed > 1 else ''}"
        if self.context.missing:
            return Finding(classes.MISSING, self.label, self.context.missing,
                           f"{members} of group {self.label} left no dump "
                           f"({ranks_text(list(self.context.missing))} left none): dead or unreachable{at}",
                           seq=self.stop, elsewhere=elsewhere)
        # every rank left a dump: the members not named are among those whose dump holds nothing of it
        quiet = [rank for rank in sorted(self.context.job.dumps) if rank not in self.tracks]
        among = (f": among {ranks_text(quiet)}, no entry of the group in their dump (dropped from the "
                 "recorder's buffer, or the group never reached)") if quiet else ""
        return Finding(classes.MISSING, self.label, (),
                       f"{members} of group {self.label} in no dump, though every rank left one{among}{at}",
                       seq=self.stop, elsewhere=elsewhere)

    def stalled(self, known: bool) -> Finding | None:
        if self.stop is None or not self.present:
            return None
        positions = {rank: self.at(rank, self.stop) for rank in self.present}
        if any(self.context.tracks.done[rank][position] for rank, position in positions.items()):
            return None
        stopped = self.operation_at(self.present[0], self.stop)
        if not known and len(self.tracks) == 1:  # a group of one never waits: others never came
            return Finding(
                classes.BEHIND, self.label, (),
                f"rank {self.present[0]} is the only rank whose dump records group {self.label}, and it "
                f"waits in {stopped.describe()}: the group's other members never entered it, or left no "
                "dump (the dumps do not list members: find them where the group is created)",
                seq=self.stop)
        return Finding(classes.COMMUNICATION, self.label, (),
                       f"every member of group {self.label} entered {stopped.describe()} and none completed "
                       f"it{self.context.host(self.present)}: the communication itself; look at the fabric "
                       "(commbench fabric) and the transport's logs", seq=self.stop)
