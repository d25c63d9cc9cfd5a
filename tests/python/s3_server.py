"""A real S3 server for the s3:// tests: moto's standalone server on 127.0.0.1 with signature
checking on, and a fault proxy on loopback in front of it that counts requests and injects 503s,
reset connections, truncated bodies, stalls and upload bodies damaged on the way (moto, like some
S3-compatible stores, does not check Content-MD5, so it stores a damaged body as it arrived).

Nothing here talks to anything but 127.0.0.1; every wait is bounded in time.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, List, Optional, Tuple

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((LOOPBACK, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {LOOPBACK}:{port} after {timeout} s")


class MotoServer:
    """`moto_server` on 127.0.0.1 with signature checking on: moto checks every request after
    INITIAL_NO_AUTH_ACTION_COUNT unauthenticated ones, which create the IAM user whose access
    key the tests sign with (moto accepts only keys of its IAM users)."""

    def __init__(self) -> None:
        exe = shutil.which("moto_server")
        if exe is None:
            raise RuntimeError("moto_server not found: pip install 'moto[server]' (scripts/deps.sh)")
        self.port = free_port()
        self.endpoint = f"http://{LOOPBACK}:{self.port}"
        # Parts of 4 KiB and up (S3 wants 5 MiB): multipart uploads of small test shards.
        env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="3", S3_UPLOAD_PART_MIN_SIZE="4096")
        self.proc = subprocess.Popen([exe, "-H", LOOPBACK, "-p", str(self.port)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        try:
            wait_for_port(self.port, 60)
            self.access_key, self.secret_key = self._make_user()
        except BaseException:
            self.stop()
            raise

    def _make_user(self) -> Tuple[str, str]:
        import boto3
        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name="us-east-1",
                           aws_access_key_id="setup", aws_secret_access_key="setup")
        iam.create_user(UserName="libshard-test")
        key = iam.create_access_key(UserName="libshard-test")["AccessKey"]
        policy = {"Version": "2012-10-17",
                  "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="libshard-test", PolicyName="all",
                            PolicyDocument=json.dumps(policy))
        return key["AccessKeyId"], key["SecretAccessKey"]

    def s3(self):
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key,
                            config=Config(retries={"max_attempts": 2}, connect_timeout=5,
                                          read_timeout=30))

    def upload_dir(self, bucket: str, prefix: str, directory: Path) -> None:
        s3 = self.s3()
        try:
            s3.create_bucket(Bucket=bucket)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
        for p in sorted(Path(directory).iterdir()):
            if p.is_file():
                s3.put_object(Bucket=bucket, Key=f"{prefix}/{p.name}", Body=p.read_bytes())

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of `upstream_port`: forwards every request unchanged
    (Host included, so SigV4 signatures stay valid), counts them, and injects the faults queued
    with `inject` into the next GETs of shard bytes (ranged GETs)."""

    def __init__(self, upstream_port: int, other_version=None) -> None:
        self.upstream_port = upstream_port
        # For "ignore-if-match": (path, range header) -> the bytes the object holds now, fetched
        # by the test's own signed client (a server that ignores If-Match serves those).
        self.other_version = other_version
        self.lock = threading.Lock()
        self.gets: Counter = Counter()  # (path, range) -> ranged GETs delivered in full
        self.requests: List[Tuple[str, str, str]] = []  # (method, path, range)
        self.faults: List[str] = []     # "503", "reset", "truncate", "stall:SECONDS", "pass"
        # Faults for the next PUTs (objects and parts): "503", "reset", "pass", "hold:SECONDS"
        # (the request is held, never forwarded, then the connection closed), "damage" (one byte
        # of the body flipped before it is forwarded).
        self.upload_faults: List[str] = []
        self.path_faults: Dict[str, List[str]] = {}  # PUTs whose path has KEY: these faults
        # GETs whose path has KEY (any range): "flip" (one byte of the body flipped),
        # "cut-nolength" (half the body, no Content-Length, then the connection closed),
        # "ignore-if-match" (a 412 answered with the object's current bytes and no ETag), "pass".
        self.get_faults: Dict[str, List[str]] = {}
        # Paths with one of these: served as by a server that keeps no versions: If-Match is
        # dropped before the request is forwarded, and no ETag comes back (GET and HEAD).
        self.unversioned: List[str] = []
        self.responses: List[Tuple[str, str, int]] = []  # (method, path, status) from the server
        self.injected: Counter = Counter()
        self.statuses: Counter = Counter()  # HTTP status -> responses from the server
        self.stalling = threading.Event()  # set while a stall fault holds a response
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                rng = self.headers.get("Range", "")
                fault = None
                with proxy.lock:
                    proxy.requests.append((self.command, self.path, rng))
                    get_key = next((k for k in proxy.get_faults if k in self.path), None)
                    if self.command == "GET" and get_key is not None:
                        fault = proxy.get_faults[get_key].pop(0)
                        if not proxy.get_faults[get_key]:
                            del proxy.get_faults[get_key]
                        if fault == "pass":
                            fault = None
                        else:
                            proxy.injected["get-" + fault] += 1
                    # Faults go to block GETs, not to the shard headers fetched at open.
                    elif self.command == "GET" and rng and rng != "bytes=0-4095" and proxy.faults:
                        fault = proxy.faults.pop(0)
                        if fault == "pass":  # let this one through
                            fault = None
                        else:
                            proxy.injected[fault.split(":")[0]] += 1
                    elif self.command == "PUT" and any(k in self.path for k in proxy.path_faults):
                        key = next(k for k in proxy.path_faults if k in self.path)
                        fault = proxy.path_faults[key].pop(0)
                        if not proxy.path_faults[key]:
                            del proxy.path_faults[key]
                        proxy.injected["put-" + fault.split(":")[0]] += 1
                    elif self.command == "PUT" and proxy.upload_faults:
                        fault = proxy.upload_faults.pop(0)
                        if fault == "pass":
                            fault = None
                        else:
                            proxy.injected["put-" + fault.split(":")[0]] += 1
                    unversioned = any(k in self.path for k in proxy.unversioned)
                if fault == "damage" and body:
                    damaged = bytearray(body)
                    damaged[len(damaged) // 2] ^= 0xFF
                    body = bytes(damaged)
                if fault is not None and fault.startswith("hold:"):
                    proxy.stalling.set()
                    time.sleep(float(fault.split(":")[1]))
                    proxy.stalling.clear()
                    self.close_connection = True
                    self.connection.close()
                    return
                if fault == "503":
                    msg = (b"<?xml version=\"1.0\"?><Error><Code>SlowDown</Code>"
                           b"<Message>Please reduce your request rate.</Message></Error>")
                    self.send_response(503)
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                if fault == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                conn = http.client.HTTPConnection(LOOPBACK, proxy.upstream_port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if not (unversioned and k.lower() == "if-match")}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                with proxy.lock:
                    proxy.statuses[resp.status] += 1
                    proxy.responses.append((self.command, self.path, resp.status))
                status, resp_headers = resp.status, resp.getheaders()
                if unversioned:
                    resp_headers = [(k, v) for k, v in resp_headers if k.lower() != "etag"]
                if fault == "ignore-if-match" and status == 412 and proxy.other_version:
                    data = proxy.other_version(self.path, rng)
                    status, resp_headers = (206 if rng else 200), []
                    if rng:
                        first = int(rng.split("=")[1].split("-")[0])
                        resp_headers = [("Content-Range",
                                         f"bytes {first}-{first + len(data) - 1}/*")]
                if fault == "flip" and 200 <= status < 300 and data:
                    data = data[: len(data) // 2] + bytes([data[len(data) // 2] ^ 0x5A]) + \
                        data[len(data) // 2 + 1:]
                self.send_response(status)
                for k, v in resp_headers:
                    if k.lower() not in ("transfer-encoding", "connection", "content-length",
                                         "server", "date"):
                        self.send_header(k, v)
                if fault == "cut-nolength" and 200 <= status < 300:
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                # HEAD: the object's length, as the server said it.
                self.send_header("Content-Length", resp.getheader("Content-Length", "0")
                                 if self.command == "HEAD" else str(len(data)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                if fault == "truncate":
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault is not None and fault.startswith("stall:"):
                    self.wfile.write(data[:1])
                    self.wfile.flush()
                    proxy.stalling.set()
                    time.sleep(float(fault.split(":")[1]))
                    proxy.stalling.clear()
                    self.close_connection = True
                    return
                self.wfile.write(data)
                self.wfile.flush()
                if self.command == "GET" and rng and 200 <= resp.status < 300:
                    with proxy.lock:  # delivered in full
                        proxy.gets[(self.path, rng)] += 1

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self.server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.endpoint = f"http://{LOOPBACK}:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def inject(self, *faults: str) -> None:
        with self.lock:
            self.faults.extend(faults)

    def inject_put_path(self, key: str, *faults: str) -> None:
        """Faults for the next PUTs whose path contains `key` (before the upload_faults)."""
        with self.lock:
            self.path_faults.setdefault(key, []).extend(faults)

    def inject_get_path(self, key: str, *faults: str) -> None:
        """Faults for the next GETs whose path contains `key`, any range (before `inject`'s)."""
        with self.lock:
            self.get_faults.setdefault(key, []).extend(faults)

    def unversion(self, key: str) -> None:
        """From now on, paths containing `key` are served without versions: If-Match ignored,
        no ETag sent (a server that ignores conditional requests)."""
        with self.lock:
            self.unversioned.append(key)

    def inject_upload(self, *faults: str) -> None:
        with self.lock:
            self.upload_faults.extend(faults)

    def completed_parts(self) -> set:
        """(object path, part number) of every UploadPart the server answered 200."""
        from urllib.parse import parse_qs, urlsplit
        out = set()
        with self.lock:
            for method, path, status in self.responses:
                q = parse_qs(urlsplit(path).query)
                if method == "PUT" and status == 200 and "partNumber" in q:
                    out.add((urlsplit(path).path, int(q["partNumber"][0])))
        return out

    def part_puts(self) -> List[Tuple[str, int]]:
        """(object path, part number) of every UploadPart request received (retries included)."""
        from urllib.parse import parse_qs, urlsplit
        out = []
        with self.lock:
            for method, path, _ in self.requests:
                q = parse_qs(urlsplit(path).query)
                if method == "PUT" and "partNumber" in q:
                    out.append((urlsplit(path).path, int(q["partNumber"][0])))
        return out

    def reset_counts(self) -> None:
        with self.lock:
            self.gets.clear()
            self.requests.clear()
            self.injected.clear()
            self.statuses.clear()
            self.faults.clear()
            self.upload_faults.clear()
            self.path_faults.clear()
            self.get_faults.clear()
            self.responses.clear()

    def shard_gets(self) -> Dict[Tuple[str, str], int]:
        """Ranged GETs of shard bytes (the shard header fetched at open is 0-4095; blocks are
        the other ranges)."""
        with self.lock:
            return {k: v for k, v in self.gets.items() if ".lss" in k[0]}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def s3_env(endpoint: str, access_key: str, secret_key: str, **extra: str) -> Dict[str, str]:
    """The environment of a process reading through `endpoint` (loopback only)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=access_key, AWS_SECRET_ACCESS_KEY=secret_key,
               AWS_REGION="us-east-1", AWS_ENDPOINT_URL_S3=endpoint,
               AWS_SHARED_CREDENTIALS_FILE="/nonexistent", AWS_CONFIG_FILE="/nonexistent",
               LIBSHARD_S3_MAX_ATTEMPTS="6", LIBSHARD_S3_BACKOFF_MS="20",
               LIBSHARD_S3_STALL_SECONDS="2", LIBSHARD_S3_TIMEOUT_SECONDS="30",
               LIBSHARD_CACHE_MIN_FREE="0")
    env.update(extra)
    return env


def gs_env(endpoint: str, access_key: str, secret_key: str, **extra: str) -> Dict[str, str]:
    """The environment of a process reading gs:// through `endpoint` (loopback only): the same
    server, named by Cloud Storage's HMAC variables and endpoint override, and no AWS_ variable
    (gs:// reads none, so none may stand in for its own)."""
    env = {k: v for k, v in s3_env(endpoint, access_key, secret_key).items()
           if not k.startswith(("AWS_", "GS_"))}
    env.update(GS_ACCESS_KEY_ID=access_key, GS_SECRET_ACCESS_KEY=secret_key,
               LIBSHARD_GS_ENDPOINT=endpoint)
    env.update(extra)
    return env


# ---- The fixtures every s3:// and gs:// test module uses (one copy: a module names its own
# settings) ----

def apply_env(monkeypatch, env: Dict[str, str]) -> None:
    """Makes `env` (s3_env's or gs_env's) this process's: every AWS_ and GS_ variable replaced,
    LIBSHARD_ ones set."""
    for k in [k for k in os.environ if k.startswith(("AWS_", "GS_"))]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        if k.startswith(("AWS_", "GS_", "LIBSHARD_")):
            monkeypatch.setenv(k, v)


def server_fixture(bucket: Optional[str] = None, skip_without_moto: bool = False):
    """A module-scoped `server` fixture: moto on loopback, with `bucket` made when given."""
    import pytest

    @pytest.fixture(scope="module")
    def server():
        try:
            s = MotoServer()
        except RuntimeError as e:
            if skip_without_moto:
                pytest.skip(str(e))
            raise
        try:
            if bucket is not None:
                s.s3().create_bucket(Bucket=bucket)
            yield s
        finally:
            s.stop()
    return server


def proxy_fixture(other_version: bool = False):
    """A `proxy` fixture: a FaultProxy in front of `server`; with `other_version`, the
    "ignore-if-match" fault serves what the object holds now (read by a signed client)."""
    import pytest

    @pytest.fixture
    def proxy(server):
        serve = None
        if other_version:
            s3 = server.s3()

            def serve(path, rng):
                bucket, key = path.split("?")[0].lstrip("/").split("/", 1)
                kw = {"Range": rng} if rng else {}
                return s3.get_object(Bucket=bucket, Key=key, **kw)["Body"].read()
        p = FaultProxy(server.port, other_version=serve)
        try:
            yield p
        finally:
            p.stop()
    return proxy


def env_fixture(scheme: str = "s3", **extra):
    """An `env` fixture: s3_env (gs_env for scheme "gs") through `proxy` with `extra` (a value
    may be a function of the test's tmp_path), made this process's environment."""
    import pytest

    make = {"s3": s3_env, "gs": gs_env}[scheme]

    @pytest.fixture
    def env(server, proxy, monkeypatch, tmp_path):
        e = make(proxy.endpoint, server.access_key, server.secret_key,
                 **{k: str(v(tmp_path)) if callable(v) else str(v) for k, v in extra.items()})
        apply_env(monkeypatch, e)
        return e
    return env
