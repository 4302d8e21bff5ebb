"""`commbench diagnose DUMPS...`'s registration (running/features.py: a command that starts no ranks, its
options DiagnoseConfig's declared fields), and the verdict a failed commbench run's error line carries.

Exit status: 0 nothing found, 1 a culprit found, 2 bad input (UsageError: one line naming the file).
Importing this module imports neither torch nor numpy: `commbench --help` stays fast.
"""

import json
import re
import sys
from pathlib import Path

from commbench.diagnose.config import DiagnoseConfig, resolve_diagnose
from commbench.diagnose.verdict import Verdict
from commbench.errors import UsageError, brief
from commbench.running.features import Feature, register_feature

# What a failed run's RunError ends with when its ranks left their dumps (running/rank.py writes it).
DUMPS_NAMED = re.compile(r"; Flight Recorder dumps in (.+)$")


def run_diagnose(config: DiagnoseConfig) -> int:
    """The verdict on the dumps, printed (text, or JSON for tools); the exit status says whether a
    culprit was found."""
    verdict = diagnose_files(list(config.dumps), config.world_size)
    if config.as_json:
        json.dump(verdict.as_dict(), sys.stdout, indent=1)
        print()
    else:
        from commbench.diagnose.render import render

        print("\n".join(render(verdict)))
    return 1 if verdict.culprit_found else 0


DIAGNOSE_FEATURE = register_feature(Feature(
    name="diagnose",
    summary="Why a job hung or failed, from every rank's Flight Recorder dump (a directory, globs or "
            "files): per process group where progress stopped, who is to blame and why. Exit 0: nothing "
            "found; 1: a culprit found. See docs/diagnose.md.",
    config=DiagnoseConfig, resolve=resolve_diagnose, start=run_diagnose))


def diagnose_files(sources: list[str], world_size: int | None = None) -> Verdict:
    """The verdict on the dumps ``sources`` name; hosts come from a commbench run's results.json when
    the dumps sit in its run directory."""
    from commbench.diagnose.engine import diagnose
    from commbench.diagnose.loading import load_job

    return diagnose(load_job(sources), world_size, hosts_beside(sources))


def hosts_beside(sources: list[str]) -> dict[int, str]:
    """rank -> host from results.json in the directory above a single dumps directory (a commbench run
    directory); empty when there is none or it does not read."""
    if len(sources) != 1 or not Path(sources[0]).is_dir():
        return {}
    try:
        meta = json.loads((Path(sources[0]).resolve().parent / "results.json").read_text()).get("meta", {})
    except (OSError, ValueError, AttributeError):
        return {}
    names = meta.get("hostnames") if isinstance(meta, dict) else None
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        return {}
    return dict(enumerate(names))


def with_verdict(message: str) -> str:
    """A failed run's error line with the verdict on the dumps it names appended (unchanged when it
    names none, or they do not read)."""
    found = DUMPS_NAMED.search(message)
    if found is None or not Path(found.group(1)).is_dir():
        return message
    try:
        verdict = diagnose_files([found.group(1)])
    except UsageError as exc:
        return f"{message}; diagnose could not read them: {exc}"
    except Exception as exc:  # noqa: BLE001 - the run's own failure must still be said, whole
        return f"{message}; diagnose failed on them: {brief(exc)}"
    if not verdict.findings:
        return f"{message}; diagnose: nothing found in them"
    first = verdict.findings[0]
    return f"{message}; diagnose: {first.kind}: {first.reading}"
