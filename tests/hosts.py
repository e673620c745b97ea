"""Simulated hosts for tests/test_cluster.py: each is a process tree in Linux namespaces of its own, as a second
machine of a cluster would be.

- network: a named network namespace (`ip netns`) whose only link is one end of a veth pair; the other end is on a
  bridge in the test's namespace, which holds the bridge's address (the Prefect server listens there only). The
  host has its own loopback: a server it starts on 127.0.0.1 is its own, unreachable from the others;
- UTS: its own hostname (what `socket.gethostname()` and so ShardOutcome.host and the vLLM registry see);
- mount: a private tmpfs on /tmp (its temporary files and PREFECT_HOME are its own), and the shared store
  bind-mounted at a path of its own under a private tmpfs on /mnt (the test's path of the store is not there);
- PID: its own, with `unshare --kill-child`: SIGKILL to the `unshare` process kills every process of the host at
  once (the worker, the shard flow runs it started in sessions of their own, anything they started), as a machine
  that loses power.

Everything needs root (CI runs as root) and fails loudly otherwise; everything made is removed by `close()`."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


def ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()} (the cluster tests need root, "
                           "iproute2 and network namespaces)")


@dataclass
class Bridge:
    """A bridge in the test's network namespace with address 10.<a>.<b>.1/24; hosts join it at .2, .3, ..."""

    name: str
    subnet: str                     # "10.a.b"
    namespaces: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"{self.subnet}.1"

    @classmethod
    def create(cls) -> Bridge:
        # names unique per test process (interface names are at most 15 characters), a /24 picked the same way
        tag = os.getpid() % 100000
        bridge = cls(f"maibr{tag}", f"10.{213 + tag % 40}.{tag % 250}")
        ip("link", "add", bridge.name, "type", "bridge")
        try:
            ip("addr", "add", f"{bridge.address}/24", "dev", bridge.name)
            ip("link", "set", bridge.name, "up")
        except BaseException:
            bridge.close()
            raise
        return bridge

    def join(self, label: str) -> tuple[str, str]:
        """A network namespace joined to the bridge: (its name, its address)."""
        index = len(self.namespaces) + 2
        namespace = f"{self.name}-{label}"
        outer, inner = f"{self.name}v{index}", f"{self.name}p{index}"
        ip("netns", "add", namespace)
        self.namespaces.append(namespace)
        ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        ip("link", "set", inner, "netns", namespace)
        ip("link", "set", outer, "master", self.name, "up")
        address = f"{self.subnet}.{index}"
        ip("-n", namespace, "addr", "add", f"{address}/24", "dev", inner)
        ip("-n", namespace, "link", "set", inner, "up")
        ip("-n", namespace, "link", "set", "lo", "up")
        return namespace, address

    def close(self) -> None:
        """Deleting a namespace deletes its veth end, and with it the pair; then the bridge."""
        for namespace in self.namespaces:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)
        self.namespaces.clear()
        subprocess.run(["ip", "link", "del", self.name], capture_output=True, check=False)


@dataclass
class Host:
    """One simulated machine running one command (a Prefect worker): `kill()` is its power going out."""

    hostname: str
    address: str
    store_path: str                 # where the shared store is mounted on this host
    process: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL to the host's `unshare`: with --kill-child its PID namespace's first process dies, and the
        kernel kills every other process of the namespace with it."""
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


def kept_under_tmp() -> list[str]:
    """What a host must still see of the test machine's /tmp under its private one: the checkout (the deployments'
    working directory) and the Python environment, when they lie there (a CI clone in /tmp)."""
    import sys

    wanted = {Path(__file__).resolve().parents[1], Path(sys.prefix).resolve()}
    under_tmp = sorted(str(path) for path in wanted if path.is_relative_to("/tmp"))
    return [path for path in under_tmp if not any(path.startswith(other + "/") for other in under_tmp)]


def host_script(hostname: str, store: Path, store_path: str, command: list[str], env: dict[str, str],
                also_kept: tuple[Path, ...] = (), bindfs: bool = False, after_mount: tuple[str, ...] = ()) -> str:
    """The shell run as the host's first process: hostname, the store bind-mounted at `store_path` (first: the
    test's path of it lies under /tmp, which the private tmpfs then hides), a private /tmp (so the path the run was
    planned with does not exist on the host: its drains find the store by its id at MAI_HOME) where only the checkout
    and the Python environment (and `also_kept`) are bound back if they lay under /tmp, then the command, waited for
    (PID 1 of a namespace ignores signals it has no handler for, so the command is not exec'd in its place). With
    `bindfs`, the store is mounted by bindfs (FUSE) instead of a bind mount: its locks stay on this mount, as those
    of a network filesystem mounted with host-local locks stay on one host. `after_mount`: shell lines run once the
    store is mounted (a fault of this host's mount: remounted read-only, a full filesystem over a directory)."""
    exports = " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
    keep = kept_under_tmp() + [str(path) for path in also_kept if path.is_relative_to("/tmp")]
    lines = ["set -e", f"hostname {shlex.quote(hostname)}", "mount --make-rprivate /",
             "mount -t tmpfs mai-host-mnt /mnt",
             # a boot id of its own, as another machine's kernel has (`mai store check --pool` tells hosts on one
             # kernel from separate machines by it)
             "cat /proc/sys/kernel/random/uuid > /mnt/.boot_id",
             "mount --bind /mnt/.boot_id /proc/sys/kernel/random/boot_id",
             f"mkdir -p {shlex.quote(store_path)}",
             f"{'bindfs' if bindfs else 'mount --bind'} {shlex.quote(str(store))} {shlex.quote(store_path)}",
             *after_mount]
    if keep:  # the machine's /tmp stays reachable for a moment, to bind the kept paths back from it
        lines += ["mkdir -p /mnt/.machine-tmp", "mount --bind /tmp /mnt/.machine-tmp"]
    lines.append("mount -t tmpfs mai-host-tmp /tmp")
    for path in keep:
        inside = "/mnt/.machine-tmp/" + str(Path(path).relative_to("/tmp"))
        lines += [f"mkdir -p {shlex.quote(path)}", f"mount --bind {shlex.quote(inside)} {shlex.quote(path)}"]
    if keep:
        lines.append("umount -l /mnt/.machine-tmp")  # the rest of the machine's /tmp (the planned store) is gone
    return "\n".join([*lines, "cd /tmp", f"env {exports} {shlex.join(command)} &", "wait $!"])


def start_host(bridge: Bridge, label: str, store: Path, command: list[str], env: dict[str, str], log: Path,
               also_kept: tuple[Path, ...] = (), bindfs: bool = False, after_mount: tuple[str, ...] = ()) -> Host:
    """A host `mai-<label>` on the bridge, the store at /mnt/store-on-<label>, running
    `command` with `env` (MAI_HOME is set to the host's store path unless `env` names it); `also_kept`: paths of
    the test machine the host sees too (a directory the test made for it); `bindfs`: the store mounted by bindfs."""
    namespace, address = bridge.join(label)
    hostname, store_path = f"mai-{label}", f"/mnt/store-on-{label}"
    script = host_script(hostname, store, store_path, command, {"MAI_HOME": store_path, **env}, also_kept, bindfs,
                         after_mount)
    process = subprocess.Popen(
        ["ip", "netns", "exec", namespace, "unshare", "--uts", "--mount", "--pid", "--fork", "--kill-child",
         "--mount-proc", "sh", "-c", script],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return Host(hostname, address, store_path, process, log)


def _child_of(pid: int) -> int:
    """The process whose parent is `pid` (unshare's one child: the host's first process)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            return int(stat.parent.name)
    raise RuntimeError(f"process {pid} has no child: the host is not running")


def on_host(host: Host, command: list[str], env: dict[str, str]) -> list[str]:
    """The command line that runs `command` inside a running host's namespaces (nsenter into its first process's:
    unshare itself stays in the test's PID namespace), with the host's store path as MAI_HOME."""
    inner = _child_of(host.process.pid)
    assignments = [f"{key}={value}" for key, value in {"MAI_HOME": host.store_path, **env}.items()]
    return ["nsenter", "-t", str(inner), "--uts", "--mount", "--net", "--pid", "--wd=/tmp", "--", "env",
            *assignments, *command]


@dataclass(frozen=True)
class HostFault:
    """A host set up wrong in one way, as a worker of a real fleet can be: what its worker is started with."""

    env: dict[str, str] = field(default_factory=dict)
    after_mount: tuple[str, ...] = ()
    # the worker runs as root without the capabilities that override file permissions (DAC): it may write only what
    # the file modes let it
    without_dac: bool = False
    kept: tuple[Path, ...] = ()         # directories of the test machine the host sees (a PYTHONPATH of its own)


def host_faults(directory: Path, store_path_of: dict[str, str]) -> dict[str, HostFault]:
    """One host per fault a fleet meets, by label; `directory` holds the files some of them need, `store_path_of`
    is where each host mounts the store. Everything is real but the CUDA out-of-memory error, which a CPU cannot
    give: it comes from mai's test hook (MAI_TEST_INJECT_CUDA_OOM, mai/backends/transformers_backend.py)."""
    def site(label: str, files: dict[str, str]) -> HostFault:
        root = directory / f"site-{label}"
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        return HostFault(env={"PYTHONPATH": str(root)}, kept=(root,))

    runs = f"{store_path_of['i']}/store/runs"
    return {
        # its mount of the store is read-only (EROFS)
        "g": HostFault(after_mount=(f"mount -o remount,bind,ro {store_path_of['g']}",)),
        # its worker's user may not write the store (EACCES): the store shown as nobody's (bindfs), mode 0644/0755,
        # to a root without the capability to override file modes
        "h": HostFault(without_dac=True, after_mount=(
            "mkdir -p /mnt/plain", f"mount --move {store_path_of['h']} /mnt/plain",
            f"bindfs -u nobody -g nogroup /mnt/plain {store_path_of['h']}")),
        # the filesystem where it writes the store is full (ENOSPC): a full tmpfs over the runs' directory, here only
        "i": HostFault(after_mount=(f"mkdir -p {runs}", f"mount -t tmpfs -o size=16k,nr_inodes=1 mai-full {runs}")),
        # a broken package: the drain's process cannot import its flow (none of mai's code runs there)
        "j": site("j", {"pyarrow/__init__.py": "raise ImportError('libarrow.so.2600: cannot open shared object file: "
                                                "No such file or directory')\n"}),
        # another mai version than the planning host's
        "k": site("k", {"mai-0.0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: mai\nVersion: 0.0.1\n"}),
        # the models cannot load: transformers is broken there (its import fails when the first model loads)
        "l": site("l", {"transformers/__init__.py": "raise ImportError('libcudart.so.12: cannot open shared object "
                                                    "file: No such file or directory')\n"}),
        # the GPU is out of memory at its first batch
        "m": HostFault(env={"MAI_TEST_INJECT_CUDA_OOM": "1"}),
    }
