"""A Hugging Face hub on loopback, serving model repositories from local folders.

It answers what huggingface_hub asks a hub for when it downloads (HF_ENDPOINT pointed
here): the model info with file sizes (``/api/models/<repo>/revision/<rev>``), the file
tree of a commit (``/api/models/<repo>/tree/<rev>``), and each
file's HEAD and GET (``/<repo>/resolve/<rev>/<file>``) with the commit, ETag and size
headers, and the hub's error codes (RepoNotFound, RevisionNotFound, GatedRepo).
"""
from __future__ import annotations

import hashlib
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, tuple[Path, str, set[str]]] = {}  # repo -> (dir, commit, branches)
        self.gated: set[str] = set()
        self.file_gets: list[str] = []  # every GET of a file, to count downloads
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, repo: str, folder: str | Path, branches: tuple[str, ...] = ("main",)) -> str:
        """Serve ``folder`` as ``repo``; returns its commit hash."""
        folder = Path(folder)
        digest = hashlib.sha1(repo.encode())
        for f in sorted(folder.iterdir()):
            digest.update(f.name.encode() + f.read_bytes())
        commit = digest.hexdigest()
        self.repos[repo] = (folder, commit, set(branches))
        return commit

    def __enter__(self) -> "FakeHub":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _resolve(self, repo: str, revision: str) -> tuple[Path, str] | str:
        """(folder, commit) or the hub's error code."""
        if repo not in self.repos:
            return "RepoNotFound"
        if repo in self.gated:
            return "GatedRepo"
        folder, commit, branches = self.repos[repo]
        if revision not in branches and revision != commit:
            return "RevisionNotFound"
        return folder, commit

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _error(self, code: str) -> None:
                status = {"GatedRepo": 403, "RepoNotFound": 404}.get(code, 404)
                body = json.dumps({"error": code}).encode()
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("X-Error-Message", code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _send(self, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(200)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_HEAD(self):  # noqa: N802 (http.server's naming)
                self.do_GET()

            def do_GET(self):  # noqa: N802
                path = urllib.parse.unquote(urllib.parse.urlparse(self.path).path)
                if path.startswith("/api/models/") and "/tree/" in path:
                    return self._tree(path[len("/api/models/"):])
                if path.startswith("/api/models/"):
                    return self._info(path[len("/api/models/"):])
                return self._file(path.lstrip("/"))

            def _info(self, rest: str) -> None:
                repo, _, revision = rest.partition("/revision/")
                found = hub._resolve(repo, revision or "main")
                if isinstance(found, str):
                    return self._error(found)
                folder, commit = found
                siblings = [{"rfilename": f.name, "size": f.stat().st_size}
                            for f in sorted(folder.iterdir())]
                body = json.dumps({"id": repo, "modelId": repo, "sha": commit,
                                   "private": False, "siblings": siblings}).encode()
                self._send(body, {"Content-Type": "application/json"})

            def _tree(self, rest: str) -> None:
                repo, _, revision = rest.partition("/tree/")
                found = hub._resolve(repo, revision.split("/")[0])
                if isinstance(found, str):
                    return self._error(found)
                folder, _ = found
                entries = [{"type": "file", "path": f.name, "size": f.stat().st_size,
                            "oid": hashlib.sha1(f.read_bytes()).hexdigest()}
                           for f in sorted(folder.iterdir())]
                self._send(json.dumps(entries).encode(), {"Content-Type": "application/json"})

            def _file(self, rest: str) -> None:
                parts = rest.split("/")
                if "resolve" not in parts:
                    return self._error("EntryNotFound")
                i = parts.index("resolve")
                repo, revision, name = "/".join(parts[:i]), parts[i + 1], "/".join(parts[i + 2:])
                found = hub._resolve(repo, revision)
                if isinstance(found, str):
                    return self._error(found)
                folder, commit = found
                target = folder / name
                if not target.is_file():
                    return self._error("EntryNotFound")
                data = target.read_bytes()
                if self.command == "GET":
                    hub.file_gets.append(f"{repo}/{name}")
                self._send(data, {"X-Repo-Commit": commit,
                                  "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                                  "Content-Type": "application/octet-stream"})

        return Handler
