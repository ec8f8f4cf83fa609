"""The control plane's core: one object that owns the store, the executor and the engine's snapshot.

Two copies of the truth live here: the store (it survives a crash) and, in memory, the engine's snapshot and
the live attempts (``runs``, ``slots``). Each state change has exactly one owner, a function of
:mod:`.transitions` handed the core's state (:class:`.state.CoreState`), that writes the store, then the memory,
under the one lock; the table of transitions and their owners is in docs/architecture.md ("One owner per
transition, one lock"). The modules:

- :mod:`.plane`: the lock, start-up recovery, ``reload`` after a failed store write, the public commands
  (``ControlPlane``, whose bases are ``Memory``, ``Loop`` and ``Door``, implements
  :class:`fairpod.server.core.api.Core`, the door every other module uses);
- :mod:`.memory`: the snapshot built from the store, the live attempts and their accelerator slots;
- :mod:`.transitions`: one module per transition: ``submit`` (queueing jobs and job arrays: group commit,
  admissibility), ``admit`` (admit, preempt, why a job waits), ``launch`` (ready, launch with ``build_launch``),
  ``exit`` (a replica's exit), ``stop`` (a stop begun, stopped, finish), ``resize`` (shrink and grow of an elastic
  job's running attempt), ``serving`` (services), ``nodes`` (cordon, labels, deep health check, fault, recovery), ``rayjobs``, and what other modules did to
  the core's memory before: ``backoff`` (a restart's backoff), ``readiness`` (gang readiness and its timeout),
  ``restarts`` (restarts in place), ``array_holds`` (job arrays' throttle);
- :mod:`.loop`: ``reconcile_once`` and the periodic keepers the composition root registers;
- :mod:`.published`: what reads answer with while a turn holds the lock (published at each turn's end);
- :mod:`.worker` and :mod:`.foreign`: ``fairpod up --api-workers``: an API worker's view (submits checked and
  committed with the submit transition's own functions) and the keeper that takes the jobs they committed;
- :mod:`.api`: the door: named commands and read-only queries (:mod:`.queries`).

Only the composition root (``fairpod.server.runtime.wiring``) builds a :class:`ControlPlane`; every other module of
``fairpod`` imports :mod:`.api` and :mod:`.queries` only (``tests/test_layers.py``).

The store is written first, then the memory. When a store write fails, the memory is thrown away and
rebuilt from the store (``ControlPlane.reload``), so the two never disagree for longer than one call.
"""

from fairpod.server.core.foreign import Foreign
from fairpod.server.core.loop import Beside, standard_keepers
from fairpod.server.core.plane import ControlPlane
from fairpod.server.core.transitions.services import Services
from fairpod.server.core.worker import Poke, WorkerCore

__all__ = ["Beside", "ControlPlane", "Foreign", "Poke", "Services", "WorkerCore",
           "standard_keepers"]  # for the composition root (fairpod.server.runtime.wiring)
