"""Programs the Ray tests run as job replicas."""

# argv: total steps [pids]. Resumes from its rank's checkpoint, checkpoints every 20 steps and on SIGTERM;
# with "pids" it also starts a setsid grandchild and writes both PIDs next to its checkpoint.
TRAINER = r'''
import os, pathlib, signal, subprocess, sys, time
ck = pathlib.Path(os.environ["FAIRPOD_CHECKPOINT_DIR"])
rank = os.environ["RANK"]
f = ck / f"rank{rank}.txt"
step = int(f.read_text() or 0) if f.exists() else 0
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))  # before "start": a test that saw it may preempt
print(f"start step={step} restart={os.environ['FAIRPOD_RESTART_COUNT']} world={os.environ['WORLD_SIZE']} "
      f"node={os.environ['FAIRPOD_NODE']}", flush=True)
if "pids" in sys.argv[2:]:
    child = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    (ck / f"pids-rank{rank}.txt").write_text(f"{os.getpid()} {child.pid}")

def save():
    tmp = ck / f".rank{rank}.tmp"
    tmp.write_text(str(step))
    tmp.replace(f)

while step < int(sys.argv[1]):
    if stop:
        save()
        print(f"checkpointed step={step}", flush=True)
        sys.exit(0)
    step += 1
    if step % 20 == 0:
        save()
    time.sleep(0.02)
print(f"done step={step}", flush=True)
'''

# Both replicas meet at MASTER_ADDR:MASTER_PORT and swap their environments.
RENDEZVOUS = r'''
import json, os, socket, sys, time
me = {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "FAIRPOD_NODE",
                                  "FAIRPOD_RAY_NODE_ID", "CUDA_VISIBLE_DEVICES", "FAIRPOD_RESTART_COUNT")}
print("env", json.dumps(me), flush=True)
addr = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
if os.environ["RANK"] == "0":
    srv = socket.create_server(addr)
    conn, _ = srv.accept()
else:
    for _ in range(400):
        try:
            conn = socket.create_connection(addr, timeout=5)
            break
        except OSError:
            time.sleep(0.05)
conn.sendall((json.dumps(me) + "\n").encode())
peer = json.loads(conn.makefile().readline())
print("peer", json.dumps(peer), flush=True)
'''

# argv: lines exit_code [dir]. Prints "tick i" every 0.1 s; with a dir it writes its PID there first.
TICKER = r'''
import os, pathlib, sys, time
if len(sys.argv) > 3:
    pathlib.Path(sys.argv[3], f"pid{os.environ['RANK']}").write_text(str(os.getpid()))
for i in range(int(sys.argv[1])):
    print(f"tick {i}", flush=True)
    time.sleep(0.1)
sys.exit(int(sys.argv[2]))
'''
