"""A small Hugging Face Hub of our own, on loopback, for tests only.

It speaks the part of the Hub's HTTP protocol that the installed huggingface_hub client (1.x,
read from its source: hf_api.py create_repo/create_branch/create_commit/repo_info/list_repo_tree,
_commit_api.py preupload and commit, lfs.py batch/upload/verify, file_download.py resolve) calls
for create_repo + create_commit (what upload_folder also ends in without Xet) + snapshot_download,
so the real client can be pointed at it with HF_ENDPOINT. Repos live in memory as git-like
commits of file maps. The client also fetches `/api/agent-harnesses` (a registry it uses to tag
its user agent); it gets an empty one.

- `POST /api/repos/create` {name, organization, type, visibility?} -> {"url"}; 409 with the url when it exists
- `GET  /api/models/{repo}[/revision/{rev}]` -> {id, sha, private, siblings}
- `POST /api/models/{repo}/branch/{branch}` -> 409 when it exists
- `POST /api/validate-yaml` -> {"errors": [], "warnings": []}, or 400 with errors for bad YAML
- `POST /api/models/{repo}/preupload/{rev}` -> {"files": [{path, uploadMode, shouldIgnore, oid}]}
  (oid = what the client compares with its local oid: git blob sha1 for regular files, sha256 for LFS)
- `POST /{repo}.git/info/lfs/objects/batch` -> upload + verify actions (none for a known object)
- `PUT  /__lfs/{oid}` (plain or chunked body, sha256 checked) and `POST /__lfs/verify`
- `POST /api/models/{repo}/commit/{rev}[?create_pr=1]` NDJSON (header, file, lfsFile, deletedFile)
  -> {commitOid, commitUrl, pullRequestUrl}
- `GET  /api/models/{repo}/tree/{rev}[/{path}]?recursive=` -> [{type, oid, size, path, lfs?}]
- `HEAD|GET /{repo}/resolve/{rev}/{path}` with X-Repo-Commit, ETag, X-Linked-Etag/-Size for LFS

Errors carry the `X-Error-Code` header the client maps to its exceptions (RepoNotFound,
RevisionNotFound, EntryNotFound); a wrong token gets 401 "Invalid credentials in Authorization
header", as the Hub answers. `faults` makes the next matching request fail: {"commit": "drop"}
closes the connection without an answer (a network failure at the commit); "500" answers 500.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass
class Entry:
    size: int
    content: bytes | None = None  # regular file
    lfs_sha256: str | None = None  # LFS file (bytes in Hub.lfs)

    @property
    def oid(self) -> str:  # the git blob id, as the Hub's tree lists it
        if self.lfs_sha256:
            return git_blob_sha1(lfs_pointer(self.lfs_sha256, self.size))
        return git_blob_sha1(self.content or b"")


@dataclass
class Commit:
    oid: str
    parent: str | None
    message: str
    files: dict[str, Entry]


@dataclass
class Repo:
    repo_id: str
    private: bool
    branches: dict[str, str] = field(default_factory=dict)  # name (or refs/pr/N) -> commit oid
    commits: dict[str, Commit] = field(default_factory=dict)
    prs: int = 0

    def resolve(self, rev: str) -> Commit | None:
        if rev in self.branches:
            return self.commits[self.branches[rev]]
        return self.commits.get(rev)


class Hub:
    """The state: repos, LFS objects, valid tokens, a request log and injected faults."""

    def __init__(self, tokens: set[str], lfs_suffixes: tuple[str, ...] = (".safetensors", ".bin"),
                 lfs_min_size: int = 10 * 1024 * 1024):
        self.tokens = tokens
        self.lfs_suffixes = lfs_suffixes  # () = every file regular ("regular mode")
        self.lfs_min_size = lfs_min_size
        self.repos: dict[str, Repo] = {}
        self.lfs: dict[str, bytes] = {}
        self.log: list[str] = []  # "METHOD path -> status"
        self.faults: dict[str, str] = {}
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    # -- life cycle -----------------------------------------------------------------------------

    def start(self) -> str:
        hub = self

        class Handler(_Handler):
            state = hub

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self.url

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    # -- helpers for tests -----------------------------------------------------------------------

    def commits(self, repo_id: str, branch: str = "main") -> list[Commit]:
        repo = self.repos[repo_id]
        out, oid = [], repo.branches.get(branch)
        while oid:
            out.append(repo.commits[oid])
            oid = repo.commits[oid].parent
        return out

    def file_bytes(self, repo_id: str, path: str, branch: str = "main") -> bytes:
        entry = self.repos[repo_id].resolve(branch).files[path]
        return self.lfs[entry.lfs_sha256] if entry.lfs_sha256 else entry.content

    def new_commit(self, repo: Repo, parent: str | None, message: str, files: dict[str, Entry]) -> Commit:
        blob = json.dumps([parent, message, sorted((p, e.oid) for p, e in files.items()), time.time_ns()])
        commit = Commit(hashlib.sha1(blob.encode()).hexdigest(), parent, message, files)
        repo.commits[commit.oid] = commit
        return commit


class _Error(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, body: dict | None = None):
        self.status, self.message, self.code, self.body = status, message, code, body


REPO = r"(?P<repo>[^/]+/[^/]+)"
ROUTES = [
    ("POST", re.compile(r"^/api/repos/create$"), "create_repo"),
    ("POST", re.compile(r"^/api/validate-yaml$"), "validate_yaml"),
    ("GET", re.compile(r"^/api/agent-harnesses$"), "agent_harnesses"),
    ("GET", re.compile(rf"^/api/models/{REPO}/revision/(?P<rev>[^/]+)$"), "repo_info"),
    ("GET", re.compile(rf"^/api/models/{REPO}$"), "repo_info"),
    ("POST", re.compile(rf"^/api/models/{REPO}/branch/(?P<branch>.+)$"), "create_branch"),
    ("POST", re.compile(rf"^/api/models/{REPO}/preupload/(?P<rev>[^/]+)$"), "preupload"),
    ("POST", re.compile(rf"^/api/models/{REPO}/commit/(?P<rev>[^/]+)$"), "commit"),
    ("GET", re.compile(rf"^/api/models/{REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$"), "tree"),
    ("POST", re.compile(rf"^/{REPO}\.git/info/lfs/objects/batch$"), "lfs_batch"),
    ("PUT", re.compile(r"^/__lfs/(?P<oid>[0-9a-f]{64})$"), "lfs_put"),
    ("POST", re.compile(r"^/__lfs/verify$"), "lfs_verify"),
    ("HEAD", re.compile(rf"^/{REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$"), "resolve"),
    ("GET", re.compile(rf"^/{REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$"), "resolve"),
]


class _Handler(BaseHTTPRequestHandler):
    state: Hub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # the test log is Hub.log, not stderr
        pass

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    # -- plumbing -------------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        parts = urlsplit(self.path)
        self.query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        body = self._body()
        for verb, pattern, name in ROUTES:
            m = pattern.match(parts.path)
            if verb == method and m:
                break
        else:
            self._log(method, parts.path, "404 NO ROUTE")  # tests assert the client never gets here
            return self._send(404, {"error": f"no route {method} {parts.path}"})
        fault = self.state.faults.pop(name, None)
        if fault == "500":
            self._log(method, parts.path, 500)
            return self._send(500, {"error": "Internal Error - We're working hard to fix this as soon as possible!"})
        if fault == "drop":  # a network failure: the connection dies before any answer
            self._log(method, parts.path, "dropped")
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        try:
            status, payload, headers = getattr(self, name)(method, body, **{k: unquote(v) if v else v for k, v in m.groupdict().items()})
        except _Error as err:
            headers = {"X-Error-Message": err.message}
            if err.code:
                headers["X-Error-Code"] = err.code
            self._log(method, parts.path, err.status)
            return self._send(err.status, err.body or {"error": err.message}, headers)
        self._log(method, parts.path, status)
        self._send(status, payload, headers, head=method == "HEAD")

    def _log(self, method: str, path: str, status) -> None:
        with self.state.lock:
            self.state.log.append(f"{method} {path} -> {status}")

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, payload, headers: dict | None = None, head: bool = False) -> None:
        if isinstance(payload, (bytes, bytearray)):
            data, ctype = bytes(payload), "application/octet-stream"
        else:
            data, ctype = json.dumps(payload).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not head:
            self.wfile.write(data)

    # -- auth and lookup --------------------------------------------------------------------------

    def _token(self, required: bool) -> str | None:
        auth = self.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else None
        if token is not None and token not in self.state.tokens:
            raise _Error(401, "Invalid credentials in Authorization header")
        if required and token is None:
            raise _Error(401, "You must be authenticated to access this resource")
        return token

    def _repo(self, repo_id: str, write: bool = False) -> Repo:
        token = self._token(required=write)
        repo = self.state.repos.get(repo_id)
        if repo is None or (repo.private and token is None):
            raise _Error(404, "Repository not found", "RepoNotFound")
        return repo

    def _commit(self, repo: Repo, rev: str) -> Commit:
        commit = repo.resolve(rev)
        if commit is None:
            raise _Error(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return commit

    # -- endpoints ------------------------------------------------------------------------------

    def create_repo(self, method, body):
        token = self._token(required=True)
        assert token
        data = json.loads(body)
        repo_id = f"{data['organization']}/{data['name']}" if data.get("organization") else f"user/{data['name']}"
        url = f"{self.state.url}/{repo_id}"
        with self.state.lock:
            if repo_id in self.state.repos:
                raise _Error(409, "You already created this model repo", body={"error": "You already created this model repo", "url": url})
            repo = Repo(repo_id, private=data.get("visibility") == "private" or bool(data.get("private")))
            # a new Hub repo starts with one commit holding .gitattributes
            attrs = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
            first = self.state.new_commit(repo, None, "initial commit", {".gitattributes": Entry(len(attrs), attrs)})
            repo.branches["main"] = first.oid
            self.state.repos[repo_id] = repo
        return 200, {"url": url, "name": repo_id, "id": repo_id}, {}

    def agent_harnesses(self, method, body):
        # the client fetches this registry (best effort, once a day) to tag its user agent; an
        # empty one detects no harness
        return 200, {"standardEnvVars": [], "harnesses": {}}, {}

    def repo_info(self, method, body, repo, rev="main"):
        r = self._repo(repo)
        commit = self._commit(r, rev)
        return 200, {"id": repo, "modelId": repo, "sha": commit.oid, "private": r.private,
                     "siblings": [{"rfilename": p} for p in sorted(commit.files)]}, {}

    def create_branch(self, method, body, repo, branch):
        r = self._repo(repo, write=True)
        data = json.loads(body or b"{}")
        with self.state.lock:
            if branch in r.branches:
                raise _Error(409, "Reference already exists")
            r.branches[branch] = self._commit(r, data.get("startingPoint") or "main").oid
        return 200, {}, {}

    def validate_yaml(self, method, body):
        import yaml

        content = json.loads(body)["content"]
        if not content.startswith("---\n"):
            return 200, {"errors": [], "warnings": [{"message": "empty or missing yaml metadata in repo card"}]}, {}
        try:
            meta = yaml.safe_load(content.split("\n---\n", 1)[0][4:])
        except yaml.YAMLError as exc:
            raise _Error(400, "Invalid YAML", body={"errors": [{"message": f"Invalid YAML: {exc}"}]})
        errors = []
        for item in meta.get("model-index", []) or []:  # what the Hub checks for model-index
            for result in item.get("results", []):
                if "task" not in result or "dataset" not in result or "metrics" not in result:
                    errors.append({"message": "model-index results need task, dataset and metrics"})
        if errors:
            raise _Error(400, "Invalid metadata", body={"errors": errors})
        return 200, {"errors": [], "warnings": []}, {}

    def _is_lfs(self, path: str, size: int) -> bool:
        return bool(self.state.lfs_suffixes) and (path.endswith(self.state.lfs_suffixes) or size >= self.state.lfs_min_size)

    def preupload(self, method, body, repo, rev):
        r = self._repo(repo, write=True)
        current = r.resolve(rev)
        files = []
        for f in json.loads(body)["files"]:
            lfs = self._is_lfs(f["path"], f["size"])
            entry = current.files.get(f["path"]) if current else None
            # the client's local oid: sha256 for LFS uploads, git blob sha1 for regular ones
            oid = None if entry is None else (entry.lfs_sha256 if lfs else git_blob_sha1(self.state.file_bytes(repo, f["path"], rev)))
            files.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid})
        return 200, {"files": files, "commitOid": current.oid if current else None}, {}

    def lfs_batch(self, method, body, repo):
        self._repo(repo, write=True)
        data = json.loads(body)
        objects = []
        for obj in data["objects"]:
            if obj["oid"] in self.state.lfs:
                objects.append({"oid": obj["oid"], "size": obj["size"]})  # already stored: nothing to send
            else:
                objects.append({"oid": obj["oid"], "size": obj["size"], "authenticated": True, "actions": {
                    "upload": {"href": f"{self.state.url}/__lfs/{obj['oid']}"},
                    "verify": {"href": f"{self.state.url}/__lfs/verify"},
                }})
        return 200, {"transfer": "basic", "objects": objects, "hash_algo": "sha256"}, {"Content-Type": "application/vnd.git-lfs+json"}

    def lfs_put(self, method, body, oid):
        if hashlib.sha256(body).hexdigest() != oid:
            raise _Error(400, "sha256 mismatch")
        with self.state.lock:
            self.state.lfs[oid] = body
        return 200, {}, {}

    def lfs_verify(self, method, body):
        data = json.loads(body)
        stored = self.state.lfs.get(data["oid"])
        if stored is None or len(stored) != data["size"]:
            raise _Error(404, "object not found")
        return 200, {}, {}

    def commit(self, method, body, repo, rev):
        r = self._repo(repo, write=True)
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        header = lines[0]
        assert header["key"] == "header", header
        create_pr = self.query.get("create_pr") == "1"
        with self.state.lock:
            base = self._commit(r, rev)
            if header["value"].get("parentCommit") and header["value"]["parentCommit"] != base.oid:
                raise _Error(412, "A commit has happened since. Please refresh and try again.")
            files = dict(base.files)
            for item in lines[1:]:
                value = item["value"]
                if item["key"] == "file":
                    content = base64.b64decode(value["content"])
                    files[value["path"]] = Entry(len(content), content=content)
                elif item["key"] == "lfsFile":
                    if value["oid"] not in self.state.lfs:
                        raise _Error(422, f"LFS object {value['oid']} was not uploaded")
                    files[value["path"]] = Entry(value["size"], lfs_sha256=value["oid"])
                elif item["key"] == "deletedFile":
                    files.pop(value["path"], None)
                else:
                    raise _Error(400, f"unsupported commit operation {item['key']}")
            commit = self.state.new_commit(r, base.oid, header["value"]["summary"], files)
            pr_url = None
            if create_pr:
                r.prs += 1
                r.branches[f"refs/pr/{r.prs}"] = commit.oid
                pr_url = f"{self.state.url}/{repo}/discussions/{r.prs}"
            else:
                r.branches[rev] = commit.oid
        return 200, {"success": True, "commitOid": commit.oid, "commitUrl": f"{self.state.url}/{repo}/commit/{commit.oid}",
                     "pullRequestUrl": pr_url}, {}

    def tree(self, method, body, repo, rev, path=None):
        r = self._repo(repo)
        commit = self._commit(r, rev)
        prefix = (path.strip("/") + "/") if path else ""
        recursive = self.query.get("recursive", "False").lower() == "true"
        out, dirs = [], set()
        for name in sorted(commit.files):
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix):]
            if "/" in rest:
                top = prefix + rest.split("/")[0]
                if top not in dirs:
                    dirs.add(top)
                    out.append({"type": "directory", "oid": hashlib.sha1(top.encode()).hexdigest(), "size": 0, "path": top})
                if not recursive:
                    continue
            e = commit.files[name]
            item = {"type": "file", "oid": e.oid, "size": e.size, "path": name}
            if e.lfs_sha256:
                item["lfs"] = {"oid": e.lfs_sha256, "size": e.size, "pointerSize": len(lfs_pointer(e.lfs_sha256, e.size))}
            out.append(item)
        return 200, out, {}

    def resolve(self, method, body, repo, rev, path):
        r = self._repo(repo)
        commit = self._commit(r, rev)
        entry = commit.files.get(path)
        if entry is None:
            raise _Error(404, "Entry not found", "EntryNotFound")
        data = self.state.lfs[entry.lfs_sha256] if entry.lfs_sha256 else entry.content
        headers = {"X-Repo-Commit": commit.oid, "ETag": f'"{entry.oid}"', "Content-Length": str(len(data))}
        if entry.lfs_sha256:
            headers.update({"X-Linked-Etag": f'"{entry.lfs_sha256}"', "X-Linked-Size": str(entry.size)})
        return 200, data, headers

