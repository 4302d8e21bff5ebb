"""The NCCL log parser on real NCCL lines (tests/data/nccl, each file's source in its README): what NCCL
chose per call, what init said per communicator, and the count of every line it did not use."""

from pathlib import Path

import pytest

from commbench.provenance.nccl_debug import NcclLogReader
from commbench.provenance.nccl_log import NcclLog, parse_tuning, transport_name

DATA = Path(__file__).parent / "data" / "nccl"


def read_log(path: Path) -> NcclLog:
    """A fixture's whole log, as rank 0's reader would have fed it line by line."""
    log = NcclLog()
    log.feed_text(path.read_text(errors="replace"))
    return log


def _lines(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


def _line_with(name: str, text: str) -> str:
    return next(line for line in _lines(name) if text in line)


def test_every_fixture_has_its_source_in_the_readme():
    readme = (DATA / "README.md").read_text()
    for path in DATA.glob("*.log"):
        row = next((line for line in readme.splitlines() if line.startswith(f"| {path.name} |")), "")
        assert "https://github.com/" in row, path.name


@pytest.mark.parametrize("message, expected", [
    # 2.20-2.22: numbers, no function
    ("1024 Bytes -> Algo 0 proto 0 time 25.331232", (None, 1024, "TREE", "LL", None)),
    ("8589934592 Bytes -> Algo 1 proto 2 time 86069.968750", (None, 8589934592, "RING", "SIMPLE", None)),
    ("262144 Bytes -> Algo 0 proto 1 time 54.707825", (None, 262144, "TREE", "LL128", None)),
    # 2.25 on: names and the channel range
    ("AllReduce: 16777216 Bytes -> Algo TREE proto LL128 channel{Lo..Hi}={0..15}",
     ("AllReduce", 16777216, "TREE", "LL128", 16)),
    ("AllReduce: 33554432 Bytes -> Algo NVLS_TREE proto SIMPLE channel{Lo..Hi}={0..15}",
     ("AllReduce", 33554432, "NVLS_TREE", "SIMPLE", 16)),
])
def test_tuning_lines_of_each_version_give_algorithm_protocol_and_channels(message, expected):
    found = [line for name in ("issue1453-h100-tuning-v1.log", "issue1752-h200-tuning-v3.log")
             for line in _lines(name) if line.endswith(message)]
    assert found, "the message is a fixture line"
    tuning = parse_tuning(message)
    assert tuning is not None
    assert (tuning.func, tuning.nbytes, tuning.algorithm, tuning.protocol, tuning.channels) == expected


def test_a_tuning_line_is_the_choice_of_the_call_before_it():
    log = NcclLog()
    # FSDP's 1-element float32 all_reduce on 2 ranks, then a 4-byte tuning line (2.20-2.22 format)
    log.feed(_line_with("torchtitan1369-coll-fsdp.log", "AllReduce: opCount 10"))
    log.feed(_line_with("issue1453-h100-tuning-v1.log", " 4 Bytes -> Algo 0"))
    choice = log.choice("AllReduce", 1, 7, 2)
    assert choice is not None and (choice.algorithm, choice.protocol) == ("TREE", "LL")
    assert log.choice("AllReduce", 1, 7, 4) is None  # another communicator size
    assert log.choice("AllGather", 1, 7, 2) is None
    assert log.counts["coll"] == 1 and log.counts["tuning"] == 1 and "tuning_unattributed" not in log.counts


def test_a_tuning_line_whose_bytes_fit_no_call_is_counted_not_attributed():
    log = NcclLog()
    log.feed(_line_with("torchtitan1369-coll-fsdp.log", "AllReduce: opCount 10"))  # 4 bytes
    log.feed(_lines("issue1752-h200-tuning-v3.log")[0])  # 16 MiB
    assert log.counts["tuning_unattributed"] == 1
    choice = log.choice("AllReduce", 1, 7, 2)
    assert choice is not None and choice.algorithm == "" and choice.protocol == ""


def test_tuning_lines_alone_are_counted_as_unattributed():
    for name in ("issue1453-h100-tuning-v1.log", "issue1595-tuning-v1-bare.log",
                 "issue1752-h200-tuning-v3.log"):
        log = read_log(DATA / name)
        assert log.counts["tuning"] == log.counts["tuning_unattributed"] > 0


def test_coll_lines_behind_a_launchers_prefix_are_read():
    log = read_log(DATA / "issue1193-coll-allreduce-ray.log")
    assert log.counts["coll"] == 3 and log.counts.get("ignored", 0) == 0
    assert log.choice("AllReduce", 7382228, 7, 128) is not None
    assert log.choice("AllReduce", 7066572, None, 128) is not None
    assert {comm.nranks for comm in log.comms.values()} == {128}


def test_fsdp_collectives_are_told_apart_by_function_and_count():
    log = read_log(DATA / "torchtitan1369-coll-fsdp.log")
    assert log.counts["coll"] == 7
    for function in ("AllGather", "ReduceScatter"):
        assert log.choice(function, 2097152, 7, 2) is not None
    assert log.choice("AllGather", 2097152, 9, 2) is None  # bfloat16: no such call


def test_send_and_recv_calls_get_the_transport_their_communicator_connected_with():
    log = NcclLog()
    log.feed_text((DATA / "issue584-sendrecv.log").read_text())
    # connections set up after a call belong to its communicator (NCCL 2.22's runtime connect)
    log.feed(_line_with("issue952-p2p-ipc-and-socket.log", "via P2P/IPC/read"))
    choice = log.point_to_point(2)
    assert choice is not None and choice.transport == "P2P/IPC" and choice.algorithm == ""
    assert log.point_to_point(8) is None


@pytest.mark.parametrize("name, transports", [
    ("issue952-p2p-ipc-and-socket.log", {"P2P/IPC", "NET/Socket"}),
    ("nccl-tests228-shm-old.log", {"SHM"}),
    ("issue671-p2p-direct-old.log", {"P2P/direct"}),
    ("issue1814-net-ibext.log", {"NET/IBext_v8"}),
    ("issue1453-h100-tuning-v1.log", {"NET/IBext_v8"}),
])
def test_connection_lines_of_every_form_give_their_transport(name, transports):
    log = read_log(DATA / name)
    assert log.unattributed.transports == transports  # no init line names their communicator
    assert log.counts["connection"] == sum(" via " in line for line in _lines(name))


def test_transport_names_keep_kind_and_plugin():
    assert transport_name("NET/IB/0/GDRDMA") == "NET/IB"
    assert transport_name("P2P/CUMEM/read") == "P2P/CUMEM"
    assert transport_name("SHM/direct/direct") == "SHM"


def test_init_start_names_the_communicator_its_rings_belong_to():
    log = read_log(DATA / "issue1737-nccl-2.21-init.log")
    assert log.version == "2.21.5+cuda12.4"
    comm = log.comms["0x5594b5eb16a0"]
    assert comm.nranks == 2 and comm.ring_channels == 4
    assert log.counts["ring"] == 2 and log.counts["comm"] == 2


def test_without_init_start_the_counts_before_init_complete_are_its_communicators():
    log = read_log(DATA / "issue1189-h20-init-and-table.log")
    first = log.comms["0x5a0ca40"]  # the first Init COMPLETE after the counts
    assert (first.coll_channels, first.collnet_channels, first.nvls_channels, first.nranks) == (8, 0, 0, 4)
    # the nccl-tests table lines are not NCCL's; threadThresholds is NCCL's but not read
    assert log.counts["not_nccl"] == 4 and log.counts["ignored"] == 1


def test_nvls_channel_counts_are_read():
    log = read_log(DATA / "issue1814-nvls-init.log")
    comm = log.comms["0x557fe785f7a0"]
    assert (comm.coll_channels, comm.nvls_channels, comm.nranks) == (16, 16, 64)
    assert log.counts["ignored"] == 4  # 'Connected NVLS tree' and threadThresholds, twice each


def test_version_written_as_an_info_line_is_read():
    assert read_log(DATA / "issue1936-nccl-2.27-version.log").version == "2.27.5+cuda12.9"


def test_every_line_is_counted_once_and_nothing_raises():
    log = NcclLog()
    junk = ["", "\x00\xff garbage", "NCCL INFO", "x NCCL INFO Channel 99/ :",
            "host:1:2 [0] NCCL INFO 12 Bytes ->",
            "host:1:2 [0] NCCL INFO AllReduce: opCount zz sendbuff", "NCCL WARN something"]
    lines = junk + [line for path in sorted(DATA.glob("*.log")) for line in path.read_text().splitlines()]
    for line in lines:
        log.feed(line)
    assert sum(log.counts.values()) - log.counts["tuning_unattributed"] == len(lines)


def test_the_reader_parses_only_whole_lines_as_the_file_grows(tmp_path):
    path = tmp_path / "nccl.host.1.log"
    coll = _line_with("torchtitan1369-coll-fsdp.log", "AllReduce: opCount 10")
    tuning = _line_with("issue1453-h100-tuning-v1.log", " 4 Bytes -> Algo 0")
    reader = NcclLogReader([path])
    reader.refresh()  # not there yet: nothing, no error
    path.write_text(coll + "\n" + tuning[:30])
    reader.refresh()
    assert reader.log.counts["coll"] == 1 and reader.log.counts["tuning"] == 0
    with open(path, "a") as handle:
        handle.write(tuning[30:] + "\n")
    reader.refresh()
    choice = reader.choice_for("all_reduce", "float32", 1, 2)
    assert choice is not None and choice.algorithm == "TREE"
    assert reader.choice_for("all_reduce", "bfloat16", 1, 2) is None
