"""Recordings of real torch programs (tests/replay_programs.py) and their replays by the real CLI, made on
first use, once per session (the `recordings` fixture in conftest.py)."""

from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess

from tests.dist_helpers import commbench, run_ranks


@dataclass
class Recording:
    name: str
    directory: Path
    world_size: int
    kind: str  # flight or profiler


@dataclass
class Replayed:
    recording: Recording
    result: CompletedProcess
    json_path: Path
    record_dir: Path


PROGRAMS = {"ddp": (2, "flight"), "fsdp2": (2, "flight"), "mesh_2x2": (4, "flight"),
            "pipeline": (2, "profiler")}  # name -> (ranks, recorder)


class Recordings:
    """Each program's recording and its replay, made on first use, once per session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: dict[str, Recording] = {}
        self.replays: dict[str, Replayed] = {}

    def recording(self, name: str) -> Recording:
        if name not in self.made:
            from tests import replay_programs  # torch-heavy: only once a recording is asked for

            world_size, kind = PROGRAMS[name]
            out = self.root / name
            for directory in (out / "profiler", out / "flight") if kind == "profiler" else (out,):
                directory.mkdir(parents=True)
            run_ranks(getattr(replay_programs, name), world_size, str(out), timeout=240)
            where = out / "profiler" if kind == "profiler" else out
            self.made[name] = Recording(name, where, world_size, kind)
        return self.made[name]

    def replay(self, name: str) -> Replayed:
        """`commbench replay DIR --json OUT` of the recording, with --check and --record."""
        if name not in self.replays:
            found = self.recording(name)
            out = self.root / f"replay-{name}"
            result = commbench("replay", str(found.directory), "--iters", "2", "--check", "--record",
                               str(out / "recorded" / "rank_"), "--json", str(out / "rows.json"), "--csv",
                               str(out / "rows.csv"), timeout=300)
            self.replays[name] = Replayed(found, result, out / "rows.json", out / "recorded")
        return self.replays[name]
