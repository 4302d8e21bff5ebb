"""`python -m commbench` and `torchrun ... -m commbench`.

``python -m`` puts the working directory first on the import path, so a folder named commbench there (a
checkout's top folder, say) is imported instead of the installed package, as a namespace package with
nothing in it. That is said in one line, not as an ImportError on every rank, with the fix a launcher's
user can apply: PYTHONSAFEPATH=1 is ``python -P`` for every process that inherits it (torchrun's ranks
included, whose command line the user does not write). The ranks commbench spawns itself start that way,
with the working directory off the path (running/spawn.py).
"""

import sys

import commbench


def _hiding_folder() -> str | None:
    """The folder imported as commbench instead of the package, when one hides it."""
    spec = commbench.__spec__
    if spec is None or spec.origin is not None:  # the package itself
        return None
    return ", ".join(spec.submodule_search_locations or ["?"])


if __name__ == "__main__":
    hiding = _hiding_folder()
    if hiding is not None:
        print(f"commbench: error: the folder {hiding} hides the installed commbench package (python -m "
              "puts the working directory first on the import path): run from another directory, or set "
              "PYTHONSAFEPATH=1 for the ranks (export it; mpirun: -x PYTHONSAFEPATH=1)", file=sys.stderr)
        sys.exit(2)
    from commbench.cli import main

    sys.exit(main())
