"""``cluster.checkpoint_dir``: jobs' checkpoint directories on storage of the admin's choosing (on several hosts,
a shared file system), with a real server and real replicas."""

from __future__ import annotations

from pathlib import Path

import yaml

from ..conftest import SEED_SPEC, Server


def test_checkpoints_go_to_the_configured_directory_and_survive_a_resume(tmp_path: Path):
    shared = tmp_path / "shared" / "fairpod-checkpoints"
    spec = yaml.safe_load(SEED_SPEC.read_text())
    spec["cluster"]["checkpoint_dir"] = str(shared)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    s = Server(tmp_path, tmp_path / "spec.yaml")
    s.start()
    try:
        # attempt 0 writes its checkpoint and fails; attempt 1 finds it in the same directory and succeeds
        script = ('d="$FAIRPOD_CHECKPOINT_DIR"; echo "$d" > "$d/../../where"; '
                  'if [ -f "$d/step" ]; then echo resumed; else echo 7 > "$d/step"; exit 3; fi')
        s.submit(name="ckpt", team="john", auto_resume=True, max_retry=1, command=["sh", "-c", script])
        done = s.wait_state("ckpt", "Succeeded", 60)
        assert done["restarts"] == 1
        job_dir = shared / "john" / f"ckpt-{done['id']}"
        assert (job_dir / "step").read_text().strip() == "7"
        assert (shared / "where").read_text().strip() == str(job_dir)
        assert not (s.home / "checkpoints" / "john" / f"ckpt-{done['id']}").exists()
        r = s.cli("validate", str(tmp_path / "spec.yaml"))
        assert r.returncode == 0
        spec["cluster"]["checkpoint_dir"] = "relative/dir"
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump(spec))
        bad = s.cli("validate", str(tmp_path / "bad.yaml"), check=False)
        assert bad.returncode != 0 and "cluster.checkpoint_dir: must be an absolute path" in bad.stdout + bad.stderr
    finally:
        s.kill()
        s.kill_replicas()
