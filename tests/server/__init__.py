"""Tests of fairpod.server, laid out as src/fairpod/server is: a test file sits in the folder of the module it mainly
tests (tests/server/core/ for server/core/ and its transitions, tests/server/api/ for server/api/, ...; a module at
the top, such as errors.py or runs.py, has its test here). A live scenario that crosses modules sits where its main
responsibility lives: a job's life on the control plane (admission, placement, resize, restarts, readiness, the
watchdog, Ray jobs, crashes) in core/; what the API answers and how (input, errors, logs, metrics) in api/; who may
do what and as whom in access/; a service's or a space's life, whose transitions are core's, in services/, beside
their address and proxy; the server as a process and its state directory (up/down, startup's checks, backup and
restore, the clock) in runtime/. Here stay the shared helpers (conftest.py's fixtures, seen by every folder below;
inproc.py, inproc_api.py, faults.py, ha_cluster.py, rayjob_program.py) and test_interrupted_run.py, a test of the
suite's own clean-up with its child run interrupted.py."""
