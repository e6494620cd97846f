"""The corpus comparison itself: it reports what differs and only what the README tolerates."""

from __future__ import annotations

import json

from tests.compat import harness
from tests.compat.corpus import Case
from tests.compat.test_corpus import tolerate


def _record(rc=0, stderr="", **doc):
    base = {"hostname": "h", "uid_map": "0 1000 1\n", "status": {"Seccomp": "0", "Seccomp_filters": "0"},
            "mounts": [], "namespaces": {"pid": "new"}}
    base.update(doc)
    return {"rc": rc, "stdout": json.dumps(base), "stderr": stderr, "outs": {}}


def test_a_difference_in_the_probe_view_is_reported():
    case = Case("x", ["--unshare-uts"])
    diffs = harness.compare(case, _record(), _record(hostname="other"), "/t", tolerate)
    assert diffs == [("hostname", "h", "other")]


def test_exit_status_and_error_class_are_compared():
    case = Case("x", ["--foo"], expect="msg", command=["true"])
    diffs = harness.compare(case, {"rc": 1, "stdout": "", "stderr": "bwrap: Unknown option --foo\n"},
                            {"rc": 1, "stdout": "", "stderr": "bwrap: something else\n"}, "/t", tolerate)
    assert diffs == [("error class", "bwrap: Unknown option --foo", "bwrap: something else")]
    diffs = harness.compare(case, {"rc": 1, "stdout": "", "stderr": "usage: bwrap\n"},
                            {"rc": 0, "stdout": "", "stderr": ""}, "/t", tolerate)
    assert ("exit status", 1, 0) in diffs and ("error class", "usage", "") in diffs


def test_setup_class_only_needs_a_bwrap_line():
    case = Case("x", [], expect="setup", command=["true"])
    assert harness.compare(case, {"rc": 1, "stdout": "", "stderr": "bwrap: a\n"},
                           {"rc": 1, "stdout": "", "stderr": "bwrap: b\n"}, "/t", tolerate) == []
    assert harness.compare(case, {"rc": 1, "stdout": "", "stderr": "bwrap: a\n"},
                           {"rc": 1, "stdout": "", "stderr": "Traceback\n"}, "/t", tolerate) != []


def test_tolerated_seccomp_is_exactly_one_more_filter():
    case = Case("x", ["--unshare-user"])
    ok = harness.compare(case, _record(), _record(status={"Seccomp": "2", "Seccomp_filters": "1"}), "/t", tolerate)
    assert ok == []
    bad = harness.compare(case, _record(), _record(status={"Seccomp": "2", "Seccomp_filters": "2"}), "/t", tolerate)
    assert bad == [("status.Seccomp_filters", "0", "2")]


def test_stderr_of_successful_runs_is_compared():
    case = Case("x", ["--unshare-user"])
    diffs = harness.compare(case, _record(), _record(stderr="bwrap: warning\n"), "/t", tolerate)
    assert diffs == [("stderr", "", "bwrap: warning\n")]


def test_the_callers_own_network_namespace_is_not_compared_but_a_new_one_is():
    """Both runs in the caller's network namespace: its links are the host's live state
    (another test's veth may come and go between the runs), so they are not compared;
    namespaces.net still is. Control: in new namespaces the same difference is reported,
    and a run that left the caller's namespace is reported too."""
    case = Case("x", ["--ro-bind", "/", "/"])
    links = [{"name": "lo"}]
    more = [{"name": "lo"}, {"name": "veth-of-another-test"}]

    def rec(ns, net_links):
        return _record(namespaces={"pid": "new", "net": ns}, network={"links": net_links})
    assert harness.compare(case, rec("same", links), rec("same", more), "/t", tolerate) == []
    new = harness.compare(case, rec("new", links), rec("new", more), "/t", tolerate)
    assert [k for k, _, _ in new] == ["network.links"], new
    left = harness.compare(case, rec("same", links), rec("new", links), "/t", tolerate)
    assert [k for k, _, _ in left] == ["namespaces.net"], left


def test_d7_tolerates_the_order_only():
    case = Case("x", ["--proc", "/proc"])
    assert tolerate(case, "mounts.order", "/ /proc /sys /proc/irq", "/ /proc /proc/irq /proc/sys /sys")
    # control: a mount point bwrap has and pybwrap lacks (or the other way) is a difference
    assert not tolerate(case, "mounts.order", "/ /proc /sys /dev", "/ /proc /proc/sys /sys")
    assert not tolerate(case, "mounts.order", "/ /proc /sys", "/ /proc /sys /tmp")
