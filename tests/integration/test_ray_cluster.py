"""pysandbox.integrations.ray on a local multi-node Ray cluster (one module, one cluster).

The cluster (``ray.cluster_utils.Cluster``): a head ("psb_head" resource) and a second
node ("psb_node"), both on 127.0.0.1, started once for the module; its state lives in a
temporary RAY_TMPDIR removed at the end, and every Ray process it started is shut down
in the finalizer. The second node is started with ``PYSANDBOX_BWRAP`` naming a missing
file, so the bwrap backend cannot run there: the node a policy is left out on.

Each security claim (deny-mode network, read-only root, limits) is made inside a Ray
worker and has a live control: the same operation allowed by the policy, through the
same path.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading

import pytest

from pysandbox import Policy
from pysandbox.errors import Reason, SessionError
from pysandbox.limits import Limits
from tests.support import host_capability, need, processes_with, wait_until

pytestmark = pytest.mark.requires("userns")

ray = None   # imported by the fixture, after RAY_ENV is set (Ray reads some of it at import)

# Ray's own settings for a cluster that stays on this machine and talks to no one else.
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",   # loopback addresses only
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
NODE_ARGS = {"node_ip_address": "127.0.0.1", "object_store_memory": 80 * 1024 * 1024, "include_dashboard": False}
MISSING_BWRAP = "/nonexistent/psb-ray-test-bwrap"


@pytest.fixture(scope="module")
def cluster():
    """The module's Ray cluster: (Cluster, head node id, second node id)."""
    global ray
    if importlib.util.find_spec("ray") is None:   # in the test extra: a failure under PYSANDBOX_MUST_WORK=1
        need("ray", "ray is not installed (pip install -e '.[test]')")
    tmp = tempfile.mkdtemp(prefix="psbray-", dir="/tmp")   # short: Ray's socket paths must fit
    saved = {k: os.environ.get(k) for k in (*RAY_ENV, "RAY_TMPDIR", "PYSANDBOX_BWRAP")}
    os.environ.update(RAY_ENV, RAY_TMPDIR=tmp)
    c = None
    try:
        import ray as ray_module
        from ray._private import ray_constants
        from ray.cluster_utils import Cluster
        ray = ray_module
        if ray_constants.ENABLE_RAY_CLUSTER:   # imported before this fixture: it would use the host's address
            pytest.fail("ray was imported before RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 was set: the cluster "
                        "would listen on the host's address, not loopback", pytrace=False)
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 3, "resources": {"psb_head": 1}, **NODE_ARGS})
        os.environ["PYSANDBOX_BWRAP"] = MISSING_BWRAP   # this node's raylet and workers inherit it
        try:
            second = c.add_node(num_cpus=2, resources={"psb_node": 1}, **NODE_ARGS)
        finally:
            if saved["PYSANDBOX_BWRAP"] is None:
                os.environ.pop("PYSANDBOX_BWRAP")
            else:
                os.environ["PYSANDBOX_BWRAP"] = saved["PYSANDBOX_BWRAP"]
        ray.init(address=c.address, log_to_driver=False, logging_level="warning")
        yield c, c.head_node.node_id, second.node_id
    finally:
        if ray is not None and ray.is_initialized():
            ray.shutdown()
        if c is not None:
            c.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def work(tmp_path):
    d = tmp_path / "work"
    d.mkdir()
    return d


def _sc(policy, **kw):
    from pysandbox.integrations.ray import SandboxCluster
    return SandboxCluster(policy, **kw)


def test_commands_land_on_both_nodes_and_sessions_stay_on_one(cluster, work):
    _, head, second = cluster
    with _sc(Policy.default(workdir=str(work)), pool_size=2) as sc:
        assert {h["node_id"] for h in sc.hosts} == {head, second}
        assert all(h["mode"] == "pool" for h in sc.hosts)
        results = list(sc.map([["sh", "-c", f"echo {i}"] for i in range(12)], capture_output=True))
        assert sorted(int(r.stdout) for r in results) == list(range(12))
        assert {r.node_id for r in results} == {head, second}
        assert all(r.returncode == 0 and not r.stdout_truncated and r.run_seconds > 0 for r in results)
        ordered = list(sc.map([["sh", "-c", f"echo {i}"] for i in range(6)], ordered=True, capture_output=True))
        assert [int(r.stdout) for r in ordered] == list(range(6))
        pinned = sc.run(["true"], node_id=second)
        assert pinned.node_id == second
        with sc.session() as s:
            s.run(["sh", "-c", "echo kept >/tmp/mark"])
            got = s.run(["cat", "/tmp/mark"], capture_output=True)
            assert got.stdout == b"kept\n" and got.node_id == s.node_id
        # the control: a one-shot command gets a fresh sandbox, without the session's /tmp
        fresh = sc.run(["cat", "/tmp/mark"], capture_output=True, node_id=s.node_id)
        assert fresh.returncode != 0 and b"No such file" in fresh.stderr
        done = asyncio.run(sc.arun(["sh", "-c", "echo async"], capture_output=True))
        assert done.stdout == b"async\n"


def test_results_are_plain_data_with_truncated_output_and_timeouts(cluster, work):
    import pickle

    from pysandbox.integrations.ray import OUTPUT_LIMIT
    with _sc(Policy.default(workdir=str(work)), hosts=1, pool_size=1) as sc:
        big = sc.run(["head", "-c", str(OUTPUT_LIMIT + 4096), "/dev/zero"], capture_output=True)
        assert big.returncode == 0 and big.stdout_truncated and len(big.stdout) == OUTPUT_LIMIT
        small = sc.run(["head", "-c", "10", "/dev/zero"], capture_output=True)   # the control
        assert not small.stdout_truncated and len(small.stdout) == 10
        assert pickle.loads(pickle.dumps(big)) == big
        # a command that prints without end: the host keeps OUTPUT_LIMIT bytes and drops the rest as it
        # comes (held whole, three seconds of yes(1) would be gigabytes in the Ray worker)
        endless = sc.run(["yes"], capture_output=True, timeout=3)
        assert endless.timed_out and endless.stdout_truncated and endless.stdout == b"y\n" * (OUTPUT_LIMIT // 2)
        echoed = sc.run(["cat"], input=b"abc" * 1000, capture_output=True)
        assert echoed.stdout == b"abc" * 1000 and echoed.stderr == b"" and echoed.returncode == 0
        slow = sc.run(["sleep", "30"], timeout=0.5)
        assert slow.timed_out and slow.returncode is None
        with pytest.raises(__import__("subprocess").TimeoutExpired):
            slow.check_returncode()
        with pytest.raises(FileNotFoundError):
            sc.run(["/nonexistent-psb-command"])


def test_network_deny_holds_inside_a_ray_worker(cluster, work):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    accepted = []
    listener.settimeout(60)
    probe = [sys.executable, "-c", "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 5); "
             "print('connected')", str(port)]
    try:
        with _sc(Policy.default(workdir=str(work), network="deny"), hosts=1, pool_size=1) as sc:
            denied = sc.run(probe, capture_output=True, text=True, timeout=60)
        assert denied.returncode != 0 and "connected" not in denied.stdout
        assert "ConnectionRefused" in denied.stderr or "unreachable" in denied.stderr.lower()

        # the live control: the same probe with the network allowed reaches the listener
        t = threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True)
        t.start()
        with _sc(Policy.default(workdir=str(work), network="allow"), hosts=1, pool_size=1) as sc:
            allowed = sc.run(probe, capture_output=True, text=True, timeout=60)
        t.join(60)
        assert allowed.returncode == 0 and allowed.stdout == "connected\n", allowed.stderr
        assert len(accepted) == 1
    finally:
        for conn in accepted:
            conn.close()
        listener.close()


@pytest.fixture
def outside():
    """A host directory anyone may write, under the read-only root (not /tmp: the sandbox's is its own)."""
    import pathlib
    d = pathlib.Path(tempfile.mkdtemp(prefix="psb-ray-outside-", dir="/var/tmp"))
    os.chmod(d, 0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_read_only_root_holds_inside_a_ray_worker(cluster, work, outside):
    with _sc(Policy.default(workdir=str(work)), pool_size=1) as sc:
        for h in sc.hosts:
            attempt = sc.run(["sh", "-c", f"echo x >{outside}/planted"], capture_output=True,
                             node_id=h["node_id"])
            assert attempt.returncode != 0 and b"Read-only file system" in attempt.stderr
            assert not (outside / "planted").exists()
            control = sc.run(["sh", "-c", f"echo {h['node_id'][:8]} >{work}/written"], node_id=h["node_id"])
            assert control.returncode == 0
            assert (work / "written").read_text() == h["node_id"][:8] + "\n"


def test_limits_hold_inside_a_ray_worker(cluster, work):
    limits = Limits(file_size="1M", pids=64) if host_capability("root") is None else Limits(file_size="1M")
    with _sc(Policy.default(workdir=str(work)).replace(limits=limits), pool_size=1) as sc:
        assert sc.hosts and all(h["mode"] == "one-shot" for h in sc.hosts)   # pools refuse limits
        for h in sc.hosts:
            over = sc.run(["sh", "-c", "exec head -c 2097152 /dev/zero >big"], node_id=h["node_id"])
            assert over.limit == "file_size" and over.returncode == -signal.SIGXFSZ
            assert (work / "big").stat().st_size == 1 << 20
            under = sc.run(["sh", "-c", "exec head -c 524288 /dev/zero >small"], node_id=h["node_id"])
            assert under.limit is None and under.returncode == 0   # the control, same policy
            assert (work / "small").stat().st_size == 524288
        cgroups = {h["pid"]: _cgroup_dirs(h["pid"]) for h in sc.hosts}
    for pid, dirs in cgroups.items():   # nothing of a launch's cgroups is left below the host's own
        assert not [d for base in dirs for d in _listdir(base) if d.startswith(f"pysandbox-{pid}-")]


def _cgroup_dirs(pid):
    out = []
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                for c in (ctrls.split(",") if ctrls else [""]):
                    base = os.path.join("/sys/fs/cgroup", c.replace("name=", ""), path.lstrip("/"))
                    if os.path.isdir(base):
                        out.append(base)
    except FileNotFoundError:
        pass
    return out


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError:
        return []


def test_a_node_that_cannot_enforce_the_policy_is_left_out(cluster, work):
    _, head, second = cluster
    if host_capability("bwrap") is not None:
        need("bwrap", host_capability("bwrap"))
    from pysandbox.integrations.ray import SandboxCluster
    with SandboxCluster(Policy.default(workdir=str(work)), backend="bwrap", pool_size=1) as sc:
        assert [h["node_id"] for h in sc.hosts] == [head]
        assert [(i["node_id"], i["reason"]) for i in sc.left_out] == [(second, Reason.BWRAP_NOT_FOUND.value)]
        results = list(sc.map([["true"]] * 4))
        assert {r.node_id for r in results} == {head} and all(r.returncode == 0 for r in results)
        with pytest.raises(SessionError) as err:
            sc.run(["true"], node_id=second)
        assert err.value.reason is Reason.SESSION_LOST


def test_back_pressure_bounds_calls_in_flight(cluster, work):
    from pysandbox.integrations.ray import ClusterBusy
    gate = ["sh", "-c", "i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo $1",
            "sh"]
    with _sc(Policy.default(workdir=str(work)), pool_size=1, per_host=2, max_pending=3, block=False) as sc:
        refs = []
        with pytest.raises(ClusterBusy) as busy:
            for i in range(10):
                refs.append(sc.submit(gate + [str(i)], capture_output=True, timeout=120))
        assert len(refs) == 3 and busy.value.reason is Reason.SESSION_UNAVAILABLE
        assert all(s["most_running"] <= 1 for s in sc.stats())   # one slot per host
        (work / "go").touch()
        assert sorted(int(sc.result(r, timeout=120).stdout) for r in refs) == [0, 1, 2]
        assert sc.submit(["true"]) is not None   # room again once they finished

        # map keeps within the bounds by itself, and every command still runs
        (work / "go").unlink()
        count = ["sh", "-c", "touch run.$1; ls run.* | wc -l; sleep 0.3; rm run.$1", "sh"]
        seen = [int(r.stdout) for r in sc.map([count + [str(i)] for i in range(9)], capture_output=True)]
        assert len(seen) == 9 and max(seen) <= 2   # two hosts, one slot each
        assert all(s["most_running"] <= 1 for s in sc.stats())


def test_a_deep_agents_backend_over_a_cluster_session(cluster, work):
    if importlib.util.find_spec("deepagents") is None:
        need("deepagents", "deepagents is not installed (pip install -e '.[test]')")
    from pysandbox.integrations.deepagents_ray import ClusterSandbox
    _, _, second = cluster
    with _sc(Policy.default(workdir=str(work)), pool_size=2) as sc:
        with ClusterSandbox(sc, node_id=second, default_timeout=60) as box:
            assert box.node_id == second and box.start_directory == str(work)
            done = box.execute("echo out; echo err >&2; exit 3")
            assert (done.output, done.exit_code, done.truncated) == ("out\nerr\n", 3, False)
            assert box.upload_files([(f"{work}/a/f.txt", b"one\n")])[0].error is None
            assert (work / "a" / "f.txt").read_bytes() == b"one\n"   # the workdir is the host's
            assert box.edit(f"{work}/a/f.txt", "one", "two").error is None
            assert box.download_files([f"{work}/a/f.txt"])[0].content == b"two\n"
            assert box.execute("echo kept >/tmp/mark && cat /tmp/mark").output == "kept\n"
            assert box.execute("cat /tmp/mark").output == "kept\n"   # one session: its /tmp stays
            # the policy holds: the read-only root refuses, where the workdir (the control) took the file
            assert box.upload_files([("/etc/psb-ray-deepagents", b"x")])[0].error == "permission_denied"
            assert not os.path.exists("/etc/psb-ray-deepagents")
            slow = box.execute("echo started; sleep 30", timeout=1)
            assert slow.exit_code == 124 and slow.output.startswith("started\n")
            assert sc.stats()[[h["node_id"] for h in sc.hosts].index(second)]["sessions"] == 1
        assert all(i["sessions"] == 0 for i in sc.stats())   # close ended the session on its host
        with pytest.raises(SessionError):
            box.execute("true")


def test_a_node_removed_mid_command_gives_the_documented_result(cluster, work):
    from pysandbox.integrations.ray import HostLost, SandboxCluster
    c, head, second = cluster
    doomed = c.add_node(num_cpus=1, resources={"psb_doomed": 1}, **NODE_ARGS)
    token = f"psb-ray-doomed-{os.getpid()}"
    gate = ["sh", "-c", "i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; echo $1",
            "sh", token]
    removed = False
    try:
        with SandboxCluster(Policy.default(workdir=str(work)), pool_size=3) as sc:
            assert doomed.node_id in {h["node_id"] for h in sc.hosts}
            once = sc.submit(gate, node_id=doomed.node_id, capture_output=True, timeout=150)
            again = sc.submit(gate, node_id=doomed.node_id, capture_output=True, timeout=150, idempotent=True)
            s = sc.session(node_id=doomed.node_id)
            in_session = s.submit(gate, capture_output=True, timeout=150)
            doomed_host = next(h for h in sc.stats() if h["node_id"] == doomed.node_id)
            # the three commands run, on the doomed node
            assert wait_until(lambda: len(processes_with(token)) >= 3, 60), processes_with(token)
            c.remove_node(doomed)
            removed = True
            (work / "go").touch()                           # the retry elsewhere may finish

            with pytest.raises(HostLost) as lost:
                sc.result(once, timeout=120)
            assert lost.value.node_id == doomed.node_id and lost.value.reason is Reason.SESSION_LOST
            rerun = sc.result(again, timeout=120)
            assert rerun.attempts == 2 and rerun.node_id in (head, second)
            assert rerun.stdout == f"{token}\n".encode()
            with pytest.raises(HostLost):
                s.result(in_session)
            with pytest.raises(HostLost):                   # fails fast, without a call to the dead host
                s.run(["true"])
            s.close()
            assert doomed.node_id not in {h["node_id"] for h in sc.hosts}
            assert sc.run(["true"]).returncode == 0         # the others go on
    finally:
        if not removed:
            c.remove_node(doomed)
    # nothing of the doomed node's sandboxes is left: the commands died with their host
    assert wait_until(lambda: not processes_with(token), 30), processes_with(token)
    assert wait_until(lambda: not _alive(doomed_host["pid"]), 60)   # its worker goes once it sees its raylet gone


def _alive(pid):
    """``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_close_leaves_no_actor_sandbox_or_session(cluster, work):
    from pysandbox.integrations.ray import SandboxCluster
    with SandboxCluster(Policy.default(workdir=str(work)), pool_size=2) as sc:
        s = sc.session()
        s.run(["true"])
        sc.run(["true"])
        pids = [h["pid"] for h in sc.hosts]
        staged = {pid: _children(pid) for pid in pids}
        assert all(staged.values())                      # the control: pools and the session are there
        actors_before = _alive_actor_count()
    assert sc.closed and all(i["sessions"] == 0 for i in sc.closed_info)
    assert wait_until(lambda: not any(_alive(p) for p in pids), 30)
    for pid, kids in staged.items():
        assert wait_until(lambda: not any(_alive(k) for k in kids), 30)
    assert wait_until(lambda: _alive_actor_count() <= actors_before - len(pids), 30)
    with pytest.raises(SessionError) as err:
        sc.run(["true"])
    assert err.value.reason is Reason.SESSION_CLOSED


def _children(pid):
    kids = []
    for tid in _listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(k) for k in f.read().split()]
        except OSError:
            pass
    return kids


def _alive_actor_count():
    from ray.util.state import list_actors
    try:
        return len(list_actors(filters=[("state", "=", "ALIVE")], raise_on_missing_output=False))
    except Exception:   # noqa: BLE001 - the state API needs the dashboard; count through the GCS
        return sum(1 for a in ray.state.actors().values() if a.get("State") in ("ALIVE", 2))
