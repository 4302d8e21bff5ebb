"""The fork server's first import (rank_start.PRELOAD): SIGINT ignored from here on, then let through.

The launcher starts the server with SIGINT blocked (spawn.forking_context): a Ctrl-C while the server
starts stays pending in the launcher, which takes it once the server is up, rather than killing the
server with a traceback. The server shares the launcher's terminal, so it ignores SIGINT for good (a
Ctrl-C in the seconds it imports torch would print its traceback; the launcher forwards signals to the
ranks, and a rank sets its own), then unblocks it, which drops one it held. Imported anywhere SIGINT is
not blocked, it changes nothing.
"""

import signal

if signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, ()):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
