"""Helper of scripts/peer-suites.sh (standard library only).

    peer_suites.py fetch WORK    downloads (or reuses the cached) pinned sdists of the installed
                                 scikit-image and trackpy, extracts their test files into WORK
    peer_suites.py report ...    compares a plain and a substituted run with the expected list

`fetch` exits 3 when the package index cannot be reached and nothing is cached (the caller
then skips), 1 on any other failure. It writes WORK/sources.json: where each suite's tests
came from, or why a suite is skipped.
"""

import argparse
import hashlib
import html.parser
import json
import os
import re
import shutil
import socket
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request

TIMEOUT = 30
UNREACHABLE = 3

# trackpy's sdists do not ship trackpy/tests since 0.6: they are taken from the GitHub
# archive of the commit the sdist was built from (its _version.py names it)
TRACKPY_ARCHIVE = "https://codeload.github.com/soft-matter/trackpy/tar.gz/{rev}"
TRACKPY_TEST_FILES = ("__init__.py", "common.py", "test_feature.py", "test_linking.py")
# the main branch keeps its tests in tests/skimage/... (0.26); the older layout second
SKIMAGE_MAIN_BLOB = tuple(
    "https://raw.githubusercontent.com/scikit-image/scikit-image/main/" + p
    for p in ("tests/skimage/feature/test_blob.py", "skimage/feature/tests/test_blob.py")
)


class Unreachable(Exception):
    pass


def _cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = os.path.join(base, "arraybridge", "peer-suites")
    os.makedirs(d, exist_ok=True)
    return d


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        # a proxy refusing the host (403/407) or a server error is an unreachable index; a
        # 404 (no such file) is a real error
        if e.code in (403, 407) or e.code >= 500:
            raise Unreachable(f"{url}: HTTP {e.code}") from None
        raise
    except (urllib.error.URLError, socket.timeout, ConnectionError, OSError) as e:
        raise Unreachable(f"{url}: {e}") from None


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sdist(project: str, version: str) -> str:
    """The cached sdist of ``project==version`` (downloaded from the index's simple API and
    checked against the index's sha256 the first time)."""
    cache = _cache_dir()
    stem = re.sub(r"[-_.]+", "_", project).lower()
    names = {f"{stem}-{version}.tar.gz", f"{project}-{version}.tar.gz"}
    for name in names:
        path = os.path.join(cache, name)
        if os.path.exists(path) and os.path.exists(path + ".sha256"):
            with open(path + ".sha256") as fh:
                if fh.read().strip() == _sha256(path):
                    return path
    index = (
        os.environ.get("PEER_SUITES_INDEX_URL")
        or os.environ.get("PIP_INDEX_URL")
        or "https://pypi.org/simple"
    ).rstrip("/")
    page_url = f"{index}/{re.sub(r'[-_.]+', '-', project).lower()}/"
    page = _get(page_url).decode("utf-8", "replace")
    parser = _Links()
    parser.feed(page)
    for href in parser.hrefs:
        url = urllib.parse.urljoin(page_url, href)
        base, _, frag = url.partition("#")
        name = urllib.parse.unquote(base.rsplit("/", 1)[-1])
        if name.lower() in {n.lower() for n in names}:
            want = frag[len("sha256="):] if frag.startswith("sha256=") else None
            path = os.path.join(cache, name)
            data = _get(base)
            got = hashlib.sha256(data).hexdigest()
            if want is not None and got != want:
                raise SystemExit(f"peer-suites: {name}: sha256 {got}, the index says {want}")
            with open(path + ".part", "wb") as fh:
                fh.write(data)
            os.replace(path + ".part", path)
            with open(path + ".sha256", "w") as fh:
                fh.write(got + "\n")
            return path
    raise SystemExit(f"peer-suites: no sdist {sorted(names)[0]} on {page_url}")


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: str) -> None:
    if ".." in member.name.split("/"):
        raise SystemExit(f"peer-suites: refusing the archive member {member.name!r}")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    src = tar.extractfile(member)
    if src is None:
        return
    with src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out)


def fetch_skimage(version: str, work: str) -> dict:
    path = sdist("scikit-image", version)
    dest = os.path.join(work, "skimage")
    with tarfile.open(path) as tar:
        # 0.26 keeps its tests in tests/skimage/..., older releases in skimage/.../tests
        found = [
            m
            for m in tar.getmembers()
            if m.isfile()
            and re.search(r"/(tests/)?skimage/feature/(tests/)?test_blob\.py$", m.name)
        ]
        if not found:
            raise SystemExit(f"peer-suites: no test_blob.py in {os.path.basename(path)}")
        _extract(tar, found[0], os.path.join(dest, "test_blob.py"))
    return {"tests": dest, "from": f"{os.path.basename(path)} ({found[0].name})"}


def fetch_skimage_main(work: str) -> dict:
    dest = os.path.join(work, "skimage-main")
    override = os.environ.get("PEER_SUITES_SKIMAGE_MAIN")
    if override:
        # a local copy of the main branch's test_blob.py (a checkout without network here)
        os.makedirs(dest, exist_ok=True)
        shutil.copy(override, os.path.join(dest, "test_blob.py"))
        return {"tests": dest, "from": f"{override} (PEER_SUITES_SKIMAGE_MAIN)"}
    errors = []
    for url in SKIMAGE_MAIN_BLOB:
        try:
            data = _get(url)
        except (Unreachable, urllib.error.HTTPError) as e:
            errors.append(str(e))
            continue
        os.makedirs(dest, exist_ok=True)
        with open(os.path.join(dest, "test_blob.py"), "wb") as fh:
            fh.write(data)
        return {"tests": dest, "from": url}
    return {"skipped": f"GitHub unreachable ({errors[0]})"}


def _copy_tests(src_dir: str, dest: str) -> None:
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    for name in TRACKPY_TEST_FILES:
        shutil.copy(os.path.join(src_dir, name), os.path.join(dest, name))
    if os.path.isdir(os.path.join(src_dir, "data")):
        shutil.copytree(os.path.join(src_dir, "data"), os.path.join(dest, "data"))


def fetch_trackpy(version: str, work: str) -> dict:
    path = sdist("trackpy", version)
    dest = os.path.join(work, "trackpy", "tests")
    shutil.rmtree(dest, ignore_errors=True)
    with tarfile.open(path) as tar:
        members = {m.name.split("/", 1)[-1]: m for m in tar.getmembers() if m.isfile()}
        if all(f"trackpy/tests/{n}" in members for n in TRACKPY_TEST_FILES):
            for name, m in members.items():
                if name.startswith("trackpy/tests/") and (
                    name.count("/") == 2 or name.startswith("trackpy/tests/data/")
                ):
                    _extract(tar, m, os.path.join(work, name))
            return {"tests": dest, "from": os.path.basename(path)}
        version_py = tar.extractfile(members["trackpy/_version.py"]).read().decode()
    rev = re.search(r'"full-revisionid":\s*"([0-9a-f]{40})"', version_py)
    if rev is None:
        return {"skipped": f"{os.path.basename(path)} has no tests and names no commit"}
    rev = rev.group(1)
    override = os.environ.get("PEER_SUITES_TRACKPY_TESTS")
    if override:
        # a trackpy checkout's trackpy/tests (for machines without GitHub)
        _copy_tests(override, dest)
        return {
            "tests": dest,
            "from": f"{override} (PEER_SUITES_TRACKPY_TESTS; the sdist's commit is {rev})",
        }
    archive = os.path.join(_cache_dir(), f"trackpy-{rev}.tar.gz")
    if not os.path.exists(archive):
        try:
            data = _get(TRACKPY_ARCHIVE.format(rev=rev))
        except (Unreachable, urllib.error.HTTPError) as e:
            return {
                "skipped": f"the {os.path.basename(path)} sdist has no tests and GitHub is "
                f"unreachable for commit {rev} ({e}); set PEER_SUITES_TRACKPY_TESTS to a "
                "trackpy checkout's trackpy/tests"
            }
        with open(archive + ".part", "wb") as fh:
            fh.write(data)
        os.replace(archive + ".part", archive)
    with tarfile.open(archive) as tar:
        for m in tar.getmembers():
            name = m.name.split("/", 1)[-1]
            if m.isfile() and name.startswith("trackpy/tests/") and (
                name.split("/")[-1] in TRACKPY_TEST_FILES and name.count("/") == 2
                or name.startswith("trackpy/tests/data/")
            ):
                _extract(tar, m, os.path.join(work, name))
    return {
        "tests": dest,
        "from": f"github.com/soft-matter/trackpy at {rev} (the commit of "
        f"{os.path.basename(path)})",
    }


def cmd_fetch(args) -> int:
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    sources = {}
    try:
        sources["skimage"] = fetch_skimage(args.skimage, work)
        sources["trackpy"] = fetch_trackpy(args.trackpy, work)
    except Unreachable as e:
        print(f"peer-suites: {e}", file=sys.stderr)
        return UNREACHABLE
    sources["skimage-main"] = fetch_skimage_main(work)
    with open(os.path.join(work, "sources.json"), "w") as fh:
        json.dump(sources, fh, indent=1)
    return 0


# --- report -------------------------------------------------------------------------------


def read_expected(path: str) -> dict:
    """``{test id: reason}`` from a list: one id a line, `` # reason`` after it; blank lines
    and lines starting with ``#`` are comments."""
    out = {}
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            tid, sep, reason = line.partition(" # ")
            if not sep or not reason.strip():
                raise SystemExit(f"{path}:{n}: expected `<test id> # <reason>`")
            out[tid.strip()] = reason.strip()
    return out


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def cmd_report(args) -> int:
    with open(args.plain) as fh:
        plain = json.load(fh)["tests"]
    with open(args.substituted) as fh:
        subst = json.load(fh)["tests"]
    expected = read_expected(args.expected) if args.expected else {}
    counted, not_subst = [], []
    for tid in sorted(set(plain) | set(subst), key=lambda t: (t.split("::")[0], t)):
        real = plain.get(tid, {"outcome": "not run", "message": ""})
        ab = subst.get(tid, {"outcome": "not run", "message": "", "called": []})
        (counted if ab["called"] else not_subst).append((tid, real, ab))
    baseline = [c for c in counted if c[1]["outcome"] == "passed"]
    passing = [c for c in baseline if c[2]["outcome"] == "passed"]
    diverging = [c for c in baseline if c[2]["outcome"] != "passed"]
    unexpected = [c for c in diverging if c[0] not in expected]
    listed = [c for c in diverging if c[0] in expected]
    fixed = [c for c in passing if c[0] in expected]
    ran = {c[0] for c in counted} | {c[0] for c in not_subst}
    seen = {c[0] for c in diverging} | {c[0] for c in fixed}
    stale = [t for t in expected if t not in seen]
    only_ab = [c for c in counted if c[1]["outcome"] != "passed" and c[2]["outcome"] == "passed"]

    summary = (
        f"{args.label}: {len(passing)} of {len(baseline)} pass "
        f"({len(listed)} expected divergences"
        + (f", {len(unexpected)} {'not listed' if args.informational else 'UNEXPECTED'}"
           if unexpected else "")
        + ")"
    )
    lines = [f"## {args.label}", "", f"Tests from: {args.source}", "", f"**{summary}**", ""]
    lines += [
        f"{len(counted)} tests called an arraybridge function in the substituted run; "
        f"{len(baseline)} of them pass with the real library (the base of the count). "
        f"{len(not_subst)} tests called none (they ran the peer's own code, or were skipped "
        "before any call) and are not counted.",
        "",
        "| test | real library | arraybridge | calls | expected divergence / message |",
        "|---|---|---|---|---|",
    ]
    for tid, real, ab in counted:
        note = expected.get(tid, "")
        if ab["outcome"] != "passed":
            flag = "**unexpected**: " if real["outcome"] == "passed" else ""
            note = note or flag + ab["message"]
        lines.append(
            f"| `{_cell(tid)}` | {real['outcome']} | {ab['outcome']} | {', '.join(ab['called'])} "
            f"| {_cell(note)} |"
        )
    lines += ["", "<details><summary>Not substituted (not counted): "
              f"{len(not_subst)} tests</summary>", ""]
    lines += [f"- `{tid}`: {real['outcome']} (real), {ab['outcome']} (substituted run)"
              for tid, real, ab in not_subst]
    lines += ["", "</details>", ""]
    with open(args.out, "a") as fh:
        fh.write("\n".join(lines) + "\n")

    print(f"peer-suites: {summary}")
    for tid in sorted(set(plain) | set(subst)):
        rec = subst.get(tid) or plain[tid]
        if rec["message"].startswith("collection error"):
            print(f"peer-suites: {args.label}: {tid}: {rec['message']}")
    word = "not listed (information only)" if args.informational else "UNEXPECTED divergence"
    for tid, _, ab in unexpected:
        print(f"peer-suites: {word}: {tid}: {ab['outcome']}: {ab['message']}")
    for tid, _, _ in fixed:
        print(f"peer-suites: fixed, remove from the list: {tid}")
    for tid in stale:
        where = "did not run here" if tid not in ran else "no longer diverges"
        print(f"peer-suites: note: listed {tid} {where}")
    for tid, real, _ in only_ab:
        print(
            f"peer-suites: note: {tid} passes with arraybridge, {real['outcome']} with the "
            "real library"
        )
    if args.summary:
        with open(args.summary, "a") as fh:
            fh.write(summary + "\n")
    return 1 if unexpected and not args.informational else 0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch")
    f.add_argument("work")
    f.add_argument("--skimage", required=True, help="scikit-image version")
    f.add_argument("--trackpy", required=True, help="trackpy version")
    r = sub.add_parser("report")
    r.add_argument("--label", required=True)
    r.add_argument("--source", default="")
    r.add_argument("--plain", required=True)
    r.add_argument("--substituted", required=True)
    r.add_argument("--expected")
    r.add_argument("--out", required=True)
    r.add_argument("--summary")
    r.add_argument("--informational", action="store_true", help="never fail")
    args = ap.parse_args()
    return cmd_fetch(args) if args.cmd == "fetch" else cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
