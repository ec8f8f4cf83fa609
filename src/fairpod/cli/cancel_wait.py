"""``cancel-job`` when the server takes longer than the client waits for an answer (``$FAIRPOD_TIMEOUT``, 30 s):
a large job array's cancel goes on in the server, so the CLI does not say it failed; it follows the job with
``GET /jobs/<ref>`` and says how far it got (on stderr), until every task has ended or nothing moved for
:data:`STALL` seconds. Before, a 10,000-task array's cancel that worked was reported as ``failed: timed out``.
"""

from __future__ import annotations

import sys
import time

from fairpod.cli.client import Client, TimedOut, default_timeout
from fairpod.cli.errors import CliError

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any

ENDED = ("Succeeded", "Failed", "Cancelled")
STALL = 120.0  # seconds without a task ending before the CLI stops following and says where it stands
EVERY = 2.0  # seconds between looks


def follow(ref: str, params: dict[str, Any], why: TimedOut) -> dict[str, Any]:
    """After ``why`` (the cancel's answer did not come in time): the job (with ``array_tasks`` for an array) once
    the cancel has ended every task, or once a single job is stopping; CliError (not "failed") if it stalls."""
    print(f"fairpod: {why}; following the cancel", file=sys.stderr)
    c = Client(timeout=max(default_timeout(), 30.0))
    start = last_change = time.monotonic()
    last = -1
    while True:
        try:
            j = c.get(f"/jobs/{ref}", **params)
        except TimedOut:  # the server is busy with the cancel itself: look again
            j = None
        if j is not None:
            tasks = j.get("array_tasks")
            if tasks is None:  # one job: its stop was asked for once its reason says so
                if j["state"] in ENDED or "cancel" in (j.get("reason") or ""):
                    return j
                tasks = [j]
            ended = sum(t["state"] in ENDED for t in tasks)
            if ended == len(tasks):
                return j
            if ended != last:
                last, last_change = ended, time.monotonic()
                print(f"fairpod: cancelling {j['name']}: {ended} of {len(tasks)} tasks ended "
                      f"({time.monotonic() - start:.0f} s)", file=sys.stderr)
        if time.monotonic() - last_change > STALL:
            raise CliError(f"the cancel of {ref} has not ended every task ({max(last, 0)} ended) after "
                           f"{time.monotonic() - start:.0f} s; `fairpod get-job {ref}` shows where it stands")
        time.sleep(EVERY)
