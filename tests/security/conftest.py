"""What the attacks aim at, laid out as on a real cluster: a campaign and a fake operator home
OUTSIDE /tmp (a sandbox that only hid /tmp would not pass by luck), a unix socket under /run, an
abstract unix socket and a TCP listener on the host's 127.0.0.1, each recording who connects."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sweep.providers.local.bwrap import probe_bwrap

HOSTILE = Path(__file__).resolve().parent / "hostile.py"

if probe_bwrap()[0] is None:
    pytest.skip("bubblewrap is not usable here (.ci/run installs it)", allow_module_level=True)


class Listener:
    """Accepts connections on a socket in a thread and counts them."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.connections = 0
        sock.listen(16)
        sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@dataclass
class Targets:
    root: Path
    campaign: Path
    home_canary: Path
    key_file: Path
    other_run_file: Path
    run_socket: Path
    abstract_name: str
    tcp: Listener
    unix: Listener
    abstract: Listener
    canaries: list[str] = field(default_factory=list)
    marker: str = ""

    def argv_json(self, **extra) -> dict:
        return {"home_canary": str(self.home_canary), "key_file": str(self.key_file),
                "runs_dir": str(self.campaign / "runs"), "other_run_file": str(self.other_run_file),
                "run_socket": str(self.run_socket), "abstract_socket": self.abstract_name,
                "tcp_port": self.tcp.sock.getsockname()[1], "marker": self.marker,
                "outside_file": str(self.root / "written-by-sandbox"),
                "campaign_file": str(self.campaign / "written-by-sandbox"), **extra}

    def nothing_connected(self) -> bool:
        return self.tcp.connections == self.unix.connections == self.abstract.connections == 0

    def canary_found_under(self, directory: Path) -> list[str]:
        """Files under `directory` holding any canary value."""
        hits = []
        for path in Path(directory).rglob("*"):
            if path.is_file() and not path.is_symlink():
                try:
                    data = path.read_bytes()
                except OSError:
                    continue
                if any(c.encode() in data for c in self.canaries):
                    hits.append(str(path))
        return hits


@pytest.fixture(scope="module")
def targets():
    root = Path(tempfile.mkdtemp(prefix="sweep-sec-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    campaign = root / "campaign"
    home = root / "home" / "operator"
    (home / ".ssh").mkdir(parents=True)
    canaries = [f"canary-{name}-{uuid.uuid4().hex}" for name in ("home", "key", "run")]
    (home / "notes.txt").write_text(canaries[0] + "\n")
    (home / ".ssh" / "id_ed25519").write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{canaries[1]}\n")
    os.chmod(home / ".ssh" / "id_ed25519", 0o600)
    other = campaign / "runs" / "someone-else"
    other.mkdir(parents=True)
    (other / "source.json").write_text(canaries[2] + "\n")
    run_dir = Path("/run") / f"sweep-sec-{uuid.uuid4().hex[:8]}"
    try:
        run_dir.mkdir()
    except OSError:          # not root: a host socket next to the campaign stands in for /run
        run_dir = root / "run"
        run_dir.mkdir()
    unix_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix_sock.bind(str(run_dir / "canary.sock"))
    abstract_name = f"sweep-sec-{uuid.uuid4().hex[:8]}"
    abstract_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract_sock.bind("\0" + abstract_name)
    tcp_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp_sock.bind(("127.0.0.1", 0))
    t = Targets(root=root, campaign=campaign, home_canary=home / "notes.txt", key_file=home / ".ssh" / "id_ed25519",
                other_run_file=other / "source.json", run_socket=run_dir / "canary.sock",
                abstract_name=abstract_name, tcp=Listener(tcp_sock), unix=Listener(unix_sock),
                abstract=Listener(abstract_sock), canaries=canaries, marker=f"sweep-sec-{uuid.uuid4().hex[:8]}")
    yield t
    for listener in (t.tcp, t.unix, t.abstract):
        listener.close()
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)


def attack_lines(text: str) -> dict[str, tuple[str, str]]:
    """name -> (HELD | BROKEN, detail) from the hostile program's output."""
    out = {}
    for line in text.splitlines():
        if line.startswith("ATTACK "):
            parts = line.split(" ", 3)
            out[parts[1]] = (parts[2], parts[3] if len(parts) > 3 else "")
    return out


# The fixture cluster lives under /tmp, which every sandbox replaces with its own tmpfs; so that an
# attack cannot fail by that luck, its munge socket is hard-linked and its slurm.conf copied under
# the campaign's /var/tmp root, and a control submission from the host through exactly those
# paths proves they work.
@pytest.fixture(scope="module")
def exposed_cluster(slurm_cluster, targets):
    link = targets.root / "munge.sock"
    try:
        os.link(slurm_cluster.dir / "munge.sock", link)
    except OSError as exc:
        pytest.skip(f"cannot link the munge socket next to the campaign: {exc}")
    conf = targets.root / "slurm.conf"
    conf.write_text(slurm_cluster.conf.read_text().replace(f"{slurm_cluster.dir}/munge.sock", str(link)))
    env = dict(slurm_cluster.env, SLURM_CONF=str(conf))
    control = subprocess.run(["sbatch", "--parsable", "--job-name", "sweep-sec-control", "--wrap", "true"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert control.returncode == 0, f"the exposed paths do not work from the host: {control.stderr}"
    subprocess.run(["scancel", control.stdout.strip().split(";")[0]], env=env, capture_output=True, timeout=60)
    return link, conf
