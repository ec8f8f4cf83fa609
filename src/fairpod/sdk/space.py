"""A space's IDE, started inside its replica's sandbox as the replica's user: ``python -m fairpod.sdk.space IDE``.

fairpod runs this as the command of a space (``fairpod space create``, docs/spaces.md); nothing here is the
control plane's. It reads what the replica was given:

- ``FAIRPOD_CHECKPOINT_DIR``: the space's own directory (its files; it outlives each run of the space),
- ``PORT``: where the IDE listens (127.0.0.1 only),
- ``FAIRPOD_SPACE_BASE``: the path fairpod's space proxy serves it under (``/spaces/TEAM/NAME/``).

It makes a fresh secret for this run, writes it to ``.fairpod/ide-token`` in the space's directory (0600; the
directory 0700), and starts the IDE so that it answers only requests that carry the secret: JupyterLab with it
as its token, code-server with its SHA-256 as its hashed password. fairpod's proxy reads the file and adds the secret to each
request it forwards, so another process of the host that reaches the port gets nothing without it. The secret is
handed to the IDE in its environment, never on its command line (``ps`` shows command lines to every user).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import sys
from pathlib import Path

TOKEN_FILE = ".fairpod/ide-token"


def _need(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        sys.exit(f"fairpod space: ${name} is not set (this runs as a space's command; see docs/spaces.md)")
    return value


def write_token(files: Path) -> str:
    """A new secret for this run, in ``files/.fairpod/ide-token`` (0600 in a 0700 directory)."""
    own = files / ".fairpod"
    own.mkdir(mode=0o700, exist_ok=True)
    os.chmod(own, 0o700)
    token = secrets.token_urlsafe(32)
    path = files / TOKEN_FILE
    tmp = path.with_suffix(".new")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    os.replace(tmp, path)
    return token


def jupyter(files: Path, port: str, base: str, token: str) -> tuple[list[str], dict[str, str]]:
    own = files / ".fairpod" / "jupyter"
    env = {"JUPYTER_TOKEN": token,  # read by jupyter_server's IdentityProvider: never on the command line
           "JUPYTERLAB_SETTINGS_DIR": str(own / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(own / "workspaces")}
    argv = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
            "--port-retries=0", f"--ServerApp.base_url={base}", f"--ServerApp.root_dir={files}",
            # the proxy in front checks who may come in; the Host it forwards is its own name, not this one's
            "--ServerApp.allow_remote_access=True", "--ServerApp.disable_check_xsrf=False",
            "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    return argv, env


def code_server(files: Path, port: str, base: str, token: str) -> tuple[list[str], dict[str, str]]:
    exe = os.environ.get("FAIRPOD_CODE_SERVER") or shutil.which("code-server")
    if not exe:
        sys.exit("fairpod space: code-server is not installed on this node (npm install -g code-server; or set "
                 "FAIRPOD_CODE_SERVER to its path)")
    own = files / ".fairpod" / "code-server"
    own.mkdir(parents=True, exist_ok=True)
    # --auth password with HASHED_PASSWORD (read from the environment): a hash that is not argon2's is compared
    # as SHA-256, and code-server's session cookie is that hash, so fairpod's proxy sends it on the user's behalf
    # (server.services.space_proxy) and the browser never sees a password prompt
    env = {"HASHED_PASSWORD": hashlib.sha256(token.encode()).hexdigest()}
    argv = [exe, "--bind-addr", f"127.0.0.1:{port}", "--auth", "password", "--disable-telemetry",
            "--disable-update-check", "--disable-workspace-trust", "--config", str(own / "config.yaml"),
            "--user-data-dir", str(own / "data"), "--extensions-dir", str(own / "extensions"),
            "--abs-proxy-base-path", base.rstrip("/"), str(files)]
    return argv, env


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in ("jupyter", "code-server"):
        print("usage: python -m fairpod.sdk.space jupyter|code-server", file=sys.stderr)
        return 2
    files = Path(_need("FAIRPOD_CHECKPOINT_DIR"))
    port, base = _need("PORT"), _need("FAIRPOD_SPACE_BASE")
    files.mkdir(parents=True, exist_ok=True)
    token = write_token(files)
    cmd, env = (jupyter if args[0] == "jupyter" else code_server)(files, port, base, token)
    os.chdir(files)
    os.execve(cmd[0], cmd, {**os.environ, **env})  # the IDE takes this process: SIGTERM reaches it


if __name__ == "__main__":
    sys.exit(main())
