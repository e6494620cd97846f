"""The normalisation rules do what tests/support/probe_normalise.py claims, and no more: a real
difference in anything a rule does not name is still reported."""

from __future__ import annotations

from tests.support.probe_normalise import diff, flatten, normalise_mounts


def _m(id_, parent, point, dev="0:40", root="/", opts="rw,nosuid", optional=(), fstype="tmpfs",
       source="tmpfs", superopts="rw"):
    return {"id": id_, "parent": parent, "dev": dev, "root": root, "mountpoint": point,
            "opts": opts.split(","), "optional": list(optional), "fstype": fstype, "source": source,
            "superopts": superopts.split(",")}


HOST = frozenset({"254:0"})


def test_ids_and_anonymous_devices_are_renamed_but_sharing_is_kept():   # R1 R2
    a = [_m(10, 9, "/", dev="254:0", fstype="ext4"), _m(11, 10, "/tmp", dev="0:41"), _m(12, 10, "/x", dev="0:41")]
    b = [_m(70, 1, "/", dev="254:0", fstype="ext4"), _m(75, 70, "/tmp", dev="0:99"), _m(76, 70, "/x", dev="0:99")]
    assert normalise_mounts(a, HOST) == normalise_mounts(b, HOST)
    c = [_m(70, 1, "/", dev="254:0", fstype="ext4"), _m(75, 70, "/tmp", dev="0:99"), _m(76, 70, "/x", dev="0:98")]
    assert normalise_mounts(a, HOST) != normalise_mounts(c, HOST)   # two superblocks, not one


def test_host_device_numbers_are_kept():   # R2
    a = [_m(10, 9, "/", dev="254:0")]
    b = [_m(10, 9, "/", dev="254:1")]
    assert normalise_mounts(a, HOST | {"254:1"}) != normalise_mounts(b, HOST | {"254:1"})


def test_propagation_compared_with_its_peer_groups():
    # no rule: both backends' mounts are private or slaves of the same host peer groups
    a = [_m(10, 9, "/", optional=["master:5"])]
    b = [_m(10, 9, "/", optional=["master:77"])]
    assert normalise_mounts(a, HOST) != normalise_mounts(b, HOST)
    assert normalise_mounts([_m(10, 9, "/")], HOST)[0]["propagation"] == "private"


def test_deleted_backing_file_name_dropped():   # R3
    a = [_m(10, 9, "/f", root="/bindfileAb12Cd//deleted")]
    b = [_m(10, 9, "/f", root="/.psb-file-3//deleted")]
    c = [_m(10, 9, "/f", root="/kept-file")]
    assert normalise_mounts(a, HOST) == normalise_mounts(b, HOST)
    assert normalise_mounts(a, HOST) != normalise_mounts(c, HOST)


def test_covered_mounts_keep_existence_but_not_options():   # R7
    under = [_m(1, 0, "/", dev="254:0"), _m(2, 1, "/dev", dev="0:6", opts="ro,nosuid"),
             _m(3, 2, "/dev/shm", dev="0:23", opts="rw"), _m(4, 1, "/dev", dev="0:50", opts="rw,nosuid")]
    over = [dict(m) for m in under]
    over[2] = _m(3, 2, "/dev/shm", dev="0:23", opts="ro,nosuid,nodev")
    assert normalise_mounts(under, HOST) == normalise_mounts(over, HOST)
    assert normalise_mounts(under, HOST)[2]["opts"] == "<covered>"
    # the top mount's options are compared
    top = [dict(m) for m in under]
    top[3] = _m(4, 1, "/dev", dev="0:50", opts="ro,nosuid")
    assert normalise_mounts(under, HOST) != normalise_mounts(top, HOST)
    # a mount on a child of the top mount is not covered by it
    child = under + [_m(5, 4, "/dev/pts", dev="0:51", opts="rw")]
    assert normalise_mounts(child, HOST)[4]["opts"] == "rw"
    # losing a covered mount is still a difference
    assert flatten({"mounts": under[:2] + under[3:]}, HOST) != flatten({"mounts": under}, HOST)


def test_host_pids_dropped_only_without_a_pid_namespace():   # R6
    a = {"pid": 101, "ppid": 100, "namespaces": {"pid": "same"}, "status": {"NSpid": "101", "NSsid": "99"}}
    b = {"pid": 202, "ppid": 200, "namespaces": {"pid": "same"}, "status": {"NSpid": "202", "NSsid": "98"}}
    assert diff(flatten(a, HOST), flatten(b, HOST)) == []
    c = {"pid": 2, "ppid": 1, "namespaces": {"pid": "new"}, "status": {"NSpid": "3404 2", "NSsid": "3403 1"}}
    d = {"pid": 2, "ppid": 1, "namespaces": {"pid": "new"}, "status": {"NSpid": "2", "NSsid": "1"}}
    e = {"pid": 1, "ppid": 0, "namespaces": {"pid": "new"}, "status": {"NSpid": "1", "NSsid": "1"}}
    assert diff(flatten(c, HOST), flatten(d, HOST)) == []
    assert {f for f, _, _ in diff(flatten(d, HOST), flatten(e, HOST))} == {"pid", "ppid", "status.NSpid"}


def test_everything_else_is_compared_exactly():
    base = {"env": {"A": "1"}, "cwd": "/", "uid_map": "0 1000 1\n", "mounts": [_m(1, 0, "/", opts="ro,nosuid")],
            "dev": {"entries": {"null": {"type": "c", "mode": "0o666"}}}, "detail": "x"}
    for path, value in [(("env", "A"), "2"), (("cwd",), "/tmp"), (("uid_map",), "0 0 1\n"),
                        (("dev", "entries", "null", "mode"), "0o600")]:
        other = _set(base, path, value)
        assert diff(flatten(base, HOST), flatten(other, HOST)), path
    other = dict(base, mounts=[_m(1, 0, "/", opts="rw,nosuid")])
    assert [f for f, _, _ in diff(flatten(base, HOST), flatten(other, HOST))] == ["mount /#0.opts"]
    # a launch failure's message is not compared; its class and reason are
    assert diff(flatten(base, HOST), flatten(dict(base, detail="y"), HOST)) == []


def _set(doc, path, value):
    import copy
    out = copy.deepcopy(doc)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def test_a_session_proxy_password_is_masked_and_nothing_else():   # R8
    def env(**kw):
        return flatten({"env": kw}, HOST)
    a = env(HTTP_PROXY="http://c1:one@127.0.0.1:3128", all_proxy="socks5h://c1:one@127.0.0.1:3128")
    b = env(HTTP_PROXY="http://c1:two@127.0.0.1:3128", all_proxy="socks5h://c1:two@127.0.0.1:3128")
    assert diff(a, b) == []
    # controls: the user, the address, and a variable that is not a proxy's still differ
    assert diff(env(HTTP_PROXY="http://c1:x@127.0.0.1:3128"), env(HTTP_PROXY="http://c2:x@127.0.0.1:3128"))
    assert diff(env(HTTP_PROXY="http://c1:x@127.0.0.1:3128"), env(HTTP_PROXY="http://c1:x@127.0.0.2:3128"))
    assert diff(env(OTHER="http://c1:one@h"), env(OTHER="http://c1:two@h"))


def test_the_order_of_the_mount_table_is_compared():   # R1
    mounts = [_m(10, 9, "/", dev="254:0", fstype="ext4"), _m(11, 10, "/tmp"), _m(12, 10, "/x", dev="0:42")]
    swapped = [mounts[0], mounts[2], mounts[1]]
    fields = [f for f, _, _ in diff(flatten({"mounts": mounts}, HOST), flatten({"mounts": swapped}, HOST))]
    assert "mounts.order" in fields
    assert not diff(flatten({"mounts": mounts}, HOST), flatten({"mounts": list(mounts)}, HOST))   # control
