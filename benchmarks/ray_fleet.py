#!/usr/bin/env python3
"""Commands per second through a Ray cluster (``SandboxCluster``) against a local Pool.

    python benchmarks/ray_fleet.py            # 400 commands per contender
    python benchmarks/ray_fleet.py --quick    # 40: proves it runs
    python benchmarks/ray_fleet.py --json out.json

Starts its own local Ray cluster (``ray.cluster_utils.Cluster``: a head and a second
node on 127.0.0.1, state in a temporary RAY_TMPDIR removed at the end) and measures, each
contender running ``/bin/true`` in a fresh sandbox of ``Policy.default(network="deny")``:

- ``local Pool``: ``pysandbox.Pool(size=4)`` driven by 4 threads (no Ray);
- ``cluster, 1 node``: ``SandboxCluster(hosts=1, pool_size=4)``, ``sc.map``;
- ``cluster, 2 nodes``: ``SandboxCluster(pool_size=4)`` (one host per node), ``sc.map``;
- one command at a time: the median latency of ``pool.run`` and of ``sc.run``, and the
  per-command overhead Ray adds: the median of an ``sc.run``'s latency less the host's own
  launch-to-exit time of that command (``result.run_seconds``).

Both "nodes" of a local cluster share this machine's cores, so the 2-node figure shows the
cost of spreading, not a gain; on separate machines each node brings its own cores.
Needs Ray (``pip install -e '.[ray]'``). Exit 0 when every contender ran.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
NODE_ARGS = {"node_ip_address": "127.0.0.1", "object_store_memory": 80 * 1024 * 1024, "include_dashboard": False}
ARGV = ["/bin/true"]


def _rate(n, seconds):
    return n / seconds if seconds > 0 else float("inf")


def local_pool(policy, n, serial):
    from pysandbox import Pool
    with Pool(policy, size=4) as pool:
        for _ in range(4):
            pool.run(ARGV, check=True)          # warm
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            list(ex.map(lambda _: pool.run(ARGV, check=True), range(n)))
        rate = _rate(n, time.perf_counter() - t0)
        lat = []
        for _ in range(serial):
            t = time.perf_counter()
            pool.run(ARGV, check=True)
            lat.append(time.perf_counter() - t)
    return rate, statistics.median(lat)


def cluster(policy, n, serial, hosts):
    from pysandbox.integrations.ray import SandboxCluster
    with SandboxCluster(policy, hosts=hosts, pool_size=4) as sc:
        list(sc.map([ARGV] * 8))                # warm
        t0 = time.perf_counter()
        results = list(sc.map([ARGV] * n))
        rate = _rate(n, time.perf_counter() - t0)
        assert all(r.returncode == 0 for r in results)
        nodes = len({r.node_id for r in results})
        lat, extra = [], []
        for _ in range(serial):
            t = time.perf_counter()
            done = sc.run(ARGV)
            lat.append(time.perf_counter() - t)
            extra.append(lat[-1] - done.run_seconds)
    return rate, statistics.median(lat), nodes, statistics.median(extra)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    n, serial = (40, 10) if args.quick else (400, 100)
    tmp = tempfile.mkdtemp(prefix="psbray-", dir="/tmp")
    os.environ.update(RAY_ENV, RAY_TMPDIR=tmp)
    import ray
    from ray.cluster_utils import Cluster

    from pysandbox import Policy
    policy = Policy.default(network="deny")
    c = None
    out = {}
    try:
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, **NODE_ARGS})
        c.add_node(num_cpus=2, **NODE_ARGS)
        ray.init(address=c.address, log_to_driver=False, logging_level="warning")
        pool_rate, pool_lat = local_pool(policy, n, serial)
        one_rate, one_lat, one_nodes, one_extra = cluster(policy, n, serial, hosts=1)
        two_rate, two_lat, two_nodes, _ = cluster(policy, n, serial, hosts=None)
        out = {"commands": n, "serial": serial,
               "local_pool_per_s": pool_rate, "cluster_1_node_per_s": one_rate, "cluster_2_nodes_per_s": two_rate,
               "nodes_used": [one_nodes, two_nodes],
               "local_pool_latency_ms": pool_lat * 1e3, "cluster_latency_ms": one_lat * 1e3,
               "ray_overhead_ms": one_extra * 1e3}
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if c is not None:
            c.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'contender':<22}{'commands/s':>12}{'ratio':>8}")
    for name, key in (("local Pool", "local_pool_per_s"), ("cluster, 1 node", "cluster_1_node_per_s"),
                      ("cluster, 2 nodes", "cluster_2_nodes_per_s")):
        print(f"{name:<22}{out[key]:>12.1f}{out[key] / out['local_pool_per_s']:>8.2f}")
    print(f"one command at a time (median): local Pool {out['local_pool_latency_ms']:.2f} ms, "
          f"cluster {out['cluster_latency_ms']:.2f} ms, of which Ray (driver to host and back, outside the "
          f"host's own launch-to-exit) {out['ray_overhead_ms']:.2f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
