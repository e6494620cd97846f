"""The in-sandbox scripts behind PysandboxSandbox's two opt-in conventions (those of
LangChain's standard sandbox suite, ``langchain-tests``), and the parsing of their output.

- create-only write: ``write()`` refuses a path that exists (the suite's
  ``test_write_existing_file_fails``); Deep Agents' protocol says write overwrites.
- root-relative glob: ``glob()`` reports paths relative to the search root, directories
  included (``is_dir`` True) (the suite's ``test_glob*``); Deep Agents' protocol says
  absolute paths of regular files only.

Both run inside the sandbox (``sh`` and ``python3``), never as a host-side open.
"""

from __future__ import annotations

import base64
import json

try:
    from deepagents.backends.protocol import GlobResult
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("pysandbox.integrations.deepagents needs Deep Agents: "
                      "pip install 'pysandbox[deepagents]'") from exc

__all__ = ["CREATE", "EXISTS_EXIT", "already_exists", "glob_command", "parse_glob"]

EXISTS_EXIT = 103
"""The exit status of ``CREATE`` when something is already at the path."""

# Run as ``sh -c CREATE sh PATH``, content on stdin: as the upload script, but nothing
# that exists (a file, a symlink, even dangling) is replaced. set -C makes the final
# open exclusive for a regular file, so a file appearing after the test is kept too.
CREATE = r"""LC_ALL=C; export LC_ALL
[ -d "$1" ] && exit 101
{ [ -e "$1" ] || [ -L "$1" ]; } && exit 103
d=${1%/*}
[ -z "$d" ] || [ -d "$d" ] || mkdir -p -- "$d" || exit 1
set -C
exec cat >"$1"
"""


def already_exists(path: str) -> str:
    """The error of a create-only write onto an existing path."""
    return (f"Error: Cannot write to {path} because it already exists. "
            "Read and then make an edit to the file instead.")


# The walk: the Deep Agents glob contract (a pattern without '/' matches the basename
# at any depth; with '/', the root-relative path, '**' any directories but no
# leading-dot one; a leading-dot name only for a pattern segment starting with '.';
# {a,b} alternatives; no '..'), over directories and regular files alike. Bounded as
# Deep Agents' own walk: 5 s, 10000 matches, 1000 brace alternatives.
_GLOB = r"""
import base64, fnmatch, json, os, sys, time
root = base64.b64decode(sys.argv[1]).decode()
pattern = base64.b64decode(sys.argv[2]).decode()
def expand(p, out):
    i = p.find('{')
    if i < 0:
        out.append(p)
        return len(out) <= 1000
    depth = 0
    for j in range(i, len(p)):
        depth += {'{': 1, '}': -1}.get(p[j], 0)
        if depth == 0:
            break
    else:
        out.append(p)
        return len(out) <= 1000
    parts, cur, depth = [], '', 0
    for ch in p[i + 1:j]:
        depth += {'{': 1, '}': -1}.get(ch, 0)
        if ch == ',' and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += ch
    parts.append(cur)
    if len(parts) < 2:
        return expand(p[:i] + '\0' + p[i + 1:j] + '\1' + p[j + 1:], out)
    return all(expand(p[:i] + part + p[j + 1:], out) for part in parts)
def seg_ok(name, seg):
    return not (name.startswith('.') and not seg.startswith('.')) and fnmatch.fnmatchcase(name, seg)
def parts_ok(names, segs, memo):
    key = (len(names), len(segs))
    if key not in memo:
        if not segs:
            memo[key] = not names
        elif segs == ['**']:  # a trailing '**': at least one name below, none hidden
            memo[key] = bool(names) and not any(n.startswith('.') for n in names)
        elif segs[0] == '**':
            memo[key] = parts_ok(names, segs[1:], memo) or bool(
                names and not names[0].startswith('.') and parts_ok(names[1:], segs, memo))
        else:
            memo[key] = bool(names) and seg_ok(names[0], segs[0]) and parts_ok(names[1:], segs[1:], memo)
    return memo[key]
def matches(rel, candidates):
    names = rel.split('/')
    for c in candidates:
        if '/' not in c:
            if seg_ok(names[-1], c):
                return True
        elif parts_ok(names, [s for s in c.split('/') if s], {}):
            return True
    return False
def emit(record):
    print(json.dumps(record))
if any(s == '..' for s in pattern.replace(chr(92), '/').split('/')):
    emit({'error': 'invalid_pattern'}); sys.exit(0)
expanded = []
if not expand(pattern, expanded):
    emit({'error': 'pattern_too_broad'}); sys.exit(0)
candidates = [c.replace('\0', '{').replace('\1', '}').replace('[^', '[!') for c in expanded]
if not os.path.exists(root):
    emit({'error': 'path_not_found'}); sys.exit(0)
if not os.path.isdir(root):
    emit({'error': 'not_a_directory'}); sys.exit(0)
if not os.access(root, os.R_OK | os.X_OK):
    emit({'error': 'permission_denied'}); sys.exit(0)
real_root = os.path.realpath(root)
prefix = real_root.rstrip('/') + '/'
deadline, found, errors, truncated = time.monotonic() + 5.0, [], [], False
for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: errors.append(str(e.filename))):
    if dirpath == root and real_root == '/':
        dirnames[:] = [d for d in dirnames if d not in ('proc', 'sys', 'dev')]
    base = os.path.relpath(dirpath, root)
    for name in dirnames + filenames:
        if time.monotonic() > deadline or len(found) >= 10000:
            truncated = True
            break
        rel = name if base == '.' else base + '/' + name
        full = os.path.join(dirpath, name)
        if not matches(rel, candidates) or not os.path.realpath(full).startswith(prefix):
            continue
        if os.path.isdir(full) or os.path.isfile(full):
            found.append((rel, os.path.isdir(full)))
    if truncated:
        break
for rel, is_dir in sorted(found):
    emit({'path': rel, 'is_dir': is_dir})
if errors:
    emit({'warning': 'walk_errors', 'count': len(errors)})
if truncated:
    emit({'warning': 'truncated'})
"""


def glob_command(pattern: str, root: str, python: str = "python3") -> list[str]:
    """The argv running the root-relative glob of ``pattern`` under ``root`` (absolute)."""
    b64 = [base64.b64encode(s.encode("utf-8", "surrogateescape")).decode("ascii") for s in (root, pattern)]
    return [python, "-c", _GLOB, *b64]


def parse_glob(returncode: int, output: str, root: str) -> GlobResult:
    """The GlobResult of the walk's JSON lines. A failed walk, an error record or a line
    that is not a record is an error (never a confident empty result)."""
    if returncode != 0:
        return GlobResult(error=f"Path '{root}': glob helper failed: {output.strip()[:200] or returncode}")
    infos, truncated, reason = [], False, None
    for line in output.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            return GlobResult(error=f"Path '{root}': glob helper emitted unexpected output: {line[:200]}")
        if "error" in record:
            return GlobResult(error=f"Path '{root}': {record['error']}")
        if "warning" in record:
            truncated = True
            reason = "unreadable" if record["warning"] == "walk_errors" else reason or "budget"
            continue
        infos.append({"path": record["path"], "is_dir": bool(record["is_dir"])})
    return GlobResult(matches=infos, truncated=truncated, truncation_reason=reason)
