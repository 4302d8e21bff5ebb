"""diagnose's engine on the dumps of real gloo jobs that go wrong, captured once from
tests/diagnose_programs.py (`python -m tests.diagnose_programs capture tests/data/diagnose`; its README
says when and how), so that every verdict is judged in a fraction of a second: each group's members,
where it stopped and where each member is, and the findings in their order. What each job should give
follows from its program (which rank does what where); tests/test_diagnose.py runs the programs afresh.
"""

import json
import pickle
import re
import shutil
from pathlib import Path

import pytest

from commbench.cli import main
from commbench.diagnose import verdict as classes
from commbench.diagnose.command import diagnose_files
from commbench.diagnose.engine import diagnose
from commbench.diagnose.loading import load_job
from commbench.diagnose.verdict import Verdict
from commbench.errors import UsageError

CAPTURED = Path(__file__).parent / "data" / "diagnose"
DONE, WAITING = "completed", "in flight (scheduled)"


def verdict_of(job: str) -> Verdict:
    return diagnose_files([str(CAPTURED / job)])


def findings(verdict: Verdict) -> list[tuple]:
    return [(item.kind, item.group, item.culprits, item.detail, item.seq, item.elsewhere)
            for item in verdict.findings]


def groups(verdict: Verdict) -> dict[str, tuple]:
    """desc -> (members, listed, unnamed, (stopped seq, op), [(ranks, last seq, op, note)])."""
    return {report.desc: (report.members, report.members_known, report.unnamed_missing,
                          None if report.stopped_at is None else
                          (report.stopped_at.seq, report.stopped_at.op),
                          [(state.ranks, *((state.last.seq, state.last.op) if state.last else (None, None)),
                            state.note) for state in report.states])
            for report in verdict.groups}


def test_the_healthy_job_stops_nowhere_and_names_nobody():
    verdict = verdict_of("healthy")
    assert (verdict.backend, verdict.ranks, verdict.world_size, verdict.missing) == ("gloo", (0, 1), 2, ())
    assert verdict.findings == [] and not verdict.culprit_found
    # world: 3 x (all_reduce, coalesced all_reduce, coalescing manager's two), gather, barrier = #11
    assert groups(verdict) == {
        "default_pg": ((0, 1), False, 0, (11, "barrier"), [((0, 1), 11, "barrier", "")]),
        "pair": ((0, 1), False, 0, (1, "all_gather"), [((0, 1), 1, "all_gather", "")])}
    assert all(state.last.status == DONE for report in verdict.groups for state in report.states)


def test_three_desyncs_in_three_subgroups_are_named_by_their_own_groups():
    verdict = verdict_of("desyncs")
    assert (verdict.ranks, verdict.world_size, verdict.missing) == (tuple(range(8)), 8, ())
    # what the dumps say of themselves: torch 2.13's Flight Recorder writes format 2.10
    assert (verdict.source, verdict.backend, verdict.version) == (str(CAPTURED / "desyncs"), "gloo", "2.10")
    # the mismatches first, then who is behind; the world group's two all_reduces all completed
    assert findings(verdict) == [(classes.MISMATCH, "1:differs", (2,), classes.DIFFERENT_COLLECTIVE, 2, ""),
                                 (classes.MISMATCH, "3:skips", (7,), classes.SKIPPED, 2, ""),
                                 (classes.BEHIND, "2:stuck", (5,), "", 2, "")]
    assert groups(verdict) == {
        "default_pg": (tuple(range(8)), False, 0, (2, "all_reduce"), [
            ((0, 1, 2), 2, "all_reduce", "in flight in group 1:differs"),
            ((3, 4), 2, "all_reduce", "in flight in group 2:stuck"),
            ((5, 7), 2, "all_reduce", ""),  # 5 computes, 7 went past the group's end
            ((6,), 2, "all_reduce", "in flight in group 3:skips")]),
        "differs": ((0, 1, 2), False, 0, (2, "all_reduce"), [((0, 1), 2, "all_reduce", ""),
                                                            ((2,), 2, "all_gather", "")]),
        "stuck": ((3, 4, 5), False, 0, (2, "all_reduce"), [((3, 4), 2, "all_reduce", ""),
                                                          ((5,), 1, "all_reduce", "")]),
        "skips": ((6, 7), False, 0, (3, "all_reduce"), [((6,), 3, "all_reduce", ""),
                                                       ((7,), 2, "all_reduce", "")])}
    differs, skips, stuck = verdict.findings
    assert [(ranks, side.op, side.recorded, side.sizes, side.dtype) for ranks, side in differs.sides] == [
        ((0, 1), "all_reduce", "gloo:all_reduce", "4", "Float"),
        ((2,), "all_gather", "gloo:all_gather", "4 -> 3x4", "Float")]
    # a dump with stacks names where each operation was issued; one without names none
    assert all(state.last.stack.startswith("diagnose_programs.py:") for report in verdict.groups
               for state in report.states)
    assert {state.last.stack for report in verdict_of("stalls").groups for state in report.states
            if state.last} == {""}
    assert [ranks for ranks, _ in skips.sides] == [(7,), (6,)]  # the culprit's side first
    mine, theirs = (side for _, side in skips.sides)
    assert mine.stack != theirs.stack and mine.stack.startswith("diagnose_programs.py:")
    assert stuck.sides == () and "ranks 3-4 entered" in stuck.reading


def test_mismatched_sizes_and_dtypes_name_the_culprits_and_the_ranks_gloo_aborted():
    verdict = verdict_of("mismatches")
    assert (verdict.ranks, verdict.world_size, verdict.missing) == ((0, 2, 3, 5, 6, 7), 8, (1, 4))
    assert findings(verdict) == [(classes.MISMATCH, "1:size", (2,), classes.DIFFERENT_SIZE, 2, ""),
                                 (classes.MISMATCH, "2:dtype", (5,), classes.DIFFERENT_DTYPE, 2, ""),
                                 (classes.MISSING, "0:default_pg", (1, 4), "", 1, "")]
    size, dtype, _ = verdict.findings
    assert [(ranks, side.sizes) for ranks, side in size.sides] == [((0, 3), "8"), ((2,), "16")]
    assert [(ranks, side.dtype) for ranks, side in dtype.sides] == [((6, 7), "Float"), ((5,), "Double")]
    report = groups(verdict)
    # the dead ranks' subgroups are inferred from who recorded: 1 and 4 are not in them
    assert report["size"][:4] == ((0, 2, 3), False, 0, (2, "all_reduce"))
    assert report["dtype"][:4] == ((5, 6, 7), False, 0, (2, "all_reduce"))
    assert ((1, 4), None, None, "no dump") in report["default_pg"][4]
    assert verdict.notes[-1] == "no dump for ranks 1, 4 of 8"


def test_stalls_name_a_pipeline_a_crosswise_coalesce_and_a_dead_rank():
    verdict = verdict_of("stalls")
    # the highest rank died: the world all_gather's output (8 x 4 elements) says there were 8
    assert (verdict.ranks, verdict.world_size, verdict.missing) == (tuple(range(7)), 8, (7,))
    assert findings(verdict) == [(classes.MISMATCH, "2:coalesced", (6,), classes.DIFFERENT_SIZE, 1, ""),
                                 (classes.BEHIND, "1:pipe", (1, 2), "", 2, ""),
                                 (classes.MISSING, "0:default_pg", (7,), "", 1, ""),
                                 (classes.MISSING, "3:dies", (7,), "", 3, "")]
    report = groups(verdict)
    assert report["pipe"] == ((0, 1, 2, 3), False, 0, (2, "all_reduce"), [((0, 3), 2, "all_reduce", ""),
                                                                         ((1, 2), 1, "all_reduce", "")])
    # rank 7 recorded nothing of 'dies': its all_gather of 4 x 4 elements implies a fourth member
    assert report["dies"] == ((4, 5, 6), False, 1, (3, "all_reduce"), [((4, 5, 6), 3, "all_reduce", "")])
    assert report["default_pg"][4] == [((0, 3), 1, "all_gather", "in flight in group 1:pipe"),
                                       ((1, 2, 4, 5, 6), 1, "all_gather", ""), ((7,), None, None, "no dump")]
    coalesced = verdict.findings[0]
    assert [side.sizes for _, side in coalesced.sides] == ["5, 6", "6, 5"]
    assert "send or recv (gloo records none)" in verdict.findings[1].reading


def test_a_collective_only_one_rank_issues_is_extra_and_a_tie_names_both_sides():
    verdict = verdict_of("splits")
    assert (verdict.ranks, verdict.world_size, verdict.missing) == (tuple(range(5)), 5, ())
    assert findings(verdict) == [(classes.MISMATCH, "1:extra", (0,), classes.EXTRA, 2, ""),
                                 (classes.MISMATCH, "2:tie", (3, 4), classes.DIFFERENT_COLLECTIVE, 2, "")]
    extra, tie = verdict.findings
    assert "rank 0 issued #2 all_reduce" in extra.reading and "ranks 1-2 never reached" in extra.reading
    assert [(ranks, side.op, side.sizes) for ranks, side in tie.sides] == [
        ((3,), "all_reduce", "4"), ((4,), "all_gather", "4 -> 2x4")]
    assert "no majority" in tie.reading
    assert groups(verdict) == {
        "extra": ((0, 1, 2), False, 0, (2, "all_reduce"), [((0,), 2, "all_reduce", ""),
                                                          ((1, 2), 1, "all_reduce", "")]),
        "tie": ((3, 4), False, 0, (2, "all_reduce"), [((3,), 2, "all_reduce", ""),
                                                     ((4,), 2, "all_gather", "")])}


def test_a_link_cut_before_one_rank_enters_is_the_communication_of_every_member():
    verdict = verdict_of("cut_all_reduce")
    assert (verdict.ranks, verdict.world_size, verdict.missing) == ((0, 1), 2, ())
    assert findings(verdict) == [(classes.COMMUNICATION, "0:default_pg", (), "", 4, "")]
    assert groups(verdict) == {
        "default_pg": ((0, 1), False, 0, (4, "all_reduce"), [((0, 1), 4, "all_reduce", "")])}
    assert verdict.groups[0].states[0].last.status == WAITING
    assert verdict.findings[0].reading == (
        "every member of group 0:default_pg entered #4 all_reduce [1048576] Float and none completed it: "
        "the communication itself; look at the fabric (commbench fabric) and the transport's logs")


def test_a_receiver_on_a_crawling_link_is_the_communication_at_that_receiver():
    verdict = verdict_of("crawl_broadcast")
    assert (verdict.ranks, verdict.world_size, verdict.missing) == ((0, 1), 2, ())
    assert findings(verdict) == [(classes.COMMUNICATION, "0:default_pg", (1,), "", 4, "")]
    assert groups(verdict) == {
        "default_pg": ((0, 1), False, 0, (5, "broadcast"), [((0,), 5, "broadcast", ""),
                                                           ((1,), 4, "broadcast", "")])}
    assert [state.last.status for state in verdict.groups[0].states] == [WAITING, WAITING]
    assert verdict.findings[0].reading == (
        "rank 1 still in #4 broadcast [262144] Float of group 0:default_pg, which rank 0 completed and went "
        "past: what they needed of it never arrived: the communication itself; look at the fabric between "
        "them (commbench fabric)")


def test_a_collective_the_others_left_in_flight_is_not_said_to_be_completed():
    # rank 0 started the fourth all-reduce and a fifth without waiting; host 1's link went down before
    # rank 1 entered the fourth: nobody completed it, so rank 0 is not said to have
    verdict = verdict_of("cut_queued")
    assert (verdict.ranks, verdict.world_size, verdict.missing) == ((0, 1), 2, ())
    assert findings(verdict) == [(classes.COMMUNICATION, "0:default_pg", (1,), "", 4, "")]
    assert groups(verdict) == {
        "default_pg": ((0, 1), False, 0, (5, "all_reduce"), [((0,), 5, "all_reduce", ""),
                                                            ((1,), 4, "all_reduce", "")])}
    assert verdict.findings[0].reading == (
        "rank 1 still in #4 all_reduce [1048576] Float of group 0:default_pg, which rank 0 left in flight "
        "and went past: what they needed of it never arrived: the communication itself; look at the "
        "fabric between them (commbench fabric)")


def test_a_behind_rank_still_in_a_collective_others_completed_is_told_apart_from_one_in_none():
    # rank 1's link crawls in the fourth broadcast, which ranks 0 and 2 completed; rank 2 then computes
    # and rank 0 goes on to a fifth: two of three are behind, but rank 1 did not stop by choice, so
    # rank 0's fifth is not read as a collective only it issues
    verdict = verdict_of("crawl_past_one")
    assert (verdict.ranks, verdict.world_size, verdict.missing) == ((0, 1, 2), 3, ())
    assert findings(verdict) == [(classes.BEHIND, "0:default_pg", (1, 2), "", 5, "")]
    assert groups(verdict) == {
        "default_pg": ((0, 1, 2), False, 0, (5, "broadcast"), [((0,), 5, "broadcast", ""),
                                                              ((1,), 4, "broadcast", ""),
                                                              ((2,), 4, "broadcast", "")])}
    assert [state.last.status for state in verdict.groups[0].states] == [WAITING, WAITING, DONE]
    assert verdict.findings[0].reading == (
        "ranks 1-2 never entered #5 broadcast [262144] Float of group 0:default_pg, which rank 0 entered: "
        "rank 1 still in #4 broadcast [262144] Float, which ranks 0, 2 completed: what it needed of it never "
        "arrived (the communication itself: commbench fabric); rank 2 in no collective the recorder holds: "
        "busy outside communication, or in a send or recv (gloo records none); look at their stacks")
    hosted = diagnose(load_job([str(CAPTURED / "crawl_past_one")]), hosts={0: "a", 1: "b", 2: "c"})
    assert "which rank 0 entered (hosts b, c): rank 1 still in" in hosted.findings[0].reading
    assert "never arrived (hosts b) (the communication" in hosted.findings[0].reading


def test_two_minorities_are_each_named_with_what_they_issued_and_a_skip_is_read_from_the_next_one():
    verdict = verdict_of("sides")  # rank 10 was aborted by gloo (no dump): 'gathers' keeps ranks 7-8
    assert (verdict.world_size, verdict.missing) == (12, (10,))
    assert findings(verdict) == [
        (classes.MISMATCH, "1:three", (0, 4, 5), classes.DIFFERENT_COLLECTIVE, 1, ""),
        (classes.MISMATCH, "2:next", (9,), classes.SKIPPED, 1, ""),
        (classes.MISMATCH, "3:gathers", (7, 8), classes.DIFFERENT_SIZE, 1, ""),
        (classes.BEHIND, "4:queued", (7, 8, 11), "", 6, ""),
        (classes.MISSING, "0", (10,), "", None, "")]  # no group's entries name rank 10: the job's finding
    three, following, gathers, queued, _ = verdict.findings
    # rank 0, the lowest culprit, all-gathers: the detail is its difference, and each side is named
    assert three.reading == (
        "different collective at #1 of group 1:three: rank 0 all_gather [8 -> 6x8] Float; ranks 4-5 "
        "all_reduce [8] Int where ranks 1-3 all_reduce [8] Float: a code path that differs by rank")
    assert [(ranks, side.op, side.dtype) for ranks, side in three.sides] == [
        ((1, 2, 3), "all_reduce", "Float"), ((4, 5), "all_reduce", "Int"), ((0,), "all_gather", "Float")]
    # rank 9's int32 all-reduce is the one rank 6 issued next; ranks 7-8 went to 'gathers' instead: the
    # majority's next collective is read from its first rank that issued one
    assert following.reading == (
        "rank 9 skipped a collective at #1 of group 2:next: its #1 is the one ranks 6-8 issue next")
    queued_in = "in flight in group 4:queued"
    assert groups(verdict)["next"][4] == [((6,), 2, "all_reduce", ""), ((7, 8), 1, "all_reduce", queued_in),
                                          ((9,), 1, "all_reduce", queued_in)]
    # a gather's members agree on what they send (the root's output is its own): 4 elements against 8
    assert [(ranks, side.sizes) for ranks, side in gathers.sides] == [((7,), "4 -> -"), ((8,), "8 -> -")]
    # past three good all-reduces rank 9 started three more, rank 7 two, rank 8 one, rank 11 none: nobody
    # completed the fourth, so ranks 7-8 wait in it (the earliest they are in) for rank 11, not for the link
    assert queued.reading == (
        "ranks 7-8, 11 never entered #6 all_reduce [8] Float of group 4:queued, which rank 9 entered: ranks "
        "7-8 still in #4 all_reduce [8] Float, which no member completed; rank 11 in no collective the "
        "recorder holds: busy outside communication, or in a send or recv (gloo records none); look at their "
        "stacks")
    assert groups(verdict)["queued"][4] == [((7,), 5, "all_reduce", ""), ((8,), 4, "all_reduce", ""),
                                            ((9,), 6, "all_reduce", ""), ((11,), 3, "all_reduce", "")]
    queued_report = next(report for report in verdict.groups if report.desc == "queued")
    assert [state.last.status for state in queued_report.states] == [WAITING, WAITING, WAITING, DONE]


def test_a_skip_told_by_call_site_is_found_past_behind_ranks_that_do_not_show_one():
    # behind at #3: rank 0, whose one-entry buffer holds only its 'aside' all-reduce; rank 1, whose #2
    # came from the line the others used; rank 4, whose #2 came from the next line: the skipped one
    verdict = verdict_of("call_sites")
    first = _line("# the first line: rank 4 goes past it (call_sites)")
    assert findings(verdict) == [(classes.MISMATCH, "0:default_pg", (4,), classes.SKIPPED, 2, ""),
                                 (classes.BEHIND, "1:aside", (), "", 1, "")]
    assert verdict.findings[0].reading == (
        f"rank 4 skipped a collective in group 0:default_pg: its #2 came from diagnose_programs.py:"
        f"{first + 2} call_sites where ranks 2-3 issued #2 from diagnose_programs.py:{first} call_sites, and "
        "ranks 2-3 went on to #3")
    assert groups(verdict)["default_pg"][4][:2] == [((0,), None, None, "in flight in group 1:aside"),
                                                     ((1,), 2, "all_reduce", "")]


def test_the_hosts_a_run_knows_are_named_where_the_communication_stopped():
    hosts = {0: "node-a", 1: "node-b"}
    crawl = diagnose(load_job([str(CAPTURED / "crawl_broadcast")]), hosts=hosts).findings[0]
    assert "which rank 0 completed and went past (hosts node-b): what" in crawl.reading  # the receiver's
    cut = diagnose(load_job([str(CAPTURED / "cut_all_reduce")]), hosts=hosts).findings[0]
    assert "none completed it (hosts node-a, node-b): the communication" in cut.reading
    # one host for both ranks is named once; a host the run does not know is left out
    shared = diagnose(load_job([str(CAPTURED / "cut_all_reduce")]), hosts={0: "node-a", 1: "node-a"})
    assert "none completed it (hosts node-a): the" in shared.findings[0].reading
    behind = diagnose(load_job([str(CAPTURED / "desyncs")]), hosts={5: "node-c", 3: "node-d"}).findings[2]
    assert "which ranks 3-4 entered (hosts node-c): in no collective" in behind.reading


def test_groups_issued_in_crossed_orders_a_shifted_dtype_a_lone_member_and_a_death():
    verdict = verdict_of("orders")
    assert (verdict.ranks, verdict.world_size, verdict.missing) == ((*range(10), 11), 12, (10,))
    # the two crossed groups are one finding; rank 10 is in no group anyone recorded: the job's finding;
    # a finding whose ranks are held up in another group comes after every finding that is not
    assert findings(verdict) == [(classes.MISMATCH, "2:first", (0, 1), classes.ORDER, 2, ""),
                                 (classes.MISMATCH, "4:skips", (4,), classes.SKIPPED, 2, ""),
                                 (classes.MISMATCH, "5:extra", (7,), classes.EXTRA, 2, ""),
                                 (classes.BEHIND, "6:idle", (), "", 1, ""),
                                 (classes.MISSING, "0", (10,), "", None, ""),
                                 (classes.BEHIND, "1:tail", (7,), "", 2, "5:extra")]
    assert [item.reading for item in verdict.findings] == [
        "ranks 0-1 wait on each other across groups 2:first and 3:second: rank 0 in #2 all_reduce [4] Float "
        "of 2:first, which rank 1 never entered; rank 1 in #2 all_reduce [4] Float of 3:second, which rank 0 "
        "never entered: they issue their collectives on these groups in different orders",
        "rank 4 skipped a collective at #2 of group 4:skips: its #2 is the one ranks 2-3 issue next",
        "rank 7 issued a collective at #2 of group 5:extra that ranks 5-6 never did",
        "rank 9 is the only rank whose dump records group 6:idle, and it waits in #1 all_reduce [4] Float: "
        "the group's other members never entered it, or left no dump (the dumps do not list members: find "
        "them where the group is created)",
        "rank 10 left no dump: dead or unreachable",
        "rank 7 never entered #2 all_reduce [4] Float of group 1:tail, which rank 6 entered: in flight in "
        "group 5:extra (its finding says why)"]
    report = groups(verdict)
    assert report["first"] == ((0, 1), False, 0, (2, "all_reduce"), [
        ((0,), 2, "all_reduce", ""), ((1,), 1, "all_reduce", "in flight in group 3:second")])
    assert report["second"] == ((0, 1), False, 0, (2, "all_reduce"), [
        ((0,), 1, "all_reduce", "in flight in group 2:first"), ((1,), 2, "all_reduce", "")])
    # int32 then float32 on ranks 2-3; rank 4's float32 was paired with their int32 and completed
    assert report["skips"] == ((2, 3, 4), False, 0, (3, "all_reduce"), [((2, 3), 3, "all_reduce", ""),
                                                                       ((4,), 2, "all_reduce", "")])
    assert report["extra"] == ((5, 6, 7), False, 0, (3, "all_reduce"), [
        ((5,), 2, "all_reduce", ""), ((6,), 2, "all_reduce", "in flight in group 1:tail"),
        ((7,), 3, "all_reduce", "")])
    assert report["tail"] == ((6, 7), False, 0, (2, "all_reduce"), [
        ((6,), 2, "all_reduce", ""), ((7,), 1, "all_reduce", "in flight in group 5:extra")])
    assert report["idle"] == ((9,), False, 0, (1, "all_reduce"), [((9,), 1, "all_reduce", "")])
    # rank 11 issues nothing, its group's other member dead, and rank 8 computes from the start: neither
    # is in a group anyone recorded
    assert set(report) == {"tail", "first", "second", "skips", "extra", "idle"}  # nor the world group
    skipped, extra = verdict.findings[1:3]
    assert [(ranks, side.dtype) for ranks, side in skipped.sides] == [((2, 3), "Int"), ((4,), "Float")]
    assert [(ranks, side.dtype) for ranks, side in extra.sides] == [((5, 6), "Float"), ((7,), "Int")]


def test_a_skip_after_a_good_collective_an_extra_first_one_a_tie_and_a_three_rank_crossing():
    verdict = verdict_of("variants")
    assert (verdict.world_size, verdict.missing) == (11, ())
    assert findings(verdict) == [(classes.MISMATCH, "1:skip", (2,), classes.SKIPPED, 2, ""),
                                 (classes.MISMATCH, "2:extra", (5,), classes.EXTRA, 1, ""),
                                 (classes.MISMATCH, "3:tie", (6, 7), classes.DIFFERENT_DTYPE, 2, ""),
                                 (classes.MISMATCH, "4:hold", (8, 9, 10), classes.ORDER, 2, "")]
    skipped, extra, tie, crossed = verdict.findings
    # rank 2's float32 was paired with ranks 0-1's int32 (#2), after a good first all-reduce
    assert skipped.reading == ("rank 2 skipped a collective at #2 of group 1:skip: its #2 is the one "
                               "ranks 0-1 issue next")
    assert [(ranks, side.dtype) for ranks, side in skipped.sides] == [((0, 1), "Int"), ((2,), "Float")]
    # rank 5's extra is its group's very first collective
    assert extra.reading == "rank 5 issued a collective at #1 of group 2:extra that ranks 3-4 never did"
    assert [(ranks, side.dtype) for ranks, side in extra.sides] == [((3, 4), "Float"), ((5,), "Int")]
    # two ranks, each the other's order: no majority to say which one is wrong, so both are named
    assert "no majority (rank 6 all_reduce [4] Int; rank 7 all_reduce [4] Float)" in tie.reading
    assert [(ranks, side.dtype) for ranks, side in tie.sides] == [((6,), "Int"), ((7,), "Float")]
    assert crossed.reading == (
        "ranks 8-10 wait on each other across groups 4:hold and 5:side: rank 8 in #2 all_reduce [4] Float of "
        "4:hold, which ranks 9-10 never entered; ranks 9-10 in #2 all_reduce [4] Float of 5:side, which "
        "rank 8 never entered: they issue their collectives on these groups in different orders")
    report = groups(verdict)
    assert report["skip"] == ((0, 1, 2), False, 0, (3, "all_reduce"), [((0, 1), 3, "all_reduce", ""),
                                                                     ((2,), 2, "all_reduce", "")])
    assert report["extra"] == ((3, 4, 5), False, 0, (2, "all_reduce"), [((3, 4), 1, "all_reduce", ""),
                                                                      ((5,), 2, "all_reduce", "")])
    assert report["hold"][4] == [((8,), 2, "all_reduce", ""),
                                 ((9, 10), 1, "all_reduce", "in flight in group 5:side")]
    assert report["side"][4] == [((8,), 1, "all_reduce", "in flight in group 4:hold"),
                                 ((9, 10), 2, "all_reduce", "")]
    assert set(report) == {"skip", "extra", "tie", "hold", "side"}


def test_ranks_behind_in_a_group_are_told_where_each_is_held_and_an_empty_dump_is_behind_at_the_first():
    verdict = verdict_of("holds")
    assert (verdict.world_size, verdict.missing) == (5, ())
    # the world group stopped at its first collective: rank 4, whose dump records nothing, never entered
    # it; 'gate' waits for two ranks held in two other groups (their findings come first)
    assert findings(verdict) == [(classes.BEHIND, "0:default_pg", (4,), "", 1, ""),
                                 (classes.BEHIND, "4:mix", (1, 3), "", 2, ""),
                                 (classes.BEHIND, "2:left", (3,), "", 2, ""),
                                 (classes.BEHIND, "3:right", (3,), "", 2, ""),
                                 (classes.BEHIND, "1:gate", (1, 2), "", 2, "2:left, 3:right")]
    world, mix, left, _, gate = verdict.findings
    idle = ("in no collective the recorder holds: busy outside communication, or in a send or recv (gloo "
            "records none)")
    assert world.reading == (f"rank 4 never entered #1 all_reduce [4] Float of group 0:default_pg, which "
                             f"ranks 0-3 entered: {idle}; look at their stacks")
    assert mix.reading == (f"ranks 1, 3 never entered #2 all_reduce [4] Float of group 4:mix, which rank 0 "
                           f"entered: rank 1 in flight in group 2:left; rank 3 {idle}; look at their stacks")
    assert left.reading == (f"rank 3 never entered #2 all_reduce [4] Float of group 2:left, which rank 1 "
                            f"entered: {idle}; look at their stacks")
    assert gate.reading == ("ranks 1-2 never entered #2 all_reduce [4] Float of group 1:gate, which rank 0 "
                            "entered: rank 1 in flight in group 2:left; rank 2 in flight in group 3:right "
                            "(their findings say why)")
    report = groups(verdict)
    left_in, right_in, gate_in = (f"in flight in group {label}" for label in ("2:left", "3:right", "1:gate"))
    assert report["default_pg"] == ((0, 1, 2, 3, 4), False, 0, (1, "all_reduce"), [
        ((0,), 1, "all_reduce", gate_in), ((1,), 1, "all_reduce", left_in),
        ((2,), 1, "all_reduce", right_in), ((3,), 1, "all_reduce", ""), ((4,), None, None, "")])
    assert report["gate"][4] == [((0,), 2, "all_reduce", ""), ((1,), 1, "all_reduce", left_in),
                                 ((2,), 1, "all_reduce", right_in)]
    assert report["mix"][4] == [((0,), 2, "all_reduce", gate_in), ((1,), 1, "all_reduce", left_in),
                                ((3,), 1, "all_reduce", "")]


def _left_out(job: str, into: Path, ranks: tuple[int, ...]) -> Path:
    """A captured job's dumps without those of ``ranks``: their hosts could not be reached."""
    into.mkdir()
    for path in (CAPTURED / job).iterdir():
        if int(path.name.rsplit("_", 1)[1]) not in ranks:
            shutil.copy(path, into / path.name)
    return into


def test_members_without_a_dump_are_missing_and_the_one_group_the_others_wait_in_is_named(tmp_path):
    # every dump: rank 5's buffer kept its last two entries, so no dump holds its 'side' all_gather, and
    # ranks 0-1, who completed it with rank 5, now wait in 'all' (as do ranks 2 and 4) for rank 5
    whole = verdict_of("unreachable")
    assert (whole.world_size, whole.missing) == (6, ())
    assert findings(whole) == [(classes.MISSING, "3:all", (), "", 1, ""),
                               (classes.MISSING, "4:other", (), "", 1, ""),
                               (classes.MISSING, "1:side", (), "", 1, "3:all")]
    assert whole.findings[2].reading == (
        "1 member of group 1:side in no dump, though every rank left one: among ranks 2-5, no entry of the "
        "group in their dump (dropped from the recorder's buffer, or the group never reached); the others "
        "reached #1 all_gather [4 -> 3x4] Float (completed) and are in flight in group 3:all")
    assert groups(whole)["pair"][2] == 0 and groups(whole)["side"][:3] == ((0, 1), False, 1)
    # rank 5's dump left out: 'pair's ranks 2 and 3 wait in two different groups, so no one group is
    # named for them, nor for the world group's
    without_5 = diagnose_files([str(_left_out("unreachable", tmp_path / "5", (5,)))])
    assert (without_5.world_size, without_5.missing) == (6, (5,))
    assert findings(without_5) == [(classes.MISSING, "0:default_pg", (5,), "", 1, ""),
                                   (classes.MISSING, "3:all", (5,), "", 1, ""),
                                   (classes.MISSING, "2:pair", (5,), "", 1, ""),
                                   (classes.MISSING, "4:other", (5,), "", 1, ""),
                                   (classes.MISSING, "1:side", (5,), "", 1, "3:all")]
    assert without_5.findings[0].reading == (
        "rank 5 of group 0:default_pg left no dump: dead or unreachable; the others reached #1 all_gather "
        "[4 -> 6x4] Float (completed)")
    assert without_5.findings[4].reading == (
        "1 member of group 1:side left no dump (rank 5 left none): dead or unreachable; the others reached "
        "#1 all_gather [4 -> 3x4] Float (completed) and are in flight in group 3:all")
    # ranks 3 and 5 left out: every rank that left a dump waits in 'all'
    without_3_5 = diagnose_files([str(_left_out("unreachable", tmp_path / "35", (3, 5)))])
    assert (without_3_5.world_size, without_3_5.missing) == (6, (3, 5))
    assert findings(without_3_5) == [(classes.MISSING, "3:all", (3, 5), "", 1, ""),
                                     (classes.MISSING, "1:side", (3, 5), "", 1, "3:all"),
                                     (classes.MISSING, "0:default_pg", (3, 5), "", 1, "3:all"),
                                     (classes.MISSING, "2:pair", (3, 5), "", 1, "3:all")]
    assert without_3_5.findings[2].reading == (
        "ranks 3, 5 of group 0:default_pg left no dump: dead or unreachable; the others reached #1 "
        "all_gather [4 -> 6x4] Float (completed) and are in flight in group 3:all")
    assert groups(without_3_5)["pair"][:3] == ((2,), False, 2)
    assert without_3_5.findings[3].reading == (
        "2 members of group 2:pair left no dump (ranks 3, 5 left none): dead or unreachable; the others "
        "reached #1 all_gather [4 -> 3x4] Float (completed) and are in flight in group 3:all")


def test_one_dump_alone_is_a_world_of_one_and_a_member_the_caller_adds_is_missing_held_nowhere():
    job = load_job([str(CAPTURED / "cut_all_reduce" / "fr_rank_0")])
    alone = diagnose(job)
    assert (alone.world_size, alone.missing) == (1, ())
    assert findings(alone) == [(classes.BEHIND, "0:default_pg", (), "", 4, "")]  # a group of one waits
    # with a third rank the caller knows of, ranks 0 and 1 wait in the group it is missing from: the
    # missing rank is the finding, and the others are held in this group, not elsewhere
    three = diagnose(load_job([str(CAPTURED / "cut_all_reduce")]), world_size=3)
    assert findings(three) == [(classes.MISSING, "0:default_pg", (2,), "", 4, "")]
    assert three.findings[0].reading == (
        "rank 2 of group 0:default_pg left no dump: dead or unreachable; the others reached #4 all_reduce "
        "[1048576] Float (in flight (scheduled))")


def test_members_a_dump_lists_beyond_the_dumps_widen_the_world_and_are_missing(tmp_path):
    def listed(rank: int, dump: dict) -> None:  # NCCL's pg_config lists each group's members
        dump["pg_config"] = _listing("0", "default_pg", [0, 1, 2])

    verdict = diagnose_files([str(_edited(CAPTURED / "cut_all_reduce", tmp_path / "listed", listed))])
    assert (verdict.world_size, verdict.missing) == (3, (2,))
    assert findings(verdict) == [(classes.MISSING, "0:default_pg", (2,), "", 4, "")]


def _line(marker: str) -> int:
    """The line of tests/diagnose_programs.py that holds ``marker`` (where a job issued a collective)."""
    lines = (Path(__file__).parent / "diagnose_programs.py").read_text().splitlines()
    return next(index for index, line in enumerate(lines, 1) if marker in line)


def test_every_reading_names_the_ranks_the_collective_its_sizes_and_where_the_others_are():
    skipped_at = _line("# rank 7 takes another path past this one")  # rank 6's #2; rank 7's is the next
    others = "busy outside communication, or in a send or recv (gloo records none); look at their stacks"
    expected = {
        "desyncs": [
            "different collective at #2 of group 1:differs: rank 2 all_gather [4 -> 3x4] Float where "
            "ranks 0-1 all_reduce [4] Float: a code path that differs by rank",
            "rank 7 skipped a collective in group 3:skips: its #2 came from "
            f"diagnose_programs.py:{skipped_at + 1} desyncs where rank 6 issued #2 from "
            f"diagnose_programs.py:{skipped_at} desyncs, and rank 6 went on to #3",
            "rank 5 never entered #2 all_reduce [4] Float of group 2:stuck, which ranks 3-4 entered: "
            f"in no collective the recorder holds: {others}"],
        "mismatches": [
            "different size at #2 of group 1:size: rank 2 all_reduce [16] Float where ranks 0, 3 "
            "all_reduce [8] Float: a code path that differs by rank",
            "different dtype at #2 of group 2:dtype: rank 5 all_reduce [8] Double where ranks 6-7 "
            "all_reduce [8] Float: a code path that differs by rank",
            "ranks 1, 4 of group 0:default_pg left no dump: dead or unreachable; the others reached #1 "
            "all_reduce [4] Float (completed)"],
        "stalls": [
            "different size at #1 of group 2:coalesced: rank 6 all_reduce [6, 5] Float where ranks 4-5 "
            "all_reduce [5, 6] Float: a code path that differs by rank",
            "ranks 1-2 never entered #2 all_reduce [4] Float of group 1:pipe, which ranks 0, 3 entered: "
            f"in no collective the recorder holds: {others}",
            "rank 7 of group 0:default_pg left no dump: dead or unreachable; the others reached #1 "
            "all_gather [4 -> 8x4] Float (completed)",
            "1 member of group 3:dies left no dump (rank 7 left none): dead or unreachable; the others "
            "reached #3 all_reduce [4] Float (completed)"],
        "splits": [
            "rank 0 issued #2 all_reduce [4] Float in group 1:extra, which ranks 1-2 never reached: a "
            "collective only some ranks issue",
            "the members disagree at #2 of group 2:tie with no majority (rank 3 all_reduce [4] Float; "
            "rank 4 all_gather [4 -> 2x4] Float): a code path that differs by rank; the stacks show "
            "where each side issued it"]}
    for job, readings in expected.items():
        assert [item.reading for item in verdict_of(job).findings] == readings, job
    assert verdict_of("desyncs").notes == [
        "gloo records no send or recv: a rank waiting in one shows as behind in its groups"]


def test_a_dump_left_out_is_missing_and_the_rest_still_judged(tmp_path):
    for path in (CAPTURED / "desyncs").iterdir():
        if path.name != "fr_rank_6":
            shutil.copy(path, tmp_path / path.name)
    verdict = diagnose_files([str(tmp_path)])
    assert verdict.missing == (6,) and verdict.world_size == 8
    # 'skips' holds rank 7 alone now: nothing to compare it with, and its member 6 left no dump
    assert findings(verdict)[:2] == [
        (classes.MISMATCH, "1:differs", (2,), classes.DIFFERENT_COLLECTIVE, 2, ""),
        (classes.BEHIND, "2:stuck", (5,), "", 2, "")]
    assert (classes.MISSING, "0:default_pg", (6,)) in [item[:3] for item in findings(verdict)]


@pytest.mark.parametrize("key,value", [("collective_seq_id", -1), ("p2p_seq_id", -5),
                                       ("collective_seq_id", 2**63), ("p2p_seq_id", 2**70)])
def test_a_sequence_id_below_0_or_past_int64_is_one_line_naming_entry_and_field(tmp_path, key, value):
    # torch counts sequence ids up from 0; a negative one would sort before every real one, and one past
    # int64 cannot be held with the others
    for path in (CAPTURED / "healthy").iterdir():
        shutil.copy(path, tmp_path / path.name)
    dump = tmp_path / "fr_rank_1"
    payload = pickle.loads(dump.read_bytes())
    payload["entries"][3][key] = value
    dump.write_bytes(pickle.dumps(payload))
    with pytest.raises(UsageError) as refused:
        diagnose_files([str(tmp_path)])
    message = str(refused.value)
    assert str(dump) in message and "entry 3" in message and "\n" not in message
    assert f"{key} is not a sequence id (0 to 2**63 - 1)" in message


def test_ranks_the_caller_knows_beyond_the_dumps_are_missing_and_hosts_are_named():
    job = load_job([str(CAPTURED / "healthy")])
    verdict = diagnose(job, world_size=4)
    assert verdict.world_size == 4 and verdict.missing == (2, 3)
    assert findings(verdict)[-1][:3] == (classes.MISSING, "0:default_pg", (2, 3))
    # a commbench run knows every rank's host, so its world too
    hosted = diagnose(load_job([str(CAPTURED / "healthy")]), hosts={0: "a", 1: "a", 2: "b"})
    assert hosted.world_size == 3 and hosted.missing == (2,)


def _edited(source: Path, into: Path, edit) -> Path:
    """The captured dumps of a job with ``edit(rank, dump)`` applied: what NCCL records and gloo does not."""
    into.mkdir()
    for path in source.iterdir():
        dump = pickle.loads(path.read_bytes())  # our own capture
        edit(int(path.name.rsplit("_", 1)[1]), dump)
        (into / path.name).write_bytes(pickle.dumps(dump))
    return into


def _append_like_last(dump: dict, **fields) -> None:
    """A copy of the dump's last entry, with ``fields`` changed, recorded after it (the next record id)."""
    entry = dict(dump["entries"][-1])
    entry.update(record_id=entry["record_id"] + 1, **fields)
    dump["entries"].append(entry)


def _listing(name: str, desc: str, ranks: list[int]) -> dict:
    """A pg_config that lists one group's members, as NCCL's dumps do (gloo's list none)."""
    return {name: {"name": name, "desc": desc, "ranks": json.dumps(ranks)}}


def test_a_rank_that_lists_other_members_for_a_group_is_a_membership_finding(tmp_path):
    def listed(rank: int, dump: dict) -> None:  # NCCL's pg_config lists each group's members
        if rank in (3, 4, 5):
            dump["pg_config"] = _listing("2", "stuck", [3, 5] if rank == 5 else [3, 4, 5])

    verdict = diagnose_files([str(_edited(CAPTURED / "desyncs", tmp_path / "listed", listed))])
    report = next(report for report in verdict.groups if report.desc == "stuck")
    assert (report.name, report.members, report.members_known, report.unnamed_missing) == (
        "2", (3, 4, 5), True, 0)
    assert (report.finding.kind, report.finding.culprits) == (classes.MEMBERSHIP, (5,))
    assert report.finding.group == "2:stuck" and report.finding.reading == (
        "rank 5 disagrees with the other members on who is in group 2:stuck (rank 5 lists ranks 3, 5): the "
        "group was created with different ranks on different ranks")


@pytest.mark.parametrize(("op", "arrow", "word", "matching"), [("recv", "<-", "from", "send"),
                                                               ("send", "->", "to", "recv")])
def test_two_ranks_receiving_or_sending_to_each_other_are_a_point_to_point_deadlock(tmp_path, op, arrow, word,
                                                                                     matching):
    def waiting(rank: int, dump: dict) -> None:  # NCCL records 'nccl:recv 1<-2', 'nccl:send 1->2'
        if rank in (1, 2):
            _append_like_last(dump, profiling_name=f"nccl:{op} {rank}{arrow}{3 - rank}",
                              process_group=("0", "default_pg"), is_p2p=True, p2p_seq_id=1,
                              state="scheduled", retired=False)

    verdict = diagnose_files([str(_edited(CAPTURED / "stalls", tmp_path / "p2p", waiting))])
    [p2p] = [item for item in verdict.findings if item.kind == classes.P2P]
    assert (p2p.culprits, p2p.group, p2p.seq) == ((1, 2), "0:default_pg", 1)
    assert [(ranks, side.op) for ranks, side in p2p.sides] == [((1,), f"{op} {word} 2"),
                                                              ((2,), f"{op} {word} 1")]
    assert p2p.reading == (f"ranks 1 and 2 wait on each other: each {op}s (#1 {op} {word} 2 [4] Float; #1 "
                           f"{op} {word} 1 [4] Float) and neither issued the matching {matching}")


@pytest.mark.parametrize("listed", [[1, 2], [1, 2, 7]])
def test_a_listed_group_of_sends_and_receives_only_is_judged_by_its_point_to_point_finding(tmp_path, listed):
    # a pipeline's group, which NCCL lists in pg_config and where it records only sends and receives:
    # no collective to judge, so the group's report stops nowhere and the p2p finding alone names it; a
    # listed member without a dump (rank 7 died) is missing, with no collective the others reached
    # (NCCL names the peers by their ranks in the group: global ranks 1 and 2 are its 0 and 1)
    def waiting(rank: int, dump: dict) -> None:
        if rank in (1, 2):
            _append_like_last(dump, profiling_name=f"nccl:recv {rank - 1}<-{2 - rank}",
                              process_group=("9", "stage"), is_p2p=True, p2p_seq_id=1, state="scheduled",
                              retired=False)
            dump["pg_config"] = _listing("9", "stage", listed)

    verdict = diagnose_files([str(_edited(CAPTURED / "stalls", tmp_path / "stage", waiting))])
    [p2p] = [item for item in verdict.findings if item.kind == classes.P2P]
    assert (p2p.culprits, p2p.group, p2p.seq) == ((1, 2), "9:stage", 1)
    [stage] = [report for report in verdict.groups if report.desc == "stage"]
    assert (stage.members, stage.members_known, stage.stopped_at) == (tuple(listed), True, None)
    if len(listed) == 2:
        assert stage.finding is None
    else:
        assert (stage.finding.kind, stage.finding.culprits, stage.finding.reading) == (
            classes.MISSING, (7,), "rank 7 of group 9:stage left no dump: dead or unreachable")


@pytest.mark.parametrize("listed", [True, False])
def test_a_group_of_one_stuck_in_a_collective_is_communication_if_listed_else_lone(tmp_path, listed):
    # rank 0 in flight in a group no other rank recorded: where the dumps list the group as rank 0 alone
    # (NCCL's pg_config), nobody else was to come and the collective itself is stuck; where they do not
    # list it (gloo), its other members are unknown and never came
    def alone(rank: int, dump: dict) -> None:
        if rank == 0:
            _append_like_last(dump, process_group=("7", "solo"), collective_seq_id=1, retired=False)
            if listed:
                dump["pg_config"] = _listing("7", "solo", [0])

    verdict = diagnose_files([str(_edited(CAPTURED / "healthy", tmp_path / "solo", alone))])
    [solo] = [report for report in verdict.groups if report.desc == "solo"]
    assert (solo.members, solo.members_known) == ((0,), listed)
    assert solo.finding.kind == (classes.COMMUNICATION if listed else classes.BEHIND)
    assert solo.finding.reading.startswith("every member of group 7:solo entered" if listed else
                                           "rank 0 is the only rank whose dump records group 7:solo")


@pytest.mark.parametrize(("job", "status", "culprits"), [("healthy", 0, []), ("desyncs", 1, [[2], [7], [5]]),
                                                       ("stalls", 1, [[6], [1, 2], [7], [7]])])
def test_the_command_exits_1_exactly_when_it_names_a_culprit(job, status, culprits, capsys):
    assert main(["diagnose", str(CAPTURED / job), "--json"]) == status
    found = json.loads(capsys.readouterr().out)
    assert found["culprit_found"] is bool(status)
    assert [item["culprits"] for item in found["findings"]] == culprits


def _shown(verdict: Verdict) -> dict[tuple[str, tuple[int, ...]], tuple[int, str, str]]:
    """(group, ranks) -> (seq, op, stack) of each state's last operation."""
    return {(report.desc, state.ranks): (state.last.seq, state.last.op, state.last.stack)
            for report in verdict.groups for state in report.states if state.last is not None}


def test_a_ring_buffer_that_kept_only_the_last_entry_still_names_where_it_came_from(tmp_path):
    # a Flight Recorder whose buffer holds one entry keeps each rank's last: its stack is then the job's
    # first, and is shown as any other
    whole = _shown(verdict_of("healthy"))
    def last_only(rank: int, dump: dict) -> None:
        del dump["entries"][:-1]
    kept = _shown(diagnose_files([str(_edited(CAPTURED / "healthy", tmp_path / "last", last_only))]))
    assert kept == {("default_pg", (0, 1)): whole[("default_pg", (0, 1))]}
    seq, op, stack = kept[("default_pg", (0, 1))]
    assert (seq, op) == (11, "barrier") and re.fullmatch(r"diagnose_programs\.py:\d+ healthy", stack)


@pytest.mark.parametrize("stripped", [0, 1])
def test_a_dump_without_frames_shows_no_call_site_and_the_others_keep_theirs(tmp_path, stripped):
    # the JSON form of a dump records no frames: its operations come from nowhere the verdict can name,
    # and where that rank stands is shown apart from the other's, whose call sites stay
    def strip(rank: int, dump: dict) -> None:
        for entry in dump["entries"] if rank == stripped else ():
            entry.pop("frames", None)
    whole = _shown(verdict_of("healthy"))
    verdict = diagnose_files([str(_edited(CAPTURED / "healthy", tmp_path / "stripped", strip))])
    assert findings(verdict) == []
    shown = _shown(verdict)
    for (group, ranks), (seq, op, stack) in whole.items():
        assert ranks == (0, 1) and stack.startswith("diagnose_programs.py:")
        assert shown[(group, (1 - stripped,))] == (seq, op, stack)
        assert shown[(group, (stripped,))] == (seq, op, "")
    assert len(shown) == 2 * len(whole)


@pytest.mark.parametrize("stripped", [6, 7])
def test_a_skip_told_only_by_call_sites_is_not_claimed_when_either_side_has_none(tmp_path, stripped):
    # in 'skips' rank 7's #2 is rank 6's #3 (the same all-reduce): only the call sites tell that rank 7
    # skipped one; without the skipper's or the others' frames it is only seen to be behind
    def strip(rank: int, dump: dict) -> None:
        for entry in dump["entries"] if rank == stripped else ():
            entry.pop("frames", None)
    assert findings(verdict_of("desyncs"))[1] == (classes.MISMATCH, "3:skips", (7,), classes.SKIPPED, 2, "")
    verdict = diagnose_files([str(_edited(CAPTURED / "desyncs", tmp_path / "stripped", strip))])
    assert findings(verdict)[2] == (classes.BEHIND, "3:skips", (7,), "", 3, "")
    assert verdict.findings[2].reading.startswith(
        "rank 7 never entered #3 all_reduce [4] Float of group 3:skips, which rank 6 entered: in no "
        "collective")


def test_a_rank_whose_dump_holds_nothing_is_behind_and_the_group_it_never_recorded_says_so(tmp_path):
    # rank 1 dumped before its first collective (or its buffer was emptied): it left a dump, so it is
    # not dead; it is behind in the world group, and the pair group's second member is among the
    # ranks whose dumps hold nothing of it
    def emptied(rank: int, dump: dict) -> None:
        if rank == 1:
            dump["entries"] = []
    verdict = diagnose_files([str(_edited(CAPTURED / "healthy", tmp_path / "empty", emptied))])
    assert verdict.missing == () and verdict.world_size == 2
    assert findings(verdict)[0] == (classes.BEHIND, "0:default_pg", (1,), "", 11, "")
    assert verdict.findings[0].reading.startswith(
        "rank 1 never entered #11 barrier [-] - of group 0:default_pg, which rank 0 entered: in no "
        "collective the recorder holds")
    assert findings(verdict)[1] == (classes.MISSING, "1:pair", (), "", 1, "")
    assert verdict.findings[1].reading == (
        "1 member of group 1:pair in no dump, though every rank left one: among rank 1, no entry of the "
        "group in their dump (dropped from the recorder's buffer, or the group never reached); the "
        "others reached #1 all_gather [8 -> 2x8] Float (completed)")
    assert groups(verdict)["default_pg"][4] == [((0,), 11, "barrier", ""), ((1,), None, None, "")]


def test_ranks_whose_buffer_kept_only_their_last_entry_still_show_who_is_behind(tmp_path):
    # ranks 3 and 4 kept only the all-reduce they wait in (a Flight Recorder buffer of one): what rank 5
    # did last (#1 of 'stuck') is in no dump of theirs, and rank 5 is still the one behind
    def last_only(rank: int, dump: dict) -> None:
        if rank in (3, 4):
            del dump["entries"][:-1]
    verdict = diagnose_files([str(_edited(CAPTURED / "desyncs", tmp_path / "last", last_only))])
    assert findings(verdict)[2] == (classes.BEHIND, "2:stuck", (5,), "", 2, "")
    assert verdict.findings[2].reading.startswith(
        "rank 5 never entered #2 all_reduce [4] Float of group 2:stuck, which ranks 3-4 entered: in no "
        "collective the recorder holds")
