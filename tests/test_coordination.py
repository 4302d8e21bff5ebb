"""Check-ins over a real TCPStore, one thread per rank: joins, steps, stops, missing and dead ranks."""

import threading
import time
from datetime import timedelta

import pytest
import torch.distributed as dist

from commbench.coordination import Coordinator, LauncherBoard
from commbench.coordination.store import Requests, Unanswered, key_prefix
from commbench.core.groups import format_ranks
from commbench.errors import RunError
from commbench.running.spawn import free_port


class Ranks:
    """``world_size`` coordinators sharing one store server, as the ranks of a run would."""

    def __init__(self, world_size: int, timeout_s: float = 5.0) -> None:
        self.port = free_port()
        self.server = dist.TCPStore("127.0.0.1", self.port, world_size, True, timedelta(seconds=30),
                                    wait_for_workers=False, multi_tenant=True)
        self.coordinators = [
            Coordinator(dist.PrefixStore(key_prefix("0"),
                                         dist.TCPStore("127.0.0.1", self.port, world_size, False,
                                                       timedelta(seconds=30))),
                        rank, world_size, timeout_s, f"127.0.0.1:{self.port}", hosts_store=rank == 0)
            for rank in range(world_size)]

    def run(self, work, ranks=None) -> dict[int, object]:
        """``work(coordinator)`` on a thread per rank; what each returned or raised, by rank."""
        results: dict[int, object] = {}

        def target(rank: int) -> None:
            try:
                results[rank] = work(self.coordinators[rank])
            except Exception as exc:  # collected for the test to inspect
                results[rank] = exc

        threads = [threading.Thread(target=target, args=(rank,))
                   for rank in (range(len(self.coordinators)) if ranks is None else ranks)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        return results


def test_every_rank_joins_then_steps_together():
    ranks = Ranks(3)
    assert ranks.run(lambda c: c.join()) == {0: None, 1: None, 2: None}
    steps = ranks.run(lambda c: [c.check_in(f"size {n}", f"s{n}") for n in range(5)])
    assert steps == {rank: [0] * 5 for rank in range(3)}


def test_ranks_learn_who_shares_their_host_and_any_ranks_problem():
    # before NCCL starts: the local rank of a rank no launcher numbered, and one verdict for all
    hosts = ["b", "a", "b", "a"]
    ranks = Ranks(4)
    on_host = ranks.run(lambda c: c.peers_under("hosts", hosts[c.rank]))
    assert on_host == {0: [0, 2], 1: [1, 3], 2: [0, 2], 3: [1, 3]}
    claims = ranks.run(lambda c: c.peers_under("devices", f"{hosts[c.rank]}|GPU-{c.rank % 2}"))
    assert claims[0] == [0, 2] and claims[1] == [1, 3]  # two ranks of each host claimed one device
    verdicts = ranks.run(lambda c: c.agree_on_problem("devices", "shared" if c.rank == 2 else None))
    assert verdicts == dict.fromkeys(range(4), "shared")
    assert ranks.run(lambda c: c.agree_on_problem("other", None)) == dict.fromkeys(range(4))


def test_the_store_s_host_stays_until_every_rank_has_read_the_problem_that_ends_the_start():
    # rank 0 hosts the store and arrives last: it must not return (and exit, closing the store) while
    # the others still sleep between polls for the verdict
    def work(coordinator: Coordinator) -> tuple[str | None, int]:
        if coordinator.rank == 0:
            time.sleep(0.3)
        verdict = coordinator.agree_on_problem("devices", "shared" if coordinator.rank == 3 else None)
        return verdict, coordinator._call("add", "devices/read", 0)

    found = Ranks(4).run(work)
    assert {rank: verdict for rank, (verdict, _) in found.items()} == dict.fromkeys(range(4), "shared")
    assert found[0][1] == 4  # when the host returned, all four had read it


def test_a_rank_that_joins_after_the_deadline_reads_the_verdict_before_the_host_leaves():
    # rank 1 comes after rank 0's deadline: it must still find the store up and read who was missing
    # (a rank that loses the store mid-request gets torch's C++ frames on its stderr)
    def work(coordinator: Coordinator) -> tuple[str, int]:
        if coordinator.rank == 1:
            time.sleep(0.5)
        try:
            coordinator.join()
        except RunError as exc:
            return str(exc), coordinator._call("add", "joined/read", 0)
        return "joined", 0

    found = Ranks(2, timeout_s=0.2).run(work)
    assert "rank 1 of 2 did not join" in found[0][0] and "did not join" in found[1][0]
    assert found[0][1] == 2  # when the host returned, the late rank had read it too


def test_after_every_rank_failed_the_host_leaves_last():
    # every rank failed at once (a --timeout too short for the start): the others still read the
    # accounts from the store after the host has read its own
    def work(coordinator: Coordinator) -> int:
        coordinator.report_failure(f"rank {coordinator.rank} timed out")
        coordinator.await_accounts(grace_s=5)
        if coordinator.rank != 0:
            time.sleep(0.4)
        coordinator.peer_accounts(include_failed=False)
        coordinator.leave()
        return coordinator._call("add", "left", 0)

    found = Ranks(3).run(work)
    assert found[0] == 3  # when the host returned, both others had left


def test_a_rank_whose_peer_went_first_gives_the_peers_account_and_others_say_only_their_own():
    # rank 1 timed out and reported it before going; rank 0's op then failed with "Connection closed by
    # peer", which names no cause: its account carries rank 1's. A rank failing on its own (rank 2)
    # leaves the others' failures to them.
    def work(coordinator: Coordinator) -> str:
        if coordinator.rank == 1:
            return coordinator.account_for_failure("rank 1: did not complete within 0.001 s (--timeout)", 5)
        time.sleep(0.3)  # after rank 1's report, as a peer's going follows it
        if coordinator.rank == 2:
            return coordinator.account_for_failure("rank 2: did not complete within 0.001 s (--timeout)", 5)
        detail = "rank 0: Connection closed by peer [127.0.0.1]:3739"
        return coordinator.account_for_failure(detail, 5)

    found = Ranks(3).run(work)
    assert "rank 1: did not complete within 0.001 s (--timeout)" in found[0]
    assert "ranks 1-2 failed (rank 1:" in found[0]
    assert found[2] == ""
    # of several failed peers, the account gives the one whose failure was its own
    def second_hand(coordinator: Coordinator) -> str:
        if coordinator.rank > 0:
            coordinator.report_failure(f"rank {coordinator.rank}: " + (
                "Connection reset by peer" if coordinator.rank == 1 else "did not complete within 5 s"))
            time.sleep(0.5)
            return ""
        while coordinator._call("add", "trouble", 0) < 2:  # both reports are in
            time.sleep(0.01)
        return coordinator.peer_accounts()

    assert Ranks(3).run(second_hand)[0] == "ranks 1-2 failed (rank 2: rank 2: did not complete within 5 s)"
    # and with no peer's failure to give, which ranks said nothing, as any failed rank's account does
    lone = Ranks(2, timeout_s=0.5).run(lambda c: c.account_for_failure("Connection reset by peer", 0.2),
                                       ranks=[0])
    assert lone[0] == "rank 1 did not report (hung, or died unseen)"


def test_old_step_keys_are_removed():
    ranks = Ranks(2)
    ranks.run(lambda c: [c.check_in("a", f"s{n}") for n in range(3)])
    keys_after_3 = ranks.server.num_keys()
    ranks.run(lambda c: [c.check_in("a", f"t{n}") for n in range(30)])
    assert ranks.server.num_keys() <= keys_after_3 + 1  # not 3 keys per step, forever


def test_a_stop_asked_by_one_rank_is_agreed_by_all():
    ranks = Ranks(3)

    def work(coordinator: Coordinator) -> list[int]:
        asked = 15 if coordinator.rank == 1 else 0
        return [coordinator.check_in("first", "1"), coordinator.check_in("second", "2", asked)]

    assert ranks.run(work) == {rank: [0, 15] for rank in range(3)}


def test_missing_rank_is_named_with_where_it_is():
    ranks = Ranks(3, timeout_s=0.5)
    ranks.run(lambda c: c.check_in("size 1 KiB", "1"))
    # rank 2 goes on to another size: the others wait for it at 2 KiB, it waits for them at 4 KiB
    results = ranks.run(lambda c: c.check_in("size 4 KiB" if c.rank == 2 else "size 2 KiB",
                                             "4" if c.rank == 2 else "2"))
    for rank in (0, 1):
        message = str(results[rank])
        assert isinstance(results[rank], RunError)
        assert message.startswith(f"size 2 KiB: timed out after 0.5 s on rank {rank}: rank 2 did not arrive")
        assert "rank 2 at size 4 KiB instead" in message
    assert "ranks 0-1 did not arrive (ranks 0-1 at size 2 KiB instead)" in str(results[2])


def test_ranks_started_with_other_settings_are_told_apart():
    ranks = Ranks(2, timeout_s=0.5)
    results = ranks.run(lambda c: c.check_in("size 1 KiB", f"size 1 KiB|iters {5 + c.rank}"))
    assert "rank 1 did not arrive (rank 1 at 'size 1 KiB|iters 6' (here 'size 1 KiB|iters 5') instead)" \
        in str(results[0])


def test_rank_that_is_still_busy_is_named():
    ranks = Ranks(2, timeout_s=0.5)
    ranks.run(lambda c: c.check_in("size 1 KiB", "1"))
    results = ranks.run(lambda c: c.check_in("size 2 KiB", "2"), ranks=[0])
    assert "rank 1 did not arrive (rank 1 still in size 1 KiB)" in str(results[0])


class StopsAt:
    """A rank's store that stops answering it at one request, as a rank stopped (SIGSTOP) right there
    would: before the request (``after=False``) or once it is done. ``release`` lets it go on."""

    def __init__(self, store, method: str, key_end: str, after: bool) -> None:
        self._store, self._method, self._key_end, self._after = store, method, key_end, after
        self.release = threading.Event()

    def __getattr__(self, name: str):
        request = getattr(self._store, name)
        if name != self._method:
            return request

        def stopping(key, *args):
            if not key.endswith(self._key_end):
                return request(key, *args)
            if not self._after:
                self.release.wait(30)
            result = request(key, *args)
            if self._after:
                self.release.wait(30)
            return result
        return stopping


@pytest.mark.parametrize("after", [False, True], ids=["before-counting-in", "counted-in-last"])
def test_a_rank_stopped_inside_its_check_in_arrived_and_the_step_goes_on(after):
    # Rank 2 said it is at the step (at/2), then stopped: before counting itself in, or as the last to
    # count itself in, before saying all are there. It did arrive: the others go on (the collective after
    # the step names it if it stays stopped), rather than time out naming nobody.
    ranks = Ranks(3, timeout_s=0.5)
    stalled = StopsAt(ranks.coordinators[2]._store, "add", "/n", after)
    ranks.coordinators[2] = Coordinator(stalled, 2, 3, 0.5, "here")
    watcher = dist.PrefixStore(key_prefix("0"), dist.TCPStore("127.0.0.1", ranks.port, 3, False,
                                                              timedelta(seconds=30)))
    results = {}

    def counted_in() -> int:
        return watcher.add("step/1/1/n", 0)

    def check_in(rank: int) -> None:
        try:
            results[rank] = ranks.coordinators[rank].check_in("size 1 KiB", "1")
        except Exception as exc:  # collected for the assertions
            results[rank] = exc

    threads = [threading.Thread(target=check_in, args=(rank,)) for rank in range(3)]
    try:
        for thread in threads[:2]:
            thread.start()
        while after and counted_in() < 2:  # rank 2 the last to count itself in
            time.sleep(0.01)
        threads[2].start()
        for thread in threads[:2]:
            thread.join(timeout=30)
        assert counted_in() == (3 if after else 2)  # where rank 2 stopped
        assert results == {0: 0, 1: 0}, results
    finally:
        stalled.release.set()
        for thread in threads:
            thread.join(timeout=30)


def test_rank_that_never_joins_is_named_on_every_rank_that_did():
    ranks = Ranks(4, timeout_s=0.5)
    results = ranks.run(lambda c: c.join(), ranks=[0, 1])
    for rank in (0, 1):
        assert "ranks 2-3 of 4 did not join" in str(results[rank])


def _with_board(ranks: Ranks, board: LauncherBoard, timeout_s: float = 20) -> Coordinator:
    """Rank 0 of ``ranks`` (which the test keeps: its store goes with it) as commbench's local launcher
    starts it: with the launcher's board."""
    return Coordinator(ranks.coordinators[0]._store, 0, 3, timeout_s, "here", hosts_store=True, board=board)


def test_a_failed_rank_waits_for_the_local_launchers_verdict_however_late(tmp_path):
    # The launcher saw rank 2 die but is slow to say so (a crowded host): past the 2 s grace, rank 0
    # still names the death, since it waits for two launcher passes after its own report.
    board = LauncherBoard(tmp_path)
    board.record_pass(7)
    ranks = Ranks(3, timeout_s=20)
    coordinator = _with_board(ranks, board)

    def slow_launcher() -> None:
        time.sleep(3.0)
        board.record_death(2, "SIGKILL")
        board.record_pass(8)
        board.record_pass(9)

    threading.Thread(target=slow_launcher).start()
    coordinator.report_failure("all_reduce failed: Connection reset by peer")
    started = time.monotonic()
    coordinator.await_accounts(grace_s=2)
    assert 2.5 < time.monotonic() - started < 10
    assert coordinator.peer_accounts(include_failed=False) == "rank 2 died (SIGKILL)"


def test_without_a_death_the_launchers_passes_end_the_grace(tmp_path):
    board = LauncherBoard(tmp_path)
    board.record_pass(1)
    ranks = Ranks(3, timeout_s=20)
    coordinator = _with_board(ranks, board)
    stop = threading.Event()

    def launcher() -> None:
        count = 1
        while not stop.is_set():
            time.sleep(0.05)
            count += 1
            board.record_pass(count)

    threading.Thread(target=launcher, daemon=True).start()
    coordinator.report_failure("all_reduce failed")
    started = time.monotonic()
    coordinator.await_accounts(grace_s=0.5)
    stop.set()
    assert time.monotonic() - started < 5  # the grace and two passes, not the 20 s timeout
    silent = "ranks 1-2 did not report (hung, or died unseen)"
    assert coordinator.peer_accounts(include_failed=False) == silent


def test_the_host_does_not_wait_for_dead_ranks_to_leave(tmp_path):
    # rank 2 died (the local launcher's board says so), rank 1 failed and left: the host goes at once
    board = LauncherBoard(tmp_path)
    board.record_death(2, "SIGKILL")
    ranks = Ranks(3, timeout_s=20)
    ranks.coordinators[1].leave()
    host = _with_board(ranks, board)
    started = time.monotonic()
    host.leave()
    assert time.monotonic() - started < 1.5  # not the 2 s it waits for a rank that may still read
    assert host._call("add", "left", 0) == 2


def test_a_death_on_the_board_stops_ranks_waiting_at_a_step_and_names_the_rank(tmp_path):
    # rank 0's death too: the store cannot carry it (rank 0 hosts it), the board can
    board = LauncherBoard(tmp_path)
    ranks = Ranks(3, timeout_s=20)
    coordinator = Coordinator(ranks.coordinators[1]._store, 1, 3, 20, "here", board=board)
    threading.Timer(0.3, board.record_death, args=(0, "SIGKILL")).start()
    started = time.monotonic()
    with pytest.raises(RunError, match=r"rank 0 died \(SIGKILL\)"):
        coordinator.check_in("size 1 KiB", "1")
    assert time.monotonic() - started < 10


def test_a_peer_failure_is_reported_to_ranks_waiting_at_a_step():
    ranks = Ranks(3, timeout_s=20)
    threading.Timer(0.3, lambda: ranks.coordinators[2].report_failure("out of memory")).start()
    results = ranks.run(lambda c: c.check_in("size 2 KiB", "2"), ranks=[0, 1])
    for rank in (0, 1):
        assert "rank 2 failed (rank 2: out of memory)" in str(results[rank])


@pytest.mark.parametrize("ranks, text", [
    ([3], "rank 3"), ([0, 1, 2, 5, 7, 8], "ranks 0-2, 5, 7-8"), ([4, 2], "ranks 2, 4")])
def test_format_ranks(ranks, text):
    assert format_ranks(ranks) == text


def test_a_store_request_without_an_answer_ends_at_its_deadline_and_so_do_the_later_ones():
    # torch's client blocks without end on a silent host; a request that never returns stands for it
    requests = Requests(0.2)
    assert requests.call("add 'joined'", lambda key, amount: amount + 1, "joined", 1) == 2
    with pytest.raises(ValueError, match="its own error"):  # a request's own failure is the caller's
        requests.call("get 'x'", lambda: (_ for _ in ()).throw(ValueError("its own error")))
    silent = threading.Event()
    started = time.monotonic()
    with pytest.raises(Unanswered, match=r"no answer to add 'trouble' within 0.2 s"):
        requests.call("add 'trouble'", silent.wait)
    assert 0.15 < time.monotonic() - started < 5
    started = time.monotonic()
    with pytest.raises(Unanswered, match=r"no answer to add 'trouble' within 0.2 s"):
        requests.call("check 'joined'", lambda: True)  # the client is stuck: no second wait
    assert time.monotonic() - started < 0.1
    silent.set()
