"""A hostile program: what PR test code or a misbehaving agent would try from inside a session.

Standard library only (it runs as a PR's test, as an agent, as anything). Given a JSON object of
targets on argv[1], it tries every attack and prints one line per attack:

    ATTACK <name> HELD <why>        the sandbox stopped it
    ATTACK <name> BROKEN <what>     it worked: the sandbox gave something away

It always exits 0, so the run around it ends as it would without the attack; the tests then check
both the lines and what the host saw (listeners, files).
"""
import json
import os
import socket
import subprocess
import sys


def report(name, ok_for_attacker, detail):
    print(f"ATTACK {name} {'BROKEN' if ok_for_attacker else 'HELD'} {' '.join(str(detail).split())[:300]}",
          flush=True)


def try_read(name, path):
    try:
        with open(path, "rb") as fh:
            data = fh.read(4096)
        report(name, True, data[:200])
    except OSError as exc:
        report(name, False, f"{type(exc).__name__} {exc.strerror}")


def try_list(name, path, own):
    """Listing the campaign's runs: the own run's directory may show (it leads to the workspace),
    any other run may not."""
    try:
        others = sorted(set(os.listdir(path)) - {own})
        report(name, bool(others), f"others {others[:20]}")
    except OSError as exc:
        report(name, False, f"{type(exc).__name__} {exc.strerror}")


def try_unix(name, path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(3)
    try:
        sock.connect(path)
        sock.sendall(b"hello from the sandbox\n")
        report(name, True, "connected")
    except OSError as exc:
        report(name, False, f"{type(exc).__name__} {exc.strerror}")
    finally:
        sock.close()


def try_abstract(name, abstract):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(3)
    try:
        sock.connect("\0" + abstract)
        report(name, True, "connected")
    except OSError as exc:
        report(name, False, f"{type(exc).__name__} {exc.strerror}")
    finally:
        sock.close()


def try_tcp(name, host, port):
    try:
        with socket.create_connection((host, port), timeout=3) as sock:
            sock.sendall(b"hello from the sandbox\n")
        report(name, True, "connected")
    except OSError as exc:
        report(name, False, f"{type(exc).__name__} {exc.strerror}")


def try_write(name, path):
    try:
        with open(path, "w") as fh:
            fh.write("written by the sandbox\n")
        report(name, True, f"wrote {path}")
    except OSError as exc:
        report(name, False, f"{type(exc).__name__} {exc.strerror}")


def try_list_host(name, paths):
    """Host directories the view must not show (absent, or empty stand-ins). The one thing a
    session with network `api` has under /run is sweep's own relay directory, /run/sweep-net (its
    sockets reach only the relay, which reaches only the configured endpoints)."""
    shown = {}
    for path in paths:
        try:
            entries = sorted(set(os.listdir(path)) - ({"sweep-net"} if path in ("/run", "/var/run") else set()))
        except OSError:
            continue
        if entries:
            shown[path] = entries[:10]
    report(name, bool(shown), f"listed {shown}" if shown else f"none of {paths} exists")


def try_sbatch(name, slurm_conf, marker):
    env = dict(os.environ, SLURM_CONF=slurm_conf) if slurm_conf else dict(os.environ)
    try:
        done = subprocess.run(["sbatch", "--job-name", marker, "--wrap", f"echo {marker}"], env=env,
                              capture_output=True, text=True, timeout=20)
        report(name, done.returncode == 0, f"rc {done.returncode} {done.stdout} {done.stderr}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        report(name, False, f"{type(exc).__name__} {exc}")


ATTACKS = {
    "read_operator_home": lambda t: try_read("read_operator_home", t["home_canary"]),
    "read_key_file": lambda t: try_read("read_key_file", t["key_file"]),
    "read_shadow": lambda t: try_read("read_shadow", "/etc/shadow"),
    "read_munge_key": lambda t: try_read("read_munge_key", "/etc/munge/munge.key"),
    "list_host_dirs": lambda t: try_list_host("list_host_dirs", ["/run", "/var/run", "/etc/slurm", "/etc/munge",
                                                                 "/home", "/var/lib", "/var/spool"]),
    "list_campaign_runs": lambda t: try_list("list_campaign_runs", t["runs_dir"], t.get("own_run", "")),
    "read_other_run": lambda t: try_read("read_other_run", t["other_run_file"]),
    "read_run_events": lambda t: try_read("read_run_events", t["run_events"]),
    "read_solution": lambda t: try_read("read_solution", t["solution"]),
    "connect_run_socket": lambda t: try_unix("connect_run_socket", t["run_socket"]),
    "connect_munge": lambda t: try_unix("connect_munge", t["munge_socket"]),
    "connect_abstract_socket": lambda t: try_abstract("connect_abstract_socket", t["abstract_socket"]),
    "connect_loopback_tcp": lambda t: try_tcp("connect_loopback_tcp", "127.0.0.1", t["tcp_port"]),
    "sbatch": lambda t: try_sbatch("sbatch", t.get("slurm_conf"), t["marker"]),
    "write_outside_scope": lambda t: try_write("write_outside_scope", t["outside_file"]),
    "write_campaign": lambda t: try_write("write_campaign", t["campaign_file"]),
}
OPTIONAL = {"read_run_events": "run_events", "read_solution": "solution", "connect_munge": "munge_socket"}


def main():
    """`hostile.py TARGETS_JSON` tries every attack its targets allow; `hostile.py TARGETS_JSON NAME`
    tries one (an agent runs them one tool call each)."""
    t = json.loads(sys.argv[1])
    names = sys.argv[2:3] if len(sys.argv) > 2 and sys.argv[2] in ATTACKS else list(ATTACKS)
    for name in names:
        if name in OPTIONAL and not t.get(OPTIONAL[name]) and len(names) > 1:
            continue
        ATTACKS[name](t)


if __name__ == "__main__":
    main()
