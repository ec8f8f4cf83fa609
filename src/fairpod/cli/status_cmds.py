"""``fairpod status`` (server, cluster, your teams, your jobs), ``fairpod completion bash|zsh`` and
``fairpod dashboard`` (a one-time sign-in link)."""

from __future__ import annotations

import argparse
import sys

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.cli.output import acc_nodes, add_output, ago, emit, reason_in_units, table

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any

ACTIVE = ["Running", "Preempted", "Pending"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="the server, the cluster, your teams' usage and your unfinished jobs",
                       description="One look at everything: is the server up (and where), who you are, the "
                       "cluster's capacity and use, each of your teams' quota / in use / borrowed / lent, and "
                       "your teams' unfinished jobs.")
    add_output(p)
    p.set_defaults(func=status)

    p = sub.add_parser("completion", help="print a shell completion script (bash or zsh)",
                       description="Print a completion script for fairpod's commands and options.",
                       epilog="bash: source <(fairpod completion bash)   (or add it to ~/.bashrc)\n"
                       "zsh:  source <(fairpod completion zsh)    (or add it to ~/.zshrc)",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shell", choices=["bash", "zsh"], help="the shell")
    p.set_defaults(func=completion)

    p = sub.add_parser("dashboard", help="print (or open) a one-time sign-in link to the dashboard",
                       description="Ask the server for a sign-in link to the dashboard: it signs in whoever "
                       "opens it first, once, within two minutes, as you; the URL holds no token. --open opens "
                       "it in a browser.")
    p.add_argument("--open", action="store_true", help="open the link in the default browser")
    p.set_defaults(func=dashboard)


# -- status -----------------------------------------------------------------------------------------------


def gather(c: Client) -> dict[str, Any]:
    health = c.request("GET", "", raw_path="/healthz")
    me = c.get("/me")
    cluster = c.get("/cluster")
    teams = set(me["teams"] if me["role"] == "member" else me["visible_teams"])
    jobs = c.get("/jobs", state=ACTIVE, limit=0)["jobs"]
    nodes = c.get("/nodes")["nodes"]
    try:
        ha = c.get("/ha")  # standby control planes (fairpod up --ha); 404 from a single one
    except CliError:
        ha = None
    return {"ha": ha,
            "enforced": {n["name"]: n.get("enforced") for n in nodes},
            "server": {"url": c.url, "version": health.get("version"), "pid": health.get("pid"),
                       "cycles": health.get("cycles")},
            "user": {"name": me["name"], "role": me["role"], "teams": me["teams"]},
            "cluster": {"name": cluster["name"], "capacity": cluster["capacity"]},
            "teams": [t for t in cluster["teams"] if t["team"] in teams],
            "jobs": [j for j in jobs if j["team"] in teams]}


def enforced_line(per_node: dict[str, dict[str, bool] | None]) -> str:
    """What the nodes hold replicas to (fairpod.sandbox), grouped: ``enforced: cpu, memory (4 nodes)``."""
    groups: dict[str, int] = {}
    for view in per_node.values():
        key = "unknown" if view is None else (", ".join(k for k, v in view.items() if v) or "nothing")
        groups[key] = groups.get(key, 0) + 1
    return "enforced: " + "; ".join(f"{k} ({n} node{'s' if n != 1 else ''})" for k, n in groups.items())


def ha_line(ha: dict[str, Any]) -> str:
    """``leader: URL since … (epoch N); standbys: …`` of standby control planes (docs/ha.md)."""
    import time

    lead = ha.get("leader")
    if not lead:
        head = "leader:  none yet"
    else:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(lead["since"]))
        head = f"leader:  {lead['url']} since {since} ({ago(lead['since'])} ago, epoch {lead['epoch']})"
    standbys = ", ".join(f"{m['url']} (pid {m['pid']})" for m in ha.get("standbys", [])) or "none"
    return f"{head}; standbys: {standbys}"


def status(a: argparse.Namespace) -> int:
    c = Client()
    st = gather(c)
    if emit(st, a.output):
        return 0
    s, u = st["server"], st["user"]
    print(f"server:  {s['url']} is up (fairpod {s['version']}, pid {s['pid']})")
    if st["ha"] is not None:
        print(ha_line(st["ha"]))
    print(f"you:     {u['name']} ({u['role']}" + (f", teams {', '.join(u['teams'])})" if u["teams"] else ")"))
    per_node: dict[str, int | None] = {}
    for it, cap in st["cluster"]["capacity"].items():
        per = cap["accelerators"] // cap["nodes"] if cap["nodes"] else None
        per_node[it] = per
        print(f"cluster: {st['cluster']['name']}, {it}: {acc_nodes(cap['accelerators'], per)}, "
              f"{cap['schedulable_accelerators']} schedulable, {cap['in_use']} in use "
              f"({cap['utilization'] * 100:.0f}%)")
    print(enforced_line(st["enforced"]))
    print()
    rows = []
    for t in st["teams"]:
        per = per_node.get(t["instance_type"])
        row = {**t, **{k: acc_nodes(t[k], per) for k in ("quota", "in_use", "borrowed", "lent", "available")}}
        row["borrowed_from"] = ", ".join(f"{k}: {acc_nodes(n, per)}" for k, n in t["borrowed_from"].items()) or "-"
        rows.append(row)
    table(rows, [("team", "TEAM"), ("instance_type", "INSTANCE TYPE"), ("quota", "QUOTA"), ("in_use", "IN USE"),
                 ("borrowed", "BORROWED"), ("borrowed_from", "FROM"), ("lent", "LENT"),
                 ("available", "AVAILABLE")])
    print()
    counts = {k: sum(1 for j in st["jobs"] if j["state"] == k) for k in ACTIVE}
    print("jobs:    " + ", ".join(f"{n} {k.lower()}" for k, n in counts.items()))
    jobs = [{**j, "age": ago(j["submit_time"]), "reason": reason_in_units(j["reason"], per_node.get(j["instance_type"]))}
            for j in st["jobs"][-20:]]
    if jobs:
        table(jobs, [("id", "ID"), ("name", "NAME"), ("team", "TEAM"), ("state", "STATE"), ("age", "AGE"),
                     ("reason", "REASON")])
        if len(st["jobs"]) > 20:
            print(f"(the newest 20 of {len(st['jobs'])}; fairpod list-jobs shows all)")
    return 0


# -- completion -------------------------------------------------------------------------------------------


def _words(p: argparse.ArgumentParser) -> tuple[list[str], dict[str, argparse.ArgumentParser]]:
    opts = [o for act in p._actions for o in act.option_strings]
    subs: dict[str, argparse.ArgumentParser] = {}
    for act in p._actions:
        if isinstance(act, argparse._SubParsersAction):
            subs.update(act.choices)
    return opts, subs


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """A bash completion function (zsh runs it through bashcompinit) built from the parser itself."""
    _, top = _words(parser)
    cases = []
    for name, p in sorted(top.items()):
        opts, subs = _words(p)
        if subs:
            cases.append(f'    "{name}") words="{" ".join(sorted(subs))}";;')
            for sname, sp in sorted(subs.items()):
                sopts, _ = _words(sp)
                cases.append(f'    "{name} {sname}") words="{" ".join(sopts)}";;')
        else:
            cases.append(f'    "{name}") words="{" ".join(opts)}";;')
    body = "\n".join(cases)
    script = f"""# fairpod completion ({shell}): source <(fairpod completion {shell})
_fairpod() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} key words
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "{" ".join(sorted(top))} --help --version" -- "$cur"))
    return
  fi
  key=${{COMP_WORDS[1]}}
  case "$key ${{COMP_WORDS[2]}}" in
{body}
    *)
      case "$key" in
{body}
      esac;;
  esac
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _fairpod fairpod
"""
    if shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    return script


def completion(a: argparse.Namespace) -> int:
    from fairpod.cli.main import build_parser

    sys.stdout.write(completion_script(build_parser(), a.shell))
    return 0


# -- dashboard --------------------------------------------------------------------------------------------


def dashboard(a: argparse.Namespace) -> int:
    c = Client()
    link = c.post("/dashboard/links")
    url = f"{c.url}/#signin={link['code']}"
    print(url)
    print(f"(signs in once as {link['user']}, within {link['expires_in']} s)", file=sys.stderr)
    if a.open:
        import webbrowser

        if not webbrowser.open(url):
            raise CliError("no browser to open here: open the link above yourself")
    return 0
