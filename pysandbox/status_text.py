"""The text form of ``pysandbox status`` (``--json`` prints ``Status.to_dict()``)."""

from __future__ import annotations


def emit(text: str) -> None:
    """Print the report; a reader that went away (``pysandbox status | head``) is not an
    error: the rest is dropped quietly, and stdout is pointed at /dev/null so the
    interpreter's own flush at exit does not raise again."""
    import os
    import sys
    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def format_status(st) -> str:
    """The human table of ``pysandbox status``."""
    verdict = "available" if st.available else f"UNAVAILABLE: {st.reason}"
    lines = [f"policy network={st.network_mode}: backend {st.backend}: {verdict}"]
    if st.detail:
        lines.append(f"  {st.detail}")
    if st.host:
        facts = ", ".join(f"{k}={'yes' if v is True else 'no' if v is False else v}" for k, v in st.host.items())
        lines.append(f"host: {facts}")
    if st.authority:
        lines.extend(authority_lines(st.authority))
    if st.credentials:
        lines.extend(credential_lines(st.credentials))
    if st.git:
        lines.append("git metadata: read-only " + (", ".join(st.git["protected"]) or "none in the writable paths")
                     + f" (opt out: {st.git['opt_out']})")
    if st.limits:
        lines.extend(limit_lines(st.limits))
    if st.seccomp:
        lines.extend(seccomp_lines(st.seccomp))
    for name, bs in st.backends.items():
        head = "ok" if bs.available else f"no   {bs.reason}"
        extra = ", ".join(f"{k} {v}" for k, v in sorted(bs.info.items()) if v not in (None, ""))
        lines.append("")
        lines.append(f"{name:<8} {head}" + (f"  ({extra})" if extra else ""))
        rows = [(f"  {c.name}", c) for c in bs.capabilities] + \
               [(f"  network {mode}", c) for mode, c in bs.network.items()]
        for label, cap in rows:
            if cap.available:
                lines.append(f"{label:<18} ok")
            else:
                detail = f"  {cap.detail}" if cap.detail and cap.detail != bs.detail else ""
                lines.append(f"{label:<18} no   {cap.reason}{detail}")
    return "\n".join(lines)


def authority_lines(cov: dict) -> list[str]:
    """``status``'s Unix-socket authority coverage (authority.coverage) as text lines."""
    masked = ", ".join(cov.get("masked") or ()) or "none"
    unset = ", ".join(cov.get("unset") or ()) or "none"
    flags = [name for name in ("kept", "strict_unix") if cov.get(name)]
    head = "authority sockets" + (f" ({', '.join(flags)})" if flags else "")
    return [f"{head}: masked {masked}; variables unset {unset}", f"  {cov.get('scope', '')}"]


def credential_lines(cov: dict) -> list[str]:
    """``status``'s credential stores (credentials.coverage) as text lines."""
    hidden = ", ".join(cov.get("hidden") or ()) or "none"
    readable = ", ".join(cov.get("readable") or ()) or "none"
    if cov.get("env_drops_secrets"):
        env = "environment: left out " + (", ".join(cov.get("env_dropped") or ()) or "none present") + \
              " (names with KEY, TOKEN, SECRET, PASSWORD, ...; URLs with a password)"
    else:
        env = "environment: passed whole, secrets included"
    return [f"credentials: hidden {hidden}; readable {readable}", f"  {cov.get('scope', '')}", f"  {env}",
            f"  opt out: {cov.get('opt_out', '')}"]


def limit_lines(limits: dict) -> list[str]:
    """``status``'s resource limits (enforcement.host_limits): one line per limit."""
    lines = ["resource limits:"]
    for kind, got in limits.items():
        if got["available"]:
            lines.append(f"  {kind:<12} ok   {got['mechanism']}")
        else:
            lines.append(f"  {kind:<12} no   {got['reason']}  {got['detail']}")
    return lines


def seccomp_lines(cov: dict) -> list[str]:
    """``status``'s built-in seccomp filter (seccomp.coverage): the calls refused whole, by
    errno, and the opt-ins the policy takes."""
    by_errno: dict = {}
    for call, err in cov.get("refused", {}).items():
        by_errno.setdefault(err, []).append(call)
    refused = "; ".join(f"{', '.join(calls)} ({err})" for err, calls in by_errno.items())
    allowed = ", ".join(cov.get("allowed") or ()) or "none"
    return [f"seccomp: refused {refused}",
            f"  allowed by the policy: {allowed} (opt-in: --allow-syscall {'|'.join(cov.get('opt_in', ()))}, "
            "--allow-io-uring)"]
