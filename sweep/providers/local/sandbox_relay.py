"""The in-sandbox half of `api` networking (see network.py). Standard library only; run as
`python -I -S sandbox_relay.py --listen=IP:PORT=SOCKET ... -- PROGRAM ARGS...`.

It binds every listener first (so the program never races a relay that is not up yet), forks a
child that serves them, and execs the program in its own process. Each accepted TCP connection is
carried to the unix SOCKET, whose other end (outside the sandbox) connects to the one endpoint
that socket stands for. The child dies with the sandbox's pid namespace. The copy loop (`pump`)
is also the provider's half's (network.py imports it): this file stays standard-library only,
since it runs in the sandbox as a script, outside any package.
"""
import os
import socket
import sys
import threading


def pump(src, dst):
    """Copy src to dst until EOF, then half-close dst. Also the provider's half (network.py)."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _serve(conn, path):
    try:
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        up.connect(path)
    except OSError:
        conn.close()
        return
    back = threading.Thread(target=pump, args=(up, conn), daemon=True)
    back.start()
    pump(conn, up)
    back.join()
    conn.close()
    up.close()


def _accept(listener, path):
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_serve, args=(conn, path), daemon=True).start()


CAP_SETPCAP = 8
CAP_NET_BIND_SERVICE = 10
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4


def _drop_capabilities():
    """The sandbox grants this relay CAP_NET_BIND_SERVICE (an endpoint on port 443 must listen on
    443, in the sandbox's own network namespace) and CAP_SETPCAP to give it up: both leave the
    bounding set here, so the program exec'd next holds no capability at all. Fail closed."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        sys.stderr.write(f"sandbox_relay: cannot clear the ambient capabilities: errno {ctypes.get_errno()}\n")
        os._exit(126)
    for cap in (CAP_NET_BIND_SERVICE, CAP_SETPCAP):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            sys.stderr.write(f"sandbox_relay: cannot drop capability {cap}: errno {ctypes.get_errno()}\n")
            os._exit(126)
    # and none left in the effective, permitted or inheritable sets (an inheritable capability
    # would come back at exec for a root user)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)    # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()
    if libc.capset(header, data) != 0:
        sys.stderr.write(f"sandbox_relay: cannot clear the capability sets: errno {ctypes.get_errno()}\n")
        os._exit(126)


def main(argv):
    if "--" not in argv:
        sys.stderr.write("sandbox_relay: usage: --listen=IP:PORT=SOCKET ... -- PROGRAM ARGS...\n")
        return 2
    cut = argv.index("--")
    listeners = []
    for arg in argv[:cut]:
        spec = arg[len("--listen="):]
        address, path = spec.split("=", 1)
        ip, port = address.rsplit(":", 1)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((ip, int(port)))
        listener.listen(64)
        listeners.append((listener, path))
    program = argv[cut + 1:]
    first = os.fork()
    if first == 0:
        # double fork: the relay must not be a child the program could wait for
        if os.fork() != 0:
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        threads = [threading.Thread(target=_accept, args=pair, daemon=True) for pair in listeners]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        os._exit(0)
    os.waitpid(first, 0)
    for listener, _ in listeners:
        listener.close()
    _drop_capabilities()
    os.execvp(program[0], program)   # noqa: S606 - argv as given, never a shell


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
